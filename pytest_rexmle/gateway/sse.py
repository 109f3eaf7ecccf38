"""An incremental Server-Sent Events reader: bytes in as they arrive, parsed ``data:`` payloads out.

Why incremental: the gateway forwards each chunk the moment it arrives and reads usage from the same
bytes on the side, so it never holds a whole stream before the agent sees it.
"""

from __future__ import annotations

import json
from typing import Any

#: one event larger than this is dropped from parsing (still forwarded untouched)
MAX_EVENT_BYTES = 4 * 1024 * 1024


class SSEReader:
    """Feed raw bytes; get back the events completed so far as (parsed JSON or the raw text, text size)."""

    def __init__(self) -> None:
        self._pending = b""
        self._data: list[bytes] = []
        self._size = 0

    def feed(self, chunk: bytes) -> list[tuple[Any, int]]:
        self._pending += chunk
        out = []
        while True:
            cut = self._pending.find(b"\n")
            if cut < 0:
                if len(self._pending) > MAX_EVENT_BYTES:  # a line without end: stop buffering it
                    self._pending = b""
                break
            line, self._pending = self._pending[:cut], self._pending[cut + 1:]
            line = line.rstrip(b"\r")
            if not line:
                event = self._dispatch()
                if event is not None:
                    out.append(event)
                continue
            if line.startswith(b":"):
                continue
            field, _, value = line.partition(b":")
            value = value[1:] if value.startswith(b" ") else value
            if field == b"data":
                self._size += len(value)
                if self._size <= MAX_EVENT_BYTES:
                    self._data.append(value)
        return out

    def close(self) -> list[tuple[Any, int]]:
        """Whatever a stream that ended without a blank line still held."""
        return self.feed(b"\n\n") if self._pending or self._data else []

    def _dispatch(self) -> tuple[Any, int] | None:
        data, self._data, self._size = self._data, [], 0
        if not data:
            return None
        text = b"\n".join(data).decode("utf-8", "replace")
        if text.strip() == "[DONE]":
            return "[DONE]", len(text)
        try:
            return json.loads(text), len(text)
        except ValueError:
            return text, len(text)
