"""What every provider protocol module answers: where its calls go, how its key and its errors look, and
how its bodies and streams say what was used, asked and answered. A module subclasses :class:`Protocol`
and is listed in the registry, :mod:`pytest_rexmle.protocols` (which says why one module per protocol).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple


class Routed(NamedTuple):
    """A path a protocol passes through: whether it is a billed model call, and a model named in the path."""

    billed: bool
    path_model: str | None = None


class Counts(NamedTuple):
    """Token counts one body or stream event carries (``input`` includes cached input)."""

    input: int
    output: int
    cached: int
    cache_write: int = 0


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: Any


@dataclass(kw_only=True)
class Reading:
    """A call's conversation as people read it: the prompt's new part (the messages after the model's last
    answer), the tool results it carried back, and the answer's text, reasoning and tool calls."""

    system: str = ""
    prompt: str = ""
    #: (call id, text, tool name) carried back; Gemini's answers name their calls only by the tool's name
    tool_results: list[tuple[str, str, str]] = field(default_factory=list)
    answer: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)


def count(value: Any) -> int:
    """A token count as the provider gave it, or 0 (negative, boolean or non-integer values are no count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def whole(value: Any) -> int | None:
    """A non-negative whole number given as JSON (an int, or a float without fraction), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and value >= 0 else None


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    if isinstance(content, list):
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                for key in ("text", "input_text", "output_text", "content"):
                    value = part.get(key)
                    if isinstance(value, str):
                        parts.append(value)
                        break
                    if key == "content" and isinstance(value, list):
                        parts.append(text_of(value))
                        break
    return "\n".join(p for p in parts if p)


def arguments(value: Any) -> Any:
    """A tool call's arguments: JSON text decoded, anything else (or text that is not JSON) as given."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes: the text
            return value
    return value


def text_parts(parts: list) -> list[str]:
    """The text of a list of content parts (a thought part is the model's own, not the prompt)."""
    return [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str) and not p.get("thought")]


def read_prompt(messages: list, model_turn: Callable[[dict], Any], parts_of: Callable[[dict], Any],
                tool_result: Callable[[dict], tuple[str, str, str] | None], into: Reading) -> None:
    """The prompt of a conversation whose messages hold lists of parts (Anthropic, Gemini): the new part's
    plain contents and text parts, and the tool results that ``tool_result`` recognises among the parts."""
    prompt: list[str] = []
    for message in new_part(messages, model_turn):
        parts = parts_of(message)
        if not isinstance(parts, list):
            prompt.append(text_of(parts))
            continue
        rest = []
        for part in parts:
            result = tool_result(part) if isinstance(part, dict) else None
            if result is None:
                rest.append(part)
            else:
                into.tool_results.append(result)
        prompt += text_parts(rest)
    into.prompt = "\n".join(p for p in prompt if p)


def new_part(messages: list, model_turn: Any) -> list[dict]:
    """The messages after the model's last turn, in order (``model_turn(message)`` says which are the model's)."""
    tail: list[dict] = []
    for message in reversed(messages):
        if not isinstance(message, dict):
            continue
        if model_turn(message):
            break
        tail.append(message)
    return tail[::-1]


class Protocol:
    """One wire format. ``provider`` names the upstream, the key, the price table and the record's
    ``protocol`` field; ``name`` (the record's ``api``) the format itself. Defaults read nothing."""

    name: str = ""
    provider: str = ""
    #: the path prefix the agent's variables name (``/openai``); the rest is matched by :meth:`route`
    prefix: str = ""
    #: request headers passed upstream besides the common ones (the protocol's version and beta switches)
    forwarded_headers: frozenset[str] = frozenset()
    #: whether the Stainless-generated SDKs' ``x-stainless-*`` telemetry headers are passed upstream
    telemetry: bool = False
    #: (base URL variables, key variables, default base URL) of the host's upstream, first variable set wins
    upstream_env: tuple[tuple[str, ...], tuple[str, ...], str] = ((), (), "")
    #: headers that say whose account a call bills: (header, host variables, first set wins)
    account_headers: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: the provider genai-prices looks a model up under (None: found by the model's name)
    price_provider: str | None = None
    #: keys of a body or event whose object carries the model and usage too (a stream's first or last event)
    nested: tuple[str, ...] = ()

    # --- routes, key, errors ---------------------------------------------------------------------------

    def rest(self, path: str) -> str:
        """The path after ``prefix``, as the protocol's routes are written."""
        return path

    def route(self, method: str, rest: str) -> Routed | None:
        """The route of ``method rest`` in this protocol, or None when it is not one it passes through."""
        return None

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    def error_body(self, status: int, message: str) -> bytes:
        """The JSON error body this protocol's SDKs parse into their usual exception."""
        raise NotImplementedError

    # --- what a request asks ---------------------------------------------------------------------------

    def requested_output(self, doc: dict) -> tuple[int | None, int]:
        """(the output cap the request names or None, number of choices asked for)."""
        return None, 1

    def provider_tools(self, doc: dict) -> list[str]:
        """The provider-side tools (web search, URL fetch, remote MCP, code containers) a request names."""
        return []

    # --- what an answer used ---------------------------------------------------------------------------

    def _holders(self, obj: dict) -> list[dict]:
        return [h for h in (obj, *(obj.get(k) for k in self.nested)) if isinstance(h, dict)]

    def model(self, obj: dict) -> str | None:
        """The model a body or stream event names."""
        names = [h.get("model") for h in self._holders(obj)]
        return next((n for n in names if isinstance(n, str) and n), None)

    def usage(self, obj: dict) -> Counts | None:
        """The token counts of one parsed body or stream event (the largest of each where it says them
        twice), or None when it carries none."""
        found = [self.counts(h["usage"]) for h in self._holders(obj) if isinstance(h.get("usage"), dict)]
        return Counts(*(max(c) for c in zip(*found, strict=True))) if found else None

    def counts(self, usage: dict) -> Counts:
        """The token counts of one ``usage`` object."""
        return Counts(0, 0, 0)

    # --- the conversation, for people and the judge ----------------------------------------------------

    def recognises(self, body: Any) -> bool:
        """Whether a recorded body (request, answer, or a stream's events) has this protocol's shape: the
        guess for record lines written before lines named their ``api``."""
        return False

    def read_request(self, doc: dict, into: Reading) -> None:
        """The system prompt, the prompt's new part and the tool results a request carries."""

    def read_answer(self, body: dict, into: Reading) -> None:
        """The answer, reasoning and tool calls of a whole (non-streamed) answer."""

    def read_stream(self, events: list[dict], into: Reading) -> None:
        """The same of a streamed answer's parsed events, its fragments joined in order."""


MODEL_ID = r"[\w.:-]+"


def matched(routes: dict[str, re.Pattern[str]], method: str, rest: str) -> re.Match[str] | None:
    """The match of ``rest`` against the pattern listed for ``method`` (None: not listed)."""
    pattern = routes.get(method)
    return pattern.match(rest) if pattern is not None else None
