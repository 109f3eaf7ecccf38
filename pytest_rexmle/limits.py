"""The limits of one run as task.yaml, ``--rexmle-limit`` and the policy state them: sizes (``64G``), counts and
CPUs over the project's defaults, ``None`` for unlimited. A plain value the task spec holds; the local sandbox
enforces it (:mod:`pytest_rexmle.runtime.sandbox.limits`: cgroups, rlimits, the disk watch), Docker and Slurm
pass it on.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from typing import Any

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*$", re.IGNORECASE)
NAMES = ("memory", "processes", "file_size", "disk", "tmp", "open_files", "shm", "cpus")
COUNTS = ("processes", "open_files")


class LimitError(ValueError):
    pass


def parse_size(text: object) -> int:
    """``64G``, ``512M``, ``1.5GiB`` or a number of bytes (a number is bytes; anything else is read as text)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if text <= 0:
            raise LimitError(f"size must be positive, got {text!r}")
        return int(text)
    match = _SIZE.match(str(text))
    if not match:
        raise LimitError(f"not a size: {text!r} (use e.g. 512M, 8G)")
    value = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    if value <= 0:
        raise LimitError(f"size must be positive, got {text!r}")
    return value


def format_size(value: int) -> str:
    for unit in ("T", "G", "M", "K"):
        if value >= _UNITS[unit] and value % _UNITS[unit] == 0:
            return f"{value // _UNITS[unit]} {unit}iB"
    if value >= _UNITS["M"]:
        return f"{value / _UNITS['G']:.1f} GiB" if value >= _UNITS["G"] else f"{value / _UNITS['M']:.1f} MiB"
    return f"{value} B"


@dataclass(frozen=True)
class Limits:
    """Per-run limits; ``None`` means unlimited. Sizes are bytes, processes a count."""
    memory: int | None = 16 << 30
    processes: int | None = 4096  # threads count too (BLAS and PyTorch start one per core)
    file_size: int | None = 64 << 30
    disk: int | None = 100 << 30
    tmp: int | None = 20 << 30
    # None below: the mechanism's own default (Docker's, see runtime/docker.py); the local sandbox sets
    # RLIMIT_NOFILE when ``open_files`` is given and has no CPU quota or separate /dev/shm
    open_files: int | None = None
    shm: int | None = None
    cpus: float | None = None

    def with_overrides(self, pairs: dict[str, object]) -> Limits:
        """``{"memory": "64G", "processes": "2000", "tmp": "none"}`` over these limits."""
        changes: dict[str, Any] = {}   # each value of its field's type: sizes and counts int, cpus float
        for key, raw in pairs.items():
            name = key.strip().replace("-", "_")
            if name not in NAMES:
                raise LimitError(f"unknown limit {key!r}; known: {', '.join(NAMES)}")
            if raw is None or str(raw).strip().lower() in ("none", "unlimited", "0"):
                changes[name] = None
            elif name in COUNTS:
                changes[name] = _positive(name, raw, int, "a count")
            elif name == "cpus":
                changes[name] = _positive(name, raw, float, "a number of CPUs")
            else:
                changes[name] = parse_size(raw)
        return replace(self, **changes)

    def describe(self, name: str) -> str:
        value = getattr(self, name)
        if value is None:
            return "unlimited"
        return f"{value:g}" if name in (*COUNTS, "cpus") else format_size(value)

    def to_json(self) -> dict[str, int | None]:
        return asdict(self)


def _positive(name: str, raw: object, kind: type, what: str) -> int | float:
    try:
        value = kind(str(raw))
    except ValueError:
        raise LimitError(f"limit {name} expects {what}, got {raw!r}") from None
    if value <= 0:
        raise LimitError(f"limit {name} must be positive")
    return value


LABELS = {"memory": "memory", "processes": "process", "file_size": "file size", "disk": "workspace disk",
          "tmp": "/tmp size", "open_files": "open files", "shm": "shared memory", "cpus": "CPU"}


def exceeded_message(limits: Limits, name: str, detail: str = "") -> str:
    message = f"{LABELS[name]} limit of {limits.describe(name)} exceeded"
    return f"{message} ({detail})" if detail else message


def parse_pairs(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        for item in str(pair).replace(",", " ").split():
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise LimitError(f"limits are NAME=VALUE (e.g. memory=64G), got {item!r}")
            out[key] = value
    return out
