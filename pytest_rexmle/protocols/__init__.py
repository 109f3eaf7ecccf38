"""The model APIs the gateway passes through, one module each (:mod:`.openai_chat`,
:mod:`.openai_responses`, :mod:`.anthropic`, :mod:`.gemini`, on the interface of :mod:`.base`), and what
is common to all: which one a request is, where the agent's token travels, and which one a recorded
call was.

Why one module per protocol: its routes, key header, error shape, token usage, answers and tool calls
(bodies and streams) are read by the gateway, the meter, the call record, the ATIF export, the run page
and the judge; each is written once. A new provider is one module listed in ``PROTOCOLS``.

Why the agent must not notice the gateway: a refusal (bad token, budget spent, unknown route) arrives in
the JSON its own SDK turns into the usual exception, and the token is accepted wherever that protocol's
clients put a key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import Message
from typing import Any
from urllib.parse import parse_qsl, urlencode

from . import anthropic, gemini, openai_chat, openai_responses
from .base import Protocol

#: every protocol by its name (a record line's ``api``), the first of each provider its family's default
PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (openai_chat.PROTOCOL, openai_responses.PROTOCOL,
                                                      anthropic.PROTOCOL, gemini.PROTOCOL)}
#: the providers (a record line's ``protocol``: the upstream, the key, the price table)
OPENAI, ANTHROPIC, GEMINI = "openai", "anthropic", "gemini"
PROVIDERS: dict[str, Protocol] = {}
for _protocol in PROTOCOLS.values():
    PROVIDERS.setdefault(_protocol.provider, _protocol)

#: a request's headers (``http.server`` gives a Message, tests a dict)
Headers = Mapping[str, str] | Message

#: percent-encoded dot, slash or backslash, and raw backslashes: paths an upstream may read differently
_AMBIGUOUS = re.compile(r"%2e|%2f|%5c|\\", re.IGNORECASE)


def get(name: str | None) -> Protocol:
    """A protocol by its name, or a provider's default one (``openai`` → chat completions)."""
    return PROTOCOLS.get(name or "") or PROVIDERS.get(name or "") or openai_chat.PROTOCOL


@dataclass(frozen=True)
class Route:
    """One request's place in a protocol: what goes upstream and how it is metered. The model lists
    (a path the SDKs call, not every path a provider serves) keep the real key from
    ``DELETE /v1/models/{id}``, stored completions, files, batches, fine-tuning and admin endpoints."""

    protocol: str       # the provider
    upstream_path: str  # appended to the provider's upstream base URL
    billed: bool        # a model call whose usage counts (not a model list or a token count)
    path_model: str | None = None  # Gemini names the model in the path
    api: str = ""       # the protocol's name (:data:`PROTOCOLS`)


class UnknownRoute(LookupError):
    """A path that is none of the passed-through APIs; ``protocol`` is the best guess for the error shape."""

    def __init__(self, path: str, protocol: str, method: str = "") -> None:
        route = f"{method} {path}" if method else path
        super().__init__(f"unknown route {route!r}: the gateway passes through the model calls of /openai/v1/..., "
                         f"/anthropic/v1/... and /gemini/v1beta/models/... (chat, responses, messages, "
                         f"generateContent, embeddings, token counts, model lists), nothing else")
        self.protocol = protocol


def classify(path: str, headers: Headers, method: str = "POST") -> Route:
    """The route of a request (method, path without its query string), or UnknownRoute.

    Prefixed paths (``/openai/v1/...``, ``/anthropic/v1/...``, ``/gemini/v1beta/...``) are what the agent's
    variables name; bare ``/v1/...`` and ``/v1beta/...`` are accepted too for clients configured by hand.
    A path that could mean another one upstream (``..`` or ``.`` segments, empty segments, encoded dots,
    slashes or backslashes) is unknown: the real key must only ever reach the routes listed here, with the
    method listed for each.
    """
    segments = path.split("/")[1:]
    if any(seg in ("", ".", "..") for seg in segments) or _AMBIGUOUS.search(path):
        raise UnknownRoute(path, guess_protocol(path, headers), method)
    provider, rest = _provider(path, headers)
    if provider is None:
        raise UnknownRoute(path, OPENAI, method)
    rest = PROVIDERS[provider].rest(rest)
    for protocol in PROTOCOLS.values():
        routed = protocol.route(method, rest) if protocol.provider == provider else None
        if routed is not None:
            return Route(provider, rest, routed.billed, routed.path_model, protocol.name)
    raise UnknownRoute(path, provider, method)


def _provider(path: str, headers: Headers) -> tuple[str | None, str]:
    """The provider whose prefix ``path`` has, and the path after it."""
    for family in PROVIDERS.values():
        if path.startswith(family.prefix + "/"):
            return family.provider, path[len(family.prefix):]
    if path.startswith(("/v1beta/", "/v1alpha/")):
        return GEMINI, path
    if path.startswith("/v1/messages") or (path.startswith("/v1/models") and "x-api-key" in headers):
        return ANTHROPIC, path
    if path.startswith("/v1/"):
        return OPENAI, path
    return None, path


def guess_protocol(path: str, headers: Headers) -> str:
    """The provider whose error shape fits a request that could not be classified."""
    if path.startswith("/anthropic") or path.startswith("/v1/messages") or "x-api-key" in headers:
        return ANTHROPIC
    if path.startswith(("/gemini", "/v1beta")) or "x-goog-api-key" in headers:
        return GEMINI
    return OPENAI


def of_record(record: Mapping[str, Any]) -> Protocol:
    """The protocol of a recorded call: the line's ``api``; for a line written before lines named it, the
    route it was sent to, else the shape of its bodies (a hand-made or foreign record), else its provider."""
    api = record.get("api")
    named = PROTOCOLS.get(api) if isinstance(api, str) else None
    if named is not None:
        return named
    route = record.get("route")
    if isinstance(route, str) and route:
        method, _, path = route.rpartition(" ")
        try:
            return PROTOCOLS[classify(path, {}, method or "POST").api]
        except UnknownRoute:
            pass
    for body in (record.get("response"), record.get("request")):
        for protocol in PROTOCOLS.values():
            if protocol.recognises(body):
                return protocol
    return get(record.get("protocol") if isinstance(record.get("protocol"), str) else None)


# --- where the key travels --------------------------------------------------------------------------------

def presented_token(headers: Headers, query: str) -> str | None:
    """The key the client presented, wherever its SDK puts it (Bearer, x-api-key, x-goog-api-key, ?key=)."""
    auth = headers.get("authorization")
    if auth:
        scheme, _, value = auth.strip().partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    for name in ("x-api-key", "x-goog-api-key", "api-key"):
        given: str | None = headers.get(name)
        if given and given.strip():
            return given.strip()
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key == "key" and value:
            return value
    return None


def strip_key_from_query(query: str) -> str:
    """The query string without ``key=`` (the token never goes upstream; the real key goes in a header)."""
    return urlencode([(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "key"])


def auth_headers(protocol: str, real_key: str | None) -> dict[str, str]:
    """The host's real key in the place the provider expects it (nothing when the host has none)."""
    return get(protocol).auth_headers(real_key) if real_key else {}


def error_body(protocol: str, status: int, message: str) -> bytes:
    """The JSON error body that protocol's SDKs parse into their usual exception."""
    return get(protocol).error_body(status, message)
