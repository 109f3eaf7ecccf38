"""The run's trajectory, ``<logs>/model-calls.jsonl``: one JSON object per model call (and per refusal).

Why here: the capability judge reads the same record for every agent, bring-your-own included, instead
of each agent's own log format. Bodies are capped so a run cannot fill the disk through its calls, and
every key (the run's token, the host's real keys) is replaced before a line is written.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

#: a request or response body above this is kept as a truncated text preview
MAX_BODY_BYTES = 256 * 1024
#: a stream keeps at most this many parsed events in its record
MAX_EVENTS = 2000
PREVIEW_CHARS = 4096
REDACTED = "[REDACTED]"
CALLS_FILE = "model-calls.jsonl"


def body_record(raw: bytes) -> tuple[Any, bool]:
    """(parsed JSON or a text preview, truncated?) of a request or non-streamed response body."""
    if not raw:
        return None, False
    if len(raw) > MAX_BODY_BYTES:
        return {"preview": raw[:PREVIEW_CHARS].decode("utf-8", "replace"), "bytes": len(raw)}, True
    try:
        return json.loads(raw), False
    except ValueError:
        return {"text": raw[:PREVIEW_CHARS].decode("utf-8", "replace"), "bytes": len(raw)}, len(raw) > PREVIEW_CHARS


class EventLog:
    """A stream's parsed events, capped by count and by size."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.size = 0
        self.truncated = False

    def add(self, event: Any, size: int) -> None:
        """Keep ``event`` (``size``: its text length, so it is not serialised again to be measured)."""
        if self.truncated:
            return
        if len(self.events) >= MAX_EVENTS or self.size + size > MAX_BODY_BYTES:
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
        self.path.touch(exist_ok=True)

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return text

    def write(self, record: dict) -> None:
        record.setdefault("ts", datetime.now(timezone.utc).isoformat())
        line = self.redact(json.dumps(record, ensure_ascii=False, default=str))
        with self._lock, open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
