"""A compiled index of the task folders' ``task.yaml`` files, so that start-up needs no YAML parser.

Every ``rexmle`` command, every pytest process (controller and xdist workers) and every agent-side
``rexmle validate`` reads all 20 ``task.yaml`` files. Importing PyYAML and running its pure-Python
parser on them is most of the start-up time of the short commands, so the parsed documents are kept
as JSON in the user's cache (``<cache>/task-index/<hash of the tasks folder>.json``), keyed by each
file's size and modification time (nanoseconds): a file that changed, appeared or disappeared is
parsed again and the index rewritten. The index holds only what ``yaml.safe_load`` returned for a file
and only when JSON gives that value back unchanged (string keys, no dates), so validation in
:mod:`pytest_rexmle.task` sees exactly what it would see without the index. An index that cannot be
read or written (read-only home, sandbox) is ignored: correctness never depends on it.
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
MAX_INDEXES = 64                             # one per tasks folder; test suites make many temporary ones
_loaded: dict[str, dict[str, Any]] = {}      # index file → its entries, loaded once per process


def _index_file(root: Path) -> Path:
    from .paths import cache_home

    digest = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
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


def read_task_yaml(path: Path) -> Any:
    """``yaml.safe_load`` of a task.yaml, from the index when the file is unchanged.

    Raises FileNotFoundError for a missing file and TaskConfigError for invalid YAML, like the parser.
    """
    stamp = _stamp(path)
    index = _index_file(path.parent.parent)
    entries = _entries(index)
    name = path.parent.name
    entry = entries.get(name)
    if isinstance(entry, dict) and entry.get("stamp") == stamp and "data" in entry:
        return entry["data"]
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise TaskConfigError(f"{path}: not valid YAML: {exc}") from None
    try:
        if json.loads(json.dumps(data)) == data:
            entries[name] = {"stamp": stamp, "data": data}
            _write(index, entries)
    except (TypeError, ValueError):  # not representable in JSON: parsed every time
        pass
    return data


def _write(index: Path, entries: dict[str, Any]) -> None:
    """Atomic replace; any failure (read-only cache, full disk) leaves the index as it was."""
    try:
        index.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".task-index.", dir=index.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"version": INDEX_VERSION, "files": entries}, fh)
            os.replace(tmp, index)
        except BaseException:
            os.unlink(tmp)
            raise
        others = sorted(index.parent.glob("*.json"), key=lambda p: p.stat().st_mtime)
        for stale in others[:-MAX_INDEXES]:
            stale.unlink(missing_ok=True)
    except OSError:
        pass
