"""What a judge reads of a run: its logs (the execution trace) and the code it left in the workspace.

Sources, in a fixed order so evidence and section labels are reproducible:

1. ``logs/agent.stdout.log``, ``logs/agent.stderr.log``, then other text files in ``logs/`` (sorted);
2. text logs the agent kept in its workspace (``*.log``, ``*.md``, ``*.txt``, ``*.jsonl``, ``*.out``), sorted;
3. code and configuration in the workspace (``*.py``, ``*.sh``, ``*.yaml``, ``*.yml``, ``*.cfg``, ``*.toml``).

``workspace/agent/`` is skipped: the ``command`` agent copies its own scaffold there, and a scaffold's
prompt templates mention strategies ("consider test-time augmentation") that the run never executed.
Hidden folders, virtual environments, ``site-packages``, ``node_modules`` and caches are skipped too, as
are binary files. ANSI escapes and control characters are removed.

Everything here was written by the agent, so reading is bounded (see :mod:`pytest_rexmle.hostile`): regular
files only (never a FIFO, a device or a link), at most ``MAX_FILE_BYTES`` of each file (its head and its
tail, with a marker line for what was skipped), at most ``MAX_RUN_BYTES`` per run in the order above, at
most ``MAX_FILES`` files and ``MAX_DEPTH`` folder levels. A 1 GiB log costs 1 MiB of reading.

The LLM judge reads sources 1–2 with fenced code blocks removed (capability.md §2), cut into sections of
at most 15 000 characters at line boundaries; the rules judge also reads the code (source 3).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..hostile import RefusedFile, clean_text, read_head_tail

LOG, CODE = "log", "code"
SECTION_CHARS = 15_000
#: bytes read of one file (head and tail halves), of one run, files considered, folder depth
MAX_FILE_BYTES = 1024 * 1024
MAX_RUN_BYTES = 4 * 1024 * 1024
MAX_FILES = 5000
MAX_DEPTH = 24
LOG_SUFFIXES = (".log", ".md", ".txt", ".jsonl", ".out")
CODE_SUFFIXES = (".py", ".sh", ".yaml", ".yml", ".cfg", ".toml")
PRIMARY_LOGS = ("agent.stdout.log", "agent.stderr.log")
SKIP_DIRS = {"agent", "__pycache__", "node_modules", "site-packages", "dist-packages", "venv", "env", ".venv"}
#: files the harness or adapters write for other purposes (not part of the agent's trace)
SKIP_FILES = {"usage.json", "capability.json", "stages.json"}
_FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass(frozen=True)
class Source:
    """One text file of the run; ``rel`` is its path relative to the run folder (used in evidence)."""

    rel: str
    kind: str
    text: str

    def lines(self) -> list[str]:
        return self.text.splitlines()


class _Budget:
    """Bytes left to read for one run."""

    def __init__(self, total: int) -> None:
        self.left = total


def _read_text(path: Path, budget: _Budget | None = None) -> str | None:
    """A text file's head and tail (cleaned), or None for binary, special or unreadable files."""
    allowed = MAX_FILE_BYTES if budget is None else min(MAX_FILE_BYTES, budget.left)
    if allowed <= 0:
        return None
    try:
        head, tail, skipped = read_head_tail(path, allowed - allowed // 2, allowed // 2)
    except RefusedFile:
        return None
    if b"\x00" in head[:8192]:
        return None
    if budget is not None:
        budget.left -= len(head) + len(tail)
    text = head.decode("utf-8", "replace")
    if skipped:
        text = text.rpartition("\n")[0] if "\n" in text else text
        rest = tail.decode("utf-8", "replace")
        rest = rest.partition("\n")[2] if "\n" in rest else rest
        text += f"\n[... {skipped} bytes not read ...]\n" + rest
    return clean_text(text, keep_newlines=True)


def _listing(folder: Path) -> list[tuple[str, int]]:
    try:
        with os.scandir(folder) as it:
            return sorted((e.name, e.stat(follow_symlinks=False).st_mode) for e in it)
    except OSError:
        return []


def _walk(root: Path, top: Path) -> Iterator[Path]:
    """Regular files under ``root`` in sorted depth-first order, pruning skipped and hidden folders, never
    following links; iterative, at most MAX_DEPTH levels and MAX_FILES files (later ones are not read)."""
    stack: list[tuple[Path, list[tuple[str, int]], int]] = [(root, _listing(root), 0)]
    found = 0
    while stack:
        folder, entries, index = stack[-1]
        if index >= len(entries):
            stack.pop()
            continue
        stack[-1] = (folder, entries, index + 1)
        name, mode = entries[index]
        entry = folder / name
        if stat.S_ISDIR(mode):
            if len(stack) < MAX_DEPTH and not name.startswith(".") \
                    and not (name in SKIP_DIRS and (folder == top or name != "agent")):
                stack.append((entry, _listing(entry), 0))
        elif stat.S_ISREG(mode):
            found += 1
            if found > MAX_FILES:
                return
            yield entry


def collect_sources(run_dir: Path, *, include_code: bool = True, include_workspace_logs: bool = True) -> list[Source]:
    """All judge-readable text of a run, logs first (see module docstring for the order and bounds)."""
    run_dir = Path(run_dir)
    budget = _Budget(MAX_RUN_BYTES)
    out: list[Source] = []
    logs = run_dir / "logs"
    ordered = [logs / name for name in PRIMARY_LOGS]
    if logs.is_dir() and not logs.is_symlink():
        ordered += [p for p in _walk(logs, logs) if p.name not in PRIMARY_LOGS]
    for path in ordered:
        if path.name in SKIP_FILES or (path.name not in PRIMARY_LOGS and path.suffix not in LOG_SUFFIXES):
            continue
        text = _read_text(path, budget)
        if text is not None:
            out.append(Source(path.relative_to(run_dir).as_posix(), LOG, text))
    workspace = run_dir / "workspace"
    if workspace.is_dir() and not workspace.is_symlink() and (include_workspace_logs or include_code):
        files = list(_walk(workspace, workspace))
        if include_workspace_logs:
            out += _sources(run_dir, [p for p in files if p.suffix in LOG_SUFFIXES and p.name not in SKIP_FILES], LOG,
                            budget)
        if include_code:
            out += _sources(run_dir, [p for p in files if p.suffix in CODE_SUFFIXES], CODE, budget)
    return out


def _sources(run_dir: Path, paths: list[Path], kind: str, budget: _Budget | None = None) -> list[Source]:
    found = []
    for path in paths:
        text = _read_text(path, budget)
        if text is not None:
            found.append(Source(path.relative_to(run_dir).as_posix(), kind, text))
    return found


def strip_code_blocks(text: str) -> str:
    """Remove fenced code blocks (```/~~~ up to the matching fence), as the reference does before judging."""
    kept, inside = [], None
    for line in text.splitlines():
        match = _FENCE.match(line)
        if match:
            if inside is None:
                inside = match.group(1)
                continue
            if match.group(1) == inside:
                inside = None
                continue
        if inside is None:
            kept.append(line)
    return "\n".join(kept)


def trace_text(sources: list[Source], *, keep_code: bool = False) -> str:
    """The textual execution trace: every log source under a ``=== path ===`` header line."""
    parts = []
    for src in sources:
        if src.kind != LOG or not src.text.strip():
            continue
        body = src.text if keep_code else strip_code_blocks(src.text)
        if body.strip():
            parts.append(f"=== {src.rel} ===\n{body.rstrip()}")
    return "\n".join(parts)


def split_sections(text: str, limit: int = SECTION_CHARS) -> list[str]:
    """Consecutive sections of at most ``limit`` characters, cut at line ends (a longer line is cut hard)."""
    if limit < 1:
        raise ValueError("section limit must be positive")
    sections: list[str] = []
    current: list[str] = []
    size = 0
    for line in text.splitlines(keepends=True):
        while len(line) > limit:
            if current:
                sections.append("".join(current))
                current, size = [], 0
            sections.append(line[:limit])
            line = line[limit:]
        if size + len(line) > limit and current:
            sections.append("".join(current))
            current, size = [], 0
        if line:
            current.append(line)
            size += len(line)
    if current:
        sections.append("".join(current))
    return [s for s in sections if s.strip()]
