"""The run's trajectory, ``<logs>/model-calls.jsonl``: the record of every model call and every refusal.

Why here: the capability judge reads the same record for every agent, bring-your-own included, instead
of each agent's own log format. Bodies are capped, and every key (the run's token, the host's real keys)
is replaced before a line is written.

Why two lines per call: the record comes before the answer. A call's ``"phase": "request"`` line (the
request body) is written before the request goes upstream, and a call whose line cannot be written is
refused; its ``"phase": "response"`` line (status, answer, usage) follows when the answer has ended. Both
carry the same ``"call"`` number. A refusal is one line with ``"refused": true`` and the ``reason``; it
never counts as evidence of what the run did.

Why a disk budget: the file lives on the host, outside the run's own limits, and an agent chooses how
often it calls. Past ``max_bytes - REFUSAL_RESERVE`` no further call is admitted (the refusal says so);
refusals are small lines, and once one kind of refusal has been written ``FULL_REFUSALS`` times its
repeats are counted and written as one ``"repeated": n`` line at most every ``REPEAT_SECONDS`` (and at
close), so a refusal loop grows the file by a few lines a minute, never silently losing the count.
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
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
#: the default disk budget of a run's file (``REXMLE_GATEWAY_RECORD_BYTES`` overrides it)
MAX_FILE_BYTES = 256 * 1024 * 1024
#: the part of the budget kept for refusals and summaries once calls are no longer admitted
REFUSAL_RESERVE = 1024 * 1024
#: room a call keeps for its response line from its request line on (a capped answer and its metadata)
RESPONSE_ALLOWANCE = MAX_RESPONSE_BYTES + 64 * 1024
#: one kind of refusal is written line by line this many times, then counted
FULL_REFUSALS = 100
#: counted refusals of one kind are written as one line at most this often (and at close)
REPEAT_SECONDS = 60.0
REDACTED = "[REDACTED]"
CALLS_FILE = "model-calls.jsonl"


class RecordError(OSError):
    """The record cannot take a call's line (the write failed, or the run's disk budget is spent): the call
    is refused rather than answered unrecorded."""


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


@dataclass
class _Repeats:
    """One kind of refusal: how many were written whole, and the ones counted since the last line."""

    written: int = 0
    count: int = 0
    first_ts: str | None = None
    last: dict | None = None
    flushed: float = field(default_factory=time.monotonic)


def _now() -> str:
    return datetime.now(UTC).isoformat()


class Trajectory:
    """Appends redacted records to one run's ``model-calls.jsonl`` (thread-safe) within a disk budget."""

    def __init__(self, logs_dir: Path, secrets: tuple[str, ...], max_bytes: int = MAX_FILE_BYTES) -> None:
        self.path = Path(logs_dir) / CALLS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._secrets = tuple(s for s in secrets if s)
        self._lock = threading.Lock()
        self.max_bytes = max_bytes
        self._calls = 0
        self._allowances = 0  # bytes kept for the response lines of calls in flight
        self._repeats: dict[tuple, _Repeats] = {}
        # opened once, never following a link: whatever appears in the logs folder later, the harness
        # (often root) appends to this very file and nowhere else
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        info = os.fstat(self._fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(self._fd)
            raise OSError(f"{self.path} is not a regular file")
        self._written = info.st_size  # bytes in the file (this run's and any it started with)

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return text

    # --- a call: its request line before the answer, its response line after ------------------------------

    def _full(self, line: int) -> str | None:
        """Why a call whose request line has ``line`` bytes does not fit the disk budget, or None."""
        if self._written + self._allowances + line + RESPONSE_ALLOWANCE > self.max_bytes - REFUSAL_RESERVE:
            return (f"this run's model-call record reached its disk budget ({self._written} of {self.max_bytes} "
                    f"bytes written; REXMLE_GATEWAY_RECORD_BYTES sets it): no further model calls")
        return None

    def open_call(self, record: dict) -> int:
        """Write a call's request line and return its call number; RecordError when the line cannot be
        written or its call does not fit the disk budget (the call must then be refused)."""
        with self._lock:
            self._calls += 1
            number = self._calls
        data = self._encode({"call": number, "phase": "request", "ts": _now(), **record})  # outside the lock
        with self._lock:
            why = self._full(len(data))
            if why:
                raise RecordError(why)
            self._append(data)
            self._allowances += RESPONSE_ALLOWANCE
        return number

    def close_call(self, number: int, record: dict) -> None:
        """Write a call's response line (best effort: the answer has gone out; a failure is raised after the
        budget's allowance is given back)."""
        data = self._encode({"call": number, "phase": "response", "ts": _now(), **record})
        with self._lock:
            self._allowances = max(0, self._allowances - RESPONSE_ALLOWANCE)
            if self._written + len(data) > self.max_bytes:
                data = self._encode({"call": number, "phase": "response", "ts": _now(), **record, "response": None,
                                     "truncated": True, "note": "answer dropped: over the record's disk budget"})
            self._append(data)

    # --- refusals ----------------------------------------------------------------------------------------

    def refused(self, record: dict, kind: str) -> None:
        """A refusal's line (``refused: true``); repeats of one ``kind`` are counted once frequent. Never
        raises: a refusal that cannot be written is still counted in the run's errors by the caller."""
        record = {"ts": _now(), **record, "refused": True}
        key = (kind, record.get("protocol"), record.get("status"))
        with self._lock:
            seen = self._repeats.setdefault(key, _Repeats())
            if seen.written < FULL_REFUSALS and self._written < self.max_bytes - REFUSAL_RESERVE // 2:
                seen.written += 1
                seen.flushed = time.monotonic()  # counting starts here: its first line comes REPEAT_SECONDS later
                self._append_quietly(self._encode(record))
                return
            seen.count += 1
            seen.first_ts = seen.first_ts or record["ts"]
            seen.last = record
            if time.monotonic() - seen.flushed >= REPEAT_SECONDS and self._written < self.max_bytes:
                self._flush(seen)

    def _flush(self, seen: _Repeats) -> None:
        if not seen.count or seen.last is None:
            return
        line = {**seen.last, "request": None, "repeated": seen.count, "first_ts": seen.first_ts,
                "last_ts": seen.last["ts"]}
        self._append_quietly(self._encode(line))
        seen.count, seen.first_ts, seen.last, seen.flushed = 0, None, None, time.monotonic()

    # --- writing -----------------------------------------------------------------------------------------

    def _encode(self, record: dict) -> bytes:
        try:
            text = json.dumps(record, ensure_ascii=False, default=str)
        except (ValueError, RecursionError):  # a body nested too deep to write back: keep the rest
            text = json.dumps({**record, "request": None, "response": None, "truncated": True,
                               "note": "bodies nested too deeply to record"}, ensure_ascii=False, default=str)
        # a lone surrogate (JSON "\ud800" in a body) has no UTF-8 form: written as the same JSON escape
        return (self.redact(text) + "\n").encode("utf-8", "backslashreplace")

    def _append(self, data: bytes) -> None:
        if self._fd < 0:
            raise RecordError(f"{self.path} is closed")
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError as exc:
            raise RecordError(f"{CALLS_FILE} cannot be written: {exc.strerror or exc}") from None
        finally:
            self._written += len(data) - len(view)

    def _append_quietly(self, data: bytes) -> None:
        try:
            self._append(data)
        except RecordError:
            pass

    def close(self) -> None:
        """Write the counts of refusals not yet written, then close the file."""
        with self._lock:
            for seen in self._repeats.values():
                self._flush(seen)
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
