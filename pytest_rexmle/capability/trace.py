"""What a judge reads of a run: its logs (the execution trace) and the code it left in the workspace.

Sources, in a fixed order so evidence and section labels are reproducible:

1. ``logs/agent.stdout.log``, ``logs/agent.stderr.log``, then other text files in ``logs/`` (sorted);
2. text logs the agent kept in its workspace (``*.log``, ``*.md``, ``*.txt``, ``*.jsonl``, ``*.out``), sorted;
3. code and configuration in the workspace (``*.py``, ``*.sh``, ``*.yaml``, ``*.yml``, ``*.cfg``, ``*.toml``).

``workspace/agent/`` is skipped: the ``command`` agent copies its own scaffold there, and a scaffold's
prompt templates mention strategies ("consider test-time augmentation") that the run never executed.
Hidden folders, virtual environments, ``site-packages``, ``node_modules`` and caches are skipped too, as
are binary files. ANSI colour codes are removed.

The LLM judge reads sources 1–2 with fenced code blocks removed (capability.md §2), cut into sections of
at most 15 000 characters at line boundaries; the rules judge also reads the code (source 3).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

LOG, CODE = "log", "code"
SECTION_CHARS = 15_000
MAX_FILE_BYTES = 10 * 1024 * 1024
LOG_SUFFIXES = (".log", ".md", ".txt", ".jsonl", ".out")
CODE_SUFFIXES = (".py", ".sh", ".yaml", ".yml", ".cfg", ".toml")
PRIMARY_LOGS = ("agent.stdout.log", "agent.stderr.log")
SKIP_DIRS = {"agent", "__pycache__", "node_modules", "site-packages", "dist-packages", "venv", "env", ".venv"}
#: files the harness or adapters write for other purposes (not part of the agent's trace)
SKIP_FILES = {"usage.json", "capability.json", "stages.json"}
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass(frozen=True)
class Source:
    """One text file of the run; ``rel`` is its path relative to the run folder (used in evidence)."""

    rel: str
    kind: str
    text: str

    def lines(self) -> list[str]:
        return self.text.splitlines()


def _read_text(path: Path) -> str | None:
    try:
        if not path.is_file() or path.is_symlink():
            return None
        with path.open("rb") as fh:
            data = fh.read(MAX_FILE_BYTES)
    except OSError:
        return None
    if b"\x00" in data[:8192]:
        return None
    return _ANSI.sub("", data.decode("utf-8", "replace"))


def _walk(root: Path, top: Path) -> Iterator[Path]:
    """Files under ``root`` in sorted order, pruning skipped and hidden folders (never following links)."""
    try:
        entries = sorted(root.iterdir(), key=lambda p: p.name)
    except OSError:
        return
    for entry in entries:
        if entry.is_symlink():
            continue
        if entry.is_dir():
            if entry.name.startswith(".") or (entry.name in SKIP_DIRS and (entry.parent == top or entry.name != "agent")):
                continue
            yield from _walk(entry, top)
        elif entry.is_file():
            yield entry


def collect_sources(run_dir: Path, *, include_code: bool = True, include_workspace_logs: bool = True) -> list[Source]:
    """All judge-readable text of a run, logs first (see module docstring for the order and exclusions)."""
    run_dir = Path(run_dir)
    out: list[Source] = []
    logs = run_dir / "logs"
    ordered = [logs / name for name in PRIMARY_LOGS]
    if logs.is_dir():
        ordered += [p for p in _walk(logs, logs) if p.name not in PRIMARY_LOGS]
    for path in ordered:
        if path.name in SKIP_FILES or (path.name not in PRIMARY_LOGS and path.suffix not in LOG_SUFFIXES):
            continue
        text = _read_text(path)
        if text is not None:
            out.append(Source(path.relative_to(run_dir).as_posix(), LOG, text))
    workspace = run_dir / "workspace"
    if workspace.is_dir() and (include_workspace_logs or include_code):
        files = list(_walk(workspace, workspace))
        if include_workspace_logs:
            out += _sources(run_dir, [p for p in files if p.suffix in LOG_SUFFIXES and p.name not in SKIP_FILES], LOG)
        if include_code:
            out += _sources(run_dir, [p for p in files if p.suffix in CODE_SUFFIXES], CODE)
    return out


def _sources(run_dir: Path, paths: list[Path], kind: str) -> list[Source]:
    found = []
    for path in paths:
        text = _read_text(path)
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
