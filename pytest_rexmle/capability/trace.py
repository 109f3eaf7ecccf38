"""What a judge reads of a run: what the harness observed, never what the agent says about itself.

Sources, in a fixed order so evidence and section labels are reproducible:

1. ``trace`` — the model calls the session's gateway recorded (``logs/model-calls.jsonl``, see
   :mod:`pytest_rexmle.capability.observed`), one source per call (``logs/model-calls.jsonl#<n>``):
   what the model was shown (commands, their outputs, errors) and what it answered; only calls a provider
   answered (a refused, failed or unanswered call is no evidence, ``observed.is_answered``);
2. ``code`` — code and configuration in the workspace (``*.py``, ``*.sh``, ``*.yaml``, ``*.yml``,
   ``*.cfg``, ``*.toml``, ``*.ipynb``) **that the trace corroborates**: its file name appears in the trace
   (the model wrote, ran or read it) or one of its substantial lines (``MIN_SHARED_CHARS``) does;
3. ``files`` — an inventory of the files that exist in ``workspace/`` and ``submission/`` (path and
   size; artefacts such as checkpoints, fold models, predictions), for the LLM judge.

Never read as evidence: the agent's stdout and stderr, log or text files it wrote (``*.log``, ``*.md``,
``*.txt``, ``*.jsonl`` in the workspace or ``logs/``), its usage file. They are claims: one line per
strategy would earn all 13. A file the agent dropped in its workspace that the observed
trace never mentions is a claim as well. Where the paper's protocol judges "the execution log", this
project's execution log is the observed trace, the same for every agent, bring-your-own included; a run
without it (no gateway, ``--rexmle-network=bridge``) is judged on nothing and flagged.

``workspace/agent/`` is skipped: the ``command`` agent copies its own scaffold there, and a scaffold's
prompt templates mention strategies ("consider test-time augmentation") that the run never executed.
Hidden folders, virtual environments, ``site-packages``, ``node_modules`` and caches are skipped too, as
are binary files. ANSI escapes and control characters are removed.

Everything in the workspace was written by the agent, so reading is bounded (see
:mod:`pytest_rexmle.agent_output`): regular files only (never a FIFO, a device or a link), at most
``MAX_FILE_BYTES`` of each file (its head and its tail, with a marker line for what was skipped), at
most ``MAX_RUN_BYTES`` per run, at most ``MAX_FILES`` files and ``MAX_DEPTH`` folder levels, and on the
judge's clock (:mod:`pytest_rexmle.capability.clock`), checked per record, file and folder entry.

The LLM judge reads sources 1 and 3 with fenced code blocks removed (as the paper's protocol does), cut into
sections of at most 15 000 characters at line boundaries; the rules judge reads sources 1 and 2.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..agent_output import RefusedFile, clean_text, read_head_tail
from .clock import Clock, check
from .observed import MODEL_CALLS, read_model_calls

TRACE, CODE, FILES = "trace", "code", "files"
SECTION_CHARS = 15_000
#: bytes read of one file (head and tail halves), of one run, files considered, folder depth
MAX_FILE_BYTES = 1024 * 1024
MAX_RUN_BYTES = 4 * 1024 * 1024
MAX_FILES = 5000
MAX_DEPTH = 24
CODE_SUFFIXES = (".py", ".sh", ".yaml", ".yml", ".cfg", ".toml", ".ipynb")
#: a code line this long (normalised) found in the trace ties the file to the observed run
MIN_SHARED_CHARS = 30
#: files listed in the inventory source
MAX_INVENTORY = 300
SKIP_DIRS = {"agent", "__pycache__", "node_modules", "site-packages", "dist-packages", "venv", "env", ".venv"}
#: a code file name; it starts where a run of name characters starts (the look-behind), so a long run of
#: letters is tried once, not from each of its characters (a quadratic scan of 1 M letters takes ~50 min)
_CODE_NAME = re.compile(r"(?<![\w.+-])[\w.+-]+\.(?:py|sh|ya?ml|cfg|toml|ipynb)\b")
_FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass(frozen=True)
class Source:
    """One text file of the run; ``rel`` is its path relative to the run folder (used in evidence)."""

    rel: str
    kind: str
    text: str


@dataclass
class _Budget:
    """Bytes left to read for one run."""

    left: int


def _read_text(path: Path, budget: _Budget) -> str | None:
    """A text file's head and tail (cleaned), or None for binary, special or unreadable files."""
    allowed = min(MAX_FILE_BYTES, budget.left)
    if allowed <= 0:
        return None
    try:
        head, tail, skipped = read_head_tail(path, allowed - allowed // 2, allowed // 2)
    except RefusedFile:
        return None
    if b"\x00" in head[:8192]:
        return None
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


def _walk(root: Path, clock: Clock | None = None) -> Iterator[Path]:
    """Regular files under ``root`` in sorted depth-first order, pruning skipped and hidden folders, never
    following links; iterative, at most MAX_DEPTH levels and MAX_FILES files (later ones are not read)."""
    stack: list[tuple[Path, Iterator[tuple[str, int]]]] = [(root, iter(_listing(root)))]
    found = 0
    while stack:
        folder, entries = stack[-1]
        for name, mode in entries:
            check(clock, "listing the run's files")
            entry = folder / name
            if stat.S_ISDIR(mode):
                if len(stack) < MAX_DEPTH and not name.startswith(".") \
                        and not (name in SKIP_DIRS and (folder == root or name != "agent")):
                    stack.append((entry, iter(_listing(entry))))
                    break  # into the folder; this one's listing goes on after it
            elif stat.S_ISREG(mode):
                found += 1
                if found > MAX_FILES:
                    return
                yield entry
        else:
            stack.pop()


def collect_sources(run_dir: Path, *, include_files: bool = True, clock: Clock | None = None) -> list[Source]:
    """The observed evidence of a run: trace, corroborated code, file inventory (module docstring).
    Every step checks ``clock`` (raises :class:`~pytest_rexmle.capability.clock.JudgeTimedOut`)."""
    run_dir = Path(run_dir)
    trace = read_model_calls(run_dir, clock)
    out = [Source(f"{MODEL_CALLS}#{call.number}", TRACE, call.text) for call in trace.calls]
    workspace = run_dir / "workspace"
    files = list(_walk(workspace, clock)) if workspace.is_dir() and not workspace.is_symlink() else []
    if out:
        out += _corroborated_code(run_dir, [p for p in files if p.suffix in CODE_SUFFIXES], out, clock)
    if include_files:
        submission = run_dir / "submission"
        listed = files + (list(_walk(submission, clock)) if not submission.is_symlink() else [])
        lines = [f"{p.relative_to(run_dir).as_posix()} ({_size(p)} bytes)" for p in listed[:MAX_INVENTORY]]
        if len(listed) > MAX_INVENTORY:
            lines.append(f"[... {len(listed) - MAX_INVENTORY} more files ...]")
        if lines:
            out.append(Source("files", FILES, "Files in the run folder after the run (observed by the harness):\n"
                              + "\n".join(lines)))
    return out


def _corroborated_code(run_dir: Path, paths: list[Path], trace: list[Source],
                       clock: Clock | None = None) -> list[Source]:
    """The code files the trace corroborates, in walk order. Files the trace names are read first, so
    that large files it never mentions cannot use up the run's budget before the ones that matter;
    the others are scanned for a shared line on a budget of their own."""
    names, shared = _trace_index(trace, clock)
    budget, scan = _Budget(MAX_RUN_BYTES), _Budget(MAX_RUN_BYTES)
    found: dict[Path, str] = {}
    for path in (p for p in paths if p.name in names):
        check(clock, "reading the code the trace names")
        text = _read_text(path, budget)
        if text is not None:
            found[path] = text
    for path in (p for p in paths if p.name not in names):
        check(clock, "reading the code the trace names")
        if budget.left <= 0:
            break
        text = _read_text(path, scan)
        if text is not None and _shares_a_line(text, shared):
            budget.left -= len(text)
            found[path] = text
    return [Source(p.relative_to(run_dir).as_posix(), CODE, found[p]) for p in paths if p in found]


def has_trace(sources: list[Source]) -> bool:
    return any(s.kind == TRACE and s.text.strip() for s in sources)


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0


def _trace_index(sources: list[Source], clock: Clock | None = None) -> tuple[set[str], set[str]]:
    """(code file names the trace mentions, normalised long lines of the trace)."""
    names: set[str] = set()
    lines: set[str] = set()
    for src in sources:
        check(clock, "indexing the trace")
        names.update(m.group(0).rsplit("/", 1)[-1] for m in _CODE_NAME.finditer(src.text))
        lines.update(n for line in src.text.splitlines() if len(n := " ".join(line.split())) >= MIN_SHARED_CHARS)
    return names, lines


def _shares_a_line(text: str, shared: set[str]) -> bool:
    return any(len(n := " ".join(line.split())) >= MIN_SHARED_CHARS and n in shared for line in text.splitlines())


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
    """The textual execution trace: every observed call (and the file inventory) under a ``=== ... ===`` line."""
    parts = []
    for src in sources:
        if src.kind not in (TRACE, FILES) or not src.text.strip():
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
    current = ""
    for line in text.splitlines(keepends=True):
        if current and len(current) + len(line) > limit:
            sections.append(current)
            current = ""
        while len(line) > limit:
            sections.append(line[:limit])
            line = line[limit:]
        current += line
    sections.append(current)
    return [s for s in sections if s.strip()]
