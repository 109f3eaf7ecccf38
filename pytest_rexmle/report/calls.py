"""A run's recorded model calls, read for people: what each call added to the conversation and what came back.

Why its own reader: the capability judge wants every string of a call (:mod:`..capability.observed`);
the run page and the ATIF export want the conversation's shape — the prompt's new part (the messages
after the model's last answer: the task, a tool's output, an error), the answer's text, its reasoning,
the tool calls it made and the tool results the next call carried back. Each protocol puts these in its
own places, streamed or not; its module in :mod:`..protocols` reads them.

Reading is bounded and never trusts the file (it sits in the agent's logs folder): lines over
``MAX_LINE_BYTES`` keep only their metadata, a line that is not JSON is counted and skipped, and the
offset and length of every line are kept so that a viewer can open one call's body on demand instead
of loading a gigabyte of trajectory.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import protocols
from ..agent_output import RefusedFile, clean_text, open_reader, reveal
from ..protocols.base import Protocol, Reading, ToolCall

__all__ = ["CallSummary", "ToolCall", "extract", "read_call", "read_calls"]

CALLS = "logs/model-calls.jsonl"
#: a line longer than this is read for its metadata only (its bodies are opened on demand)
MAX_LINE_BYTES = 8 * 1024 * 1024
#: the whole file: past this the rest is not read (a viewer says so)
MAX_FILE_BYTES = 64 * 1024 * 1024 * 1024
#: characters of one text kept in a call's summary (the page shows a preview; the body is opened on demand)
PREVIEW_CHARS = 4000
#: characters of a tool's name kept
MAX_NAME_CHARS = 1000
_META = re.compile(rb'"(call|phase|ts|protocol|api|route|model|status|stream|duration_s|refused|reason|error|repeated)"'
                   rb'\s*:\s*("(?:[^"\\]|\\.){0,400}"|-?[0-9.eE+]{1,40}|true|false|null)')
_USAGE = re.compile(rb'"usage"\s*:\s*(\{[^{}]{0,2000}\}|null)')


@dataclass
class CallSummary(Reading):
    """One recorded call: its metadata, and the conversation's new part and answer as text (cut to
    previews, invisible characters shown)."""

    number: int
    offset: int
    length: int
    ts: str | None = None
    protocol: str | None = None
    api: str | None = None           # the protocol module that read the bodies (older lines: guessed)
    route: str | None = None
    model: str | None = None
    status: int | None = None
    stream: bool = False
    refused: bool = False
    error: str | None = None
    duration_s: float | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    #: sha256 of the whole system prompt (``system`` is cut to a preview): tells two prompts apart past the cut
    system_digest: str = ""
    bodies: bool = True              # False: the line was too long, only its metadata was read
    call_id: str | None = None       # a call's request and response lines (``"call": n``) share this

    @property
    def answered(self) -> bool:
        return not self.refused and isinstance(self.status, int) and 200 <= self.status < 300

    def tokens(self) -> tuple[int, int, int]:
        u = self.usage or {}
        return tuple(v if isinstance(v, int) and not isinstance(v, bool) else 0
                     for v in (u.get("input_tokens"), u.get("output_tokens"), u.get("cached_tokens")))  # type: ignore

    @property
    def cost_usd(self) -> float | None:
        cost = (self.usage or {}).get("cost_usd")
        return float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None


def iter_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(offset, line) of a JSONL file; a line over ``MAX_LINE_BYTES`` yields its head only."""
    try:
        handle = open_reader(path, MAX_FILE_BYTES, CALLS)
    except (RefusedFile, OSError):
        return
    with handle:
        offset = 0
        while True:
            line = handle.readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            start, length = offset, len(line)
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                while True:  # skip to the end of this line without holding it
                    rest = handle.readline(1024 * 1024)
                    length += len(rest)
                    if not rest or rest.endswith(b"\n"):
                        break
            offset += length
            yield start, line[:MAX_LINE_BYTES + 1] if length > MAX_LINE_BYTES else line


def read_calls(run_dir: Path, *, bodies: int | None = None, body_bytes: int | None = None,
               body_from: int = 0) -> list[CallSummary]:
    """Every recorded call of a run, in order. The bodies of ``bodies`` lines from line ``body_from`` are
    parsed (all when None), up to ``body_bytes`` of them in all; of the rest only the metadata — a large
    run's page parses a few tens of megabytes, not a gigabyte."""
    calls: list[CallSummary] = []
    merged: dict[str, CallSummary] = {}
    parsed = 0
    for number, (offset, raw) in enumerate(iter_lines(Path(run_dir) / CALLS)):
        if not raw.strip():
            continue
        wanted = (bodies is None or body_from <= number < body_from + bodies) and \
            (body_bytes is None or parsed + len(raw) <= body_bytes)
        parsed += len(raw) if wanted else 0
        summary = _summary(len(calls) + 1, offset, raw, wanted)
        if summary is None:
            continue
        key = summary.call_id
        if key and key in merged:  # a call recorded before its answer, then completed: one call
            _complete(merged[key], summary)
            continue
        if key:
            merged[key] = summary
        calls.append(summary)
    # in the order the calls began (a record written when its answer ended can follow a later call's)
    calls.sort(key=lambda c: c.ts or "")
    for number, call in enumerate(calls, 1):
        call.number = number
    return calls


def read_call(run_dir: Path, offset: int) -> dict | None:
    """The whole record at ``offset`` (a viewer opening one call's bodies), or None."""
    path = Path(run_dir) / CALLS
    try:
        handle = open_reader(path, MAX_FILE_BYTES, CALLS)
    except (RefusedFile, OSError):
        return None
    with handle:
        handle.seek(max(0, int(offset)))
        line = handle.readline(MAX_LINE_BYTES + 1)
    record = _json(line)
    return record if isinstance(record, dict) else None


def _json(raw: bytes) -> Any:
    if len(raw) > MAX_LINE_BYTES:
        return None
    try:
        return json.loads(raw.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return None


def _summary(number: int, offset: int, raw: bytes, bodies: bool) -> CallSummary | None:
    record = _json(raw) if bodies else None
    if record is None:
        record = _metadata_only(raw)
        if record is None:
            return None
        bodies = False
    if not isinstance(record, dict):
        return None
    summary = CallSummary(number, offset, len(raw), bodies=bodies)
    _fill_metadata(summary, record)
    protocol = protocols.of_record(record)
    summary.api = protocol.name
    if bodies:
        extract(summary, record.get("request"), record.get("response"), protocol)
    call = record.get("call")  # a call's request and response lines share their number
    summary.call_id = f"call-{call}" if isinstance(call, int) and record.get("phase") else None
    return summary


def _metadata_only(raw: bytes) -> dict | None:
    """The small fields of a line without parsing its bodies (a long line, or a metadata-only read)."""
    record: dict[str, Any] = {}
    for match in _META.finditer(raw[:1024 * 1024] if len(raw) > 2 * 1024 * 1024 else raw):
        key = match.group(1).decode()
        if key in record:
            continue
        try:
            record[key] = json.loads(match.group(2))
        except ValueError:
            continue
    found = list(_USAGE.finditer(raw[-64 * 1024:]))  # the record's own usage is its last key
    usage = found[-1] if found else None
    if usage:
        try:
            record["usage"] = json.loads(usage.group(1))
        except ValueError:
            pass
    return record or None


def _fill_metadata(summary: CallSummary, record: dict) -> None:
    def text(key: str, limit: int = 300) -> str | None:
        value = record.get(key)
        return clean_text(reveal(value[:limit * 2]), limit=limit) if isinstance(value, str) else None

    summary.ts, summary.protocol, summary.route, summary.model = text("ts"), text("protocol"), text("route"), text("model")
    status = record.get("status")
    summary.status = status if isinstance(status, int) and not isinstance(status, bool) else None
    summary.stream = record.get("stream") is True
    summary.error = text("error", 1000) or text("reason", 1000)
    repeated = record.get("repeated")
    if isinstance(repeated, int) and not isinstance(repeated, bool) and repeated > 1:
        summary.error = f"{summary.error or 'refused'} (repeated {repeated} times)"
    summary.refused = record.get("refused") is True or (summary.error is not None and record.get("response") is None
                                                          and (summary.status or 0) >= 400 and not record.get("usage"))
    duration = record.get("duration_s")
    summary.duration_s = float(duration) if isinstance(duration, (int, float)) and not isinstance(duration, bool) else None
    usage = record.get("usage")
    summary.usage = usage if isinstance(usage, dict) else {}


def _complete(first: CallSummary, later: CallSummary) -> None:
    for name in ("status", "error", "duration_s", "model"):
        if getattr(later, name) is not None:
            setattr(first, name, getattr(later, name))
    first.refused = later.refused or first.refused
    first.stream = first.stream or later.stream
    if later.usage:
        first.usage = later.usage
    if later.answer or later.tool_calls or later.reasoning:
        first.answer, first.reasoning, first.tool_calls = later.answer, later.reasoning, later.tool_calls


# -- the protocols' shapes ------------------------------------------------------------------------------

def _clip(text: str) -> str:
    """A text for a summary: invisible characters shown (:func:`reveal`), controls gone, cut at
    ``PREVIEW_CHARS``."""
    text = clean_text(reveal(text), keep_newlines=True)
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + f"… [{len(text) - PREVIEW_CHARS} more characters]"


def _name(name: str) -> str:
    """A tool's name as the model gave it, with its invisible characters shown (a name ``read_file
    \\u202egnp.tsil-srewsna`` must not read as ``read_file answers-list.png``) and cut at
    ``MAX_NAME_CHARS``; the same on a call and on its result, so the two still match."""
    return clean_text(reveal(name[:MAX_NAME_CHARS * 2]), limit=MAX_NAME_CHARS)


def extract(summary: CallSummary, request: Any, response: Any, protocol: Protocol | None = None) -> None:
    """Fill the conversation fields of ``summary`` from a call's request and response bodies, read by the
    call's protocol (:func:`..protocols.of_record` when not given)."""
    protocol = protocol or protocols.of_record({"protocol": summary.protocol, "route": summary.route,
                                                "request": request, "response": response})
    if isinstance(request, dict):
        protocol.read_request(request, summary)
    if isinstance(response, dict):
        protocol.read_answer(response, summary)
    elif isinstance(response, list):
        protocol.read_stream([e for e in response if isinstance(e, dict)], summary)
    summary.system_digest = hashlib.sha256(summary.system.encode("utf-8", "replace")).hexdigest() if summary.system else ""
    summary.system, summary.prompt = _clip(summary.system), _clip(summary.prompt)
    summary.answer, summary.reasoning = _clip(summary.answer), _clip(summary.reasoning)
    summary.tool_results = [(i, _clip(t), _name(n)) for i, t, n in summary.tool_results]
    summary.tool_calls = [ToolCall(t.id, _name(t.name), t.arguments) for t in summary.tool_calls]
