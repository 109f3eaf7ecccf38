"""A compiled index of the task folders' ``task.yaml`` files, so that start-up needs no YAML parser.

Every ``rexmle`` command, every pytest process (controller and xdist workers) and every agent-side
``rexmle validate`` reads all 20 ``task.yaml`` files. Importing PyYAML and running its parser on them
is most of the start-up time of the short commands, so the parsed documents are kept as JSON in the
user's cache (``<cache>/task-index/<hash of the tasks folder>.json``), keyed by each file's size and
modification time (nanoseconds): a file that changed or appeared is parsed again, and the index is
rewritten once for the whole folder. The index holds only what ``yaml.safe_load`` returned for a file
and only when JSON gives that value back unchanged (string keys, no dates), so validation in
:mod:`pytest_rexmle.task` sees exactly what it would see without the index. An index that cannot be
read or written (read-only home, sandbox) is ignored: correctness never depends on it. Task folders in
the temporary directory (test fixtures) are parsed every time and never indexed.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import TaskConfigError

INDEX_VERSION = 1
MAX_INDEXES = 64                             # one per tasks folder (checkouts, installs); oldest go first
_loaded: dict[str, dict[str, Any]] = {}      # index file → its entries, loaded once per process


def _index_file(root: Path) -> Path | None:
    from .paths import cache_home

    resolved = root.resolve()
    if resolved.is_relative_to(Path(tempfile.gettempdir()).resolve()):
        return None
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:16]
    return cache_home() / "task-index" / f"{digest}.json"


def _entries(index: Path) -> dict[str, Any]:
    key = str(index)
    if key not in _loaded:
        try:
            data = json.loads(index.read_text(encoding="utf-8"))
            entries = data["files"] if data.get("version") == INDEX_VERSION else {}
            if not isinstance(entries, dict):
                entries = {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            entries = {}
        _loaded[key] = entries
    return _loaded[key]


def _stamp(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns]


def _fresh(entry: Any, stamp: list[int]) -> bool:
    return isinstance(entry, dict) and entry.get("stamp") == stamp and "data" in entry


def parse_yaml(path: Path) -> Any:
    """``yaml.safe_load`` of a file (libyaml's parser when PyYAML has it: the same documents, faster)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    except yaml.YAMLError as exc:
        raise TaskConfigError(f"{path}: not valid YAML: {exc}") from None


def read_task_yaml(path: Path) -> Any:
    """``yaml.safe_load`` of a task.yaml, from the index when the file is unchanged.

    Raises FileNotFoundError for a missing file and TaskConfigError for invalid YAML, like the parser.
    On a miss every stale ``task.yaml`` of the folder is parsed and the index written once, so a
    registry load costs one write, not one per task.
    """
    stamp = _stamp(path)
    index = _index_file(path.parent.parent)
    if index is None:
        return parse_yaml(path)
    entries = _entries(index)
    name = path.parent.name
    if _fresh(entries.get(name), stamp):
        return entries[name]["data"]
    data = parse_yaml(path)
    _remember(entries, name, stamp, data)
    for other in path.parent.parent.glob("*/task.yaml"):
        sibling = other.parent.name
        try:
            sibling_stamp = _stamp(other)
            if sibling != name and not _fresh(entries.get(sibling), sibling_stamp):
                _remember(entries, sibling, sibling_stamp, parse_yaml(other))
        except (OSError, TaskConfigError):  # reported when the registry reaches that folder
            continue
    _write(index, entries)
    return data


def _remember(entries: dict[str, Any], name: str, stamp: list[int], data: Any) -> None:
    try:
        if json.loads(json.dumps(data)) == data:
            entries[name] = {"stamp": stamp, "data": data}
    except (TypeError, ValueError):  # not representable in JSON: parsed every time
        pass


def _write(index: Path, entries: dict[str, Any]) -> None:
    """Atomic replace; any failure (read-only cache, full disk) leaves the index as it was."""
    try:
        created = not index.exists()
        index.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".task-index.", dir=index.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"version": INDEX_VERSION, "files": entries}, fh)
            os.replace(tmp, index)
        except BaseException:
            os.unlink(tmp)
            raise
        if created:
            others = sorted(index.parent.glob("*.json"), key=lambda p: p.stat().st_mtime)
            for stale in others[:-MAX_INDEXES]:
                stale.unlink(missing_ok=True)
    except OSError:
        pass
