"""The run's trajectory, ``<logs>/model-calls.jsonl``: one JSON object per model call (and per refusal).

Why here: the capability judge reads the same record for every agent, bring-your-own included, instead
of each agent's own log format. Bodies are capped so a run cannot fill the disk through its calls, and
every key (the run's token, the host's real keys) is replaced before a line is written.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

#: a request body above this is kept as a preview of its head and tail (conversations resend their
#: history, so requests grow; the judge reads lines of up to 4 MiB, a request plus its answer fits)
MAX_REQUEST_BYTES = 2 * 1024 * 1024
#: a response body, or a stream's events together, above this is cut
MAX_RESPONSE_BYTES = 1024 * 1024
#: a stream keeps at most this many parsed events in its record
MAX_EVENTS = 5000
PREVIEW_HEAD, PREVIEW_TAIL = 4 * 1024, 60 * 1024
#: past this many bytes in a run's file, records keep their metadata and usage but no bodies
MAX_FILE_BYTES = 1024 * 1024 * 1024
REDACTED = "[REDACTED]"
CALLS_FILE = "model-calls.jsonl"


def body_record(raw: bytes, cap: int = MAX_REQUEST_BYTES) -> tuple[Any, bool]:
    """(parsed JSON, or a head-and-tail text preview, truncated?) of a request or non-streamed body."""
    if not raw:
        return None, False
    if len(raw) <= cap:
        try:
            return json.loads(raw), False
        except (ValueError, RecursionError):
            if len(raw) <= PREVIEW_HEAD + PREVIEW_TAIL:
                return {"text": raw.decode("utf-8", "replace"), "bytes": len(raw)}, False
    return {"preview_head": raw[:PREVIEW_HEAD].decode("utf-8", "replace"),
            "preview_tail": raw[-PREVIEW_TAIL:].decode("utf-8", "replace"), "bytes": len(raw)}, True


@dataclass
class EventLog:
    """A stream's parsed events, capped by count and by size."""

    events: list[Any] = field(default_factory=list)
    size: int = 0
    truncated: bool = False

    def add(self, event: Any, size: int) -> None:
        """Keep ``event`` (``size``: its text length, so it is not serialised again to be measured)."""
        if self.truncated:
            return
        if len(self.events) >= MAX_EVENTS or self.size + size > MAX_RESPONSE_BYTES:
            self.truncated = True
            return
        self.events.append(event)
        self.size += size


class Trajectory:
    """Appends redacted records to one run's ``model-calls.jsonl`` (thread-safe)."""

    def __init__(self, logs_dir: Path, secrets: tuple[str, ...]) -> None:
        self.path = Path(logs_dir) / CALLS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._secrets = tuple(s for s in secrets if s)
        self._lock = threading.Lock()
        self.max_bytes = MAX_FILE_BYTES
        # opened once, never following a link: whatever appears in the logs folder later, the harness
        # (often root) appends to this very file and nowhere else
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        info = os.fstat(self._fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(self._fd)
            raise OSError(f"{self.path} is not a regular file")
        self._written = info.st_size

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return text

    def write(self, record: dict) -> None:
        record.setdefault("ts", datetime.now(timezone.utc).isoformat())
        with self._lock:
            if self._written >= self.max_bytes and (record.get("request") is not None
                                                    or record.get("response") is not None):
                record = {**record, "request": None, "response": None, "truncated": True,
                          "note": f"the run's trajectory passed {self.max_bytes} bytes: bodies no longer kept"}
            try:
                text = json.dumps(record, ensure_ascii=False, default=str)
            except (ValueError, RecursionError):  # a body nested too deep to write back: keep the rest
                text = json.dumps({**record, "request": None, "response": None, "truncated": True,
                                   "note": "bodies nested too deeply to record"}, ensure_ascii=False, default=str)
            data = (self.redact(text) + "\n").encode()
            if self._fd < 0:
                return
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
            self._written += len(data)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
