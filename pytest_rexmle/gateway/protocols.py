"""The three model APIs the gateway passes through: their routes, where each carries its key, and the
error shape each one's SDKs parse.

Why one table per protocol: the agent must not notice the gateway. A refusal (bad token, budget spent,
unknown route) arrives in the JSON its own SDK turns into the usual exception, and the token is accepted
wherever that protocol's clients put a key.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode

OPENAI, ANTHROPIC, GEMINI = "openai", "anthropic", "gemini"

#: (method, path after the protocol's prefix) each protocol passes through; anything else is an unknown route
#: (404, recorded, never sent upstream). A list of what the SDKs call, not of what the providers serve: the real
#: key must not reach ``DELETE /v1/models/{id}`` (deletes a fine-tuned model), ``GET /v1/chat/completions`` (lists
#: the organisation's stored completions), files, batches, fine-tuning, vector stores, admin endpoints, ...
_MODEL_ID = r"[\w.:-]+"
_OPENAI_ROUTES = {
    "POST": re.compile(r"^/(chat/completions|completions|responses|embeddings)$"),
    # a model id may hold slashes on OpenAI-compatible servers (vLLM, LiteLLM: "org/model")
    "GET": re.compile(r"^/models(/[\w.:-]+(/[\w.:-]+)*)?$|^/responses/resp_[\w-]+$"),
}
_ANTHROPIC_ROUTES = {
    "POST": re.compile(r"^/v1/(messages|messages/count_tokens)$"),
    "GET": re.compile(rf"^/v1/models(/{_MODEL_ID})?$"),
}
_GEMINI_ROUTES = {
    "POST": re.compile(r"^/(v1|v1beta|v1alpha)/models/(?P<model>[\w.-]+):(?P<verb>generateContent"
                       r"|streamGenerateContent|countTokens|embedContent|batchEmbedContents)$"),
    "GET": re.compile(r"^/(v1|v1beta|v1alpha)/models(/(?P<model>[\w.-]+))?$"),
}
#: percent-encoded dot, slash or backslash, and raw backslashes: paths an upstream may read differently
_AMBIGUOUS = re.compile(r"%2e|%2f|%5c|\\", re.IGNORECASE)
#: routes whose answer is not a billed model call (token counting, model lists, a stored response fetched again)
_FREE = re.compile(r"(count_tokens|:countTokens|/models(/[\w.:/-]+)?|/responses/resp_[\w-]+)$")


@dataclass(frozen=True)
class Route:
    """One request's place in a protocol: what goes upstream and how it is metered."""

    protocol: str
    upstream_path: str  # appended to the protocol's upstream base URL
    billed: bool        # a model call whose usage counts (not a model list or a token count)
    path_model: str | None = None  # Gemini names the model in the path


class UnknownRoute(LookupError):
    """A path that is none of the passed-through APIs; ``protocol`` is the best guess for the error shape."""

    def __init__(self, path: str, protocol: str, method: str = "") -> None:
        route = f"{method} {path}" if method else path
        super().__init__(f"unknown route {route!r}: the gateway passes through the model calls of /openai/v1/..., "
                         f"/anthropic/v1/... and /gemini/v1beta/models/... (chat, responses, messages, "
                         f"generateContent, embeddings, token counts, model lists), nothing else")
        self.protocol = protocol


def classify(path: str, headers, method: str = "POST") -> Route:
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
    if path.startswith("/openai/"):
        rest = path[len("/openai"):]
        rest = rest[3:] if rest.startswith("/v1/") else rest
        return _listed(OPENAI, _OPENAI_ROUTES, method, rest, path)
    if path.startswith("/anthropic/"):
        return _listed(ANTHROPIC, _ANTHROPIC_ROUTES, method, path[len("/anthropic"):], path)
    if path.startswith("/gemini/"):
        return _gemini(method, path[len("/gemini"):], path)
    if path.startswith(("/v1beta/", "/v1alpha/")):
        return _gemini(method, path, path)
    if path.startswith("/v1/messages") or (path.startswith("/v1/models") and "x-api-key" in headers):
        return _listed(ANTHROPIC, _ANTHROPIC_ROUTES, method, path, path)
    if path.startswith("/v1/"):
        return _listed(OPENAI, _OPENAI_ROUTES, method, path[3:], path)
    raise UnknownRoute(path, OPENAI, method)


def _listed(protocol: str, routes: dict[str, re.Pattern], method: str, rest: str, path: str) -> Route:
    """An OpenAI or Anthropic route: listed for its method, billed unless it lists models or counts tokens."""
    pattern = routes.get(method)
    if pattern is None or not pattern.match(rest):
        raise UnknownRoute(path, protocol, method)
    return Route(protocol, rest, billed=not _FREE.search(rest))


def _gemini(method: str, rest: str, path: str) -> Route:
    pattern = _GEMINI_ROUTES.get(method)
    match = pattern.match(rest) if pattern is not None else None
    if not match:
        raise UnknownRoute(path, GEMINI, method)
    billed = match.group("verb") not in (None, "countTokens") if method == "POST" else False
    return Route(GEMINI, rest, billed=billed, path_model=match.group("model"))


def guess_protocol(path: str, headers) -> str:
    """The protocol whose error shape fits a request that could not be classified."""
    if path.startswith("/anthropic") or path.startswith("/v1/messages") or "x-api-key" in headers:
        return ANTHROPIC
    if path.startswith(("/gemini", "/v1beta")) or "x-goog-api-key" in headers:
        return GEMINI
    return OPENAI


# --- where the key travels --------------------------------------------------------------------------------

#: headers that may carry a key, in every protocol (never forwarded as the agent sent them)
KEY_HEADERS = ("authorization", "x-api-key", "x-goog-api-key", "api-key", "proxy-authorization")


def presented_token(headers, query: str) -> str | None:
    """The key the client presented, wherever its SDK puts it (Bearer, x-api-key, x-goog-api-key, ?key=)."""
    auth = headers.get("authorization")
    if auth:
        scheme, _, value = auth.strip().partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    for name in ("x-api-key", "x-goog-api-key", "api-key"):
        value = headers.get(name)
        if value and value.strip():
            return value.strip()
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key == "key" and value:
            return value
    return None


def strip_key_from_query(query: str) -> str:
    """The query string without ``key=`` (the token never goes upstream; the real key goes in a header)."""
    pairs = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "key"]
    return urlencode(pairs)


def auth_headers(protocol: str, real_key: str | None) -> dict[str, str]:
    """The host's real key in the place the provider expects it (nothing when the host has none)."""
    if not real_key:
        return {}
    if protocol == ANTHROPIC:
        return {"x-api-key": real_key}
    if protocol == GEMINI:
        return {"x-goog-api-key": real_key}
    return {"Authorization": f"Bearer {real_key}"}


# --- errors in each protocol's own shape -------------------------------------------------------------------

_OPENAI_TYPES = {400: "invalid_request_error", 401: "invalid_api_key", 404: "not_found_error",
                 413: "invalid_request_error", 429: "insufficient_quota", 502: "api_error", 503: "api_error",
                 504: "timeout"}
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                    413: "request_too_large", 429: "rate_limit_error", 502: "api_error", 503: "overloaded_error",
                    504: "api_error"}
_GEMINI_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 404: "NOT_FOUND", 413: "INVALID_ARGUMENT",
                  429: "RESOURCE_EXHAUSTED", 502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def error_body(protocol: str, status: int, message: str) -> bytes:
    """The JSON error body that protocol's SDKs parse into their usual exception."""
    if protocol == ANTHROPIC:
        doc = {"type": "error", "error": {"type": _ANTHROPIC_TYPES.get(status, "api_error"), "message": message}}
    elif protocol == GEMINI:
        doc = {"error": {"code": status, "message": message, "status": _GEMINI_STATUS.get(status, "INTERNAL")}}
    else:
        kind = _OPENAI_TYPES.get(status, "api_error")
        doc = {"error": {"message": message, "type": kind, "param": None, "code": kind}}
    return json.dumps(doc).encode()
