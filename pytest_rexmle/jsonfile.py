"""Atomic writes of the harness's own files (temp file in the same folder, fsync, rename).

Results, run records, reports, manifests and board records are read back by other processes
(``--rexmle-resume``, ``rexmle status``, a second session updating the report index), sometimes while
they are being rewritten; a crash or Ctrl-C mid-write must leave the old file or the new one, never
half a document that a reader would trust or choke on.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_text_atomic(path: Path, text: str, mode: int | None = None, durable: bool = True) -> Path:
    """``mode`` widens the temp file's 0600 (e.g. 0644 for reports people share); None keeps it private.
    ``durable=False`` skips the fsync: still never half a file, but a power cut may lose it (for records
    that say nothing another does not say too)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: Path, payload: Any, mode: int | None = None, durable: bool = True) -> Path:
    """Strict JSON (NaN and infinities are refused before anything is written), indented for people."""
    return write_text_atomic(path, json.dumps(payload, indent=2, allow_nan=False) + "\n", mode, durable)
