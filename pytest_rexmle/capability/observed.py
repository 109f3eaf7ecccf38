"""The run's observed trajectory: the text of the model calls the session's gateway recorded.

Why: an agent's own stdout, stderr and log files are claims. One log line per strategy used to earn all
13 strategies and full stage credit for a sample submission. The gateway, on the host,
records every model call the agent made (``logs/model-calls.jsonl``: a ``"phase": "request"`` line with
the JSON body the agent sent, written before the call goes upstream, then a ``"phase": "response"`` line
with ``status``, ``usage`` and ``response`` — the provider's JSON body, or the list of SSE data events of
a streamed answer — both carrying the call's number ``"call"``; older records hold both in one line),
and joined here into one call. That is what the model was shown (the
task, commands, their outputs, errors) and what it answered (plans, code, fixes): the execution log
the paper judges, observed by the harness rather than told by the agent.

Text taken from a call: every string of the request and of the response (JSON-encoded strings such
as tool-call arguments are decoded and walked too), except

* the instructions the agent's scaffold gives the model (system and developer messages, Anthropic's
  ``system``, Gemini's ``systemInstruction``, tool schemas): a scaffold's prompt that says "consider
  test-time augmentation" is not a run that did it (the same reason ``workspace/agent/`` is skipped);
* protocol metadata (ids, model names, roles, finish reasons), which is noise for a judge.

Only calls a provider answered are evidence. A record the gateway marked ``"refused": true`` (a spent
budget, a bad token, an unknown route), one whose status is not 2xx (the gateway's refusals and the
provider's own errors: the model answered nothing) and one without a response are counted
(``refused``) and skipped: with a zero budget, the refused requests' text alone earned 13/13
strategies and S1–S5, and a request costs nothing to send when nobody answers it.

A streamed answer's fragments are joined in order into one text. Conversations resend their history
with every call, so each distinct string is kept once, at its first appearance. Reading is bounded:
at most ``MAX_BYTES`` of the file (head and tail), lines over ``MAX_LINE_BYTES`` skipped, JSON nesting
at most ``MAX_DEPTH``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..agent_output import RefusedFile, clean_text, read_head_tail
from .clock import Clock, check

MODEL_CALLS = "logs/model-calls.jsonl"
MAX_BYTES = 16 * 1024 * 1024
MAX_LINE_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 32
#: request keys that hold the scaffold's instructions to the model, not the run's actions
INSTRUCTION_KEYS = frozenset({"system", "systemInstruction", "system_instruction", "instructions", "tools",
                              "functions", "tool_choice", "response_format", "generationConfig",
                              "generation_config", "safetySettings", "metadata", "stop"})
INSTRUCTION_ROLES = frozenset({"system", "developer"})
#: protocol metadata: identifiers and enumerations, never the run's text
METADATA_KEYS = frozenset({"id", "object", "model", "role", "type", "finish_reason", "stop_reason", "created",
                           "system_fingerprint", "finishReason", "modelVersion", "responseId", "tool_call_id",
                           "call_id", "status", "service_tier", "index", "usage", "usageMetadata", "logprobs",
                           "stop_sequence", "encoding_format", "mimeType", "signature"})


@dataclass
class Call:
    """The new text of one recorded model call (strings not seen in an earlier call)."""

    number: int
    texts: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.texts)


@dataclass
class ObservedTrace:
    calls: list[Call]
    #: recorded calls read (their numbers in evidence), lines that were not a call record (cut by the
    #: size bound, corrupt), calls that are no evidence (refused, failed, unanswered: ``is_answered``)
    n_calls: int = 0
    skipped_lines: int = 0
    refused: int = 0
    present: bool = False

    @property
    def text(self) -> str:
        return "\n".join(c.text for c in self.calls)


def read_model_calls(run_dir: Path, clock: Clock | None = None) -> ObservedTrace:
    """The run's observed trace; empty (``present`` False) when the gateway recorded nothing.
    ``clock`` is checked before each record (see :mod:`pytest_rexmle.capability.clock`)."""
    path = Path(run_dir) / MODEL_CALLS
    try:
        head, tail, skipped = read_head_tail(path, MAX_BYTES // 2, MAX_BYTES // 2, MODEL_CALLS)
    except RefusedFile:
        return ObservedTrace([], present=False)
    lines = head.split(b"\n")
    if skipped:  # the lines cut by the gap are not whole records (without a gap the head is the whole file)
        lines = lines[:-1] + tail.split(b"\n")[1:]
    trace = ObservedTrace([], present=True)
    seen: set[str] = set()
    requests: dict[int, Any] = {}  # a call's request line, until its response line says it was answered
    for raw in lines:
        check(clock, "reading the recorded model calls")
        if not raw.strip():
            continue
        record = _record(raw)
        if record is None:
            trace.skipped_lines += 1
            continue
        number, phase = record.get("call"), record.get("phase")
        if phase == "request" and isinstance(number, int):
            requests[number] = record.get("request")
            continue
        if phase == "response" and isinstance(number, int):  # the call's two lines are one call
            record = {**record, "request": requests.pop(number, None)}
        trace.n_calls += 1
        if not is_answered(record):
            trace.refused += 1
            continue
        call = Call(number if isinstance(number, int) and phase else trace.n_calls)
        for text in call_texts(record):
            text = clean_text(text, keep_newlines=True).strip()
            if text and text not in seen:
                seen.add(text)
                call.texts.append(text)
        if call.texts:
            trace.calls.append(call)
    return trace


def is_answered(record: dict) -> bool:
    """Whether a provider answered this call: not refused by the gateway, a 2xx status (or none, in a
    record written without one), and a response. Only such calls are evidence for any judge."""
    if record.get("refused") is True or record.get("response") is None:
        return False
    status = record.get("status")
    if status is None:
        return True
    return isinstance(status, int) and not isinstance(status, bool) and 200 <= status < 300


def _record(raw: bytes) -> dict | None:
    if len(raw) > MAX_LINE_BYTES:
        return None
    try:
        record = json.loads(raw.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


def call_texts(record: dict) -> Iterator[str]:
    """The texts of one call record: the request's, then the response's."""
    request = record.get("request")
    if isinstance(request, dict):
        yield from _request_texts(request)
    elif isinstance(request, (str, list)):
        yield from strings(request)
    response = record.get("response")
    if isinstance(response, list):  # SSE data events of a streamed answer: one text, in order
        events = [e for e in response if e != "[DONE]"]
        joined = "".join(strings(events, join_fragments=True))
        if joined:
            yield joined.replace("\\n", "\n")
    elif response is not None:
        yield from strings(response)


def _request_texts(request: dict) -> Iterator[str]:
    for key, value in request.items():
        if key in INSTRUCTION_KEYS or key in METADATA_KEYS:
            continue
        if key in ("messages", "input", "contents") and isinstance(value, list):
            for message in value:
                if isinstance(message, dict) and message.get("role") in INSTRUCTION_ROLES:
                    continue
                yield from strings(message)
        else:
            yield from strings(value)


def strings(value: Any, depth: int = 0, *, join_fragments: bool = False) -> Iterator[str]:
    """Every string in a JSON value, skipping metadata keys; strings holding JSON are walked too."""
    if depth > MAX_DEPTH:
        return
    if isinstance(value, str):
        stripped = value.strip()
        if not join_fragments and stripped[:1] in ("{", "[") and len(stripped) > 1:
            try:
                decoded = json.loads(stripped)
            except (ValueError, RecursionError):
                decoded = None
            if isinstance(decoded, (dict, list)):
                yield from strings(decoded, depth + 1)
                return
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            if key not in METADATA_KEYS:
                yield from strings(item, depth + 1, join_fragments=join_fragments)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item, depth + 1, join_fragments=join_fragments)
