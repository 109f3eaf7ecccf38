"""Provider-side tools: tools the provider runs for the agent (web search, fetching a URL, a remote MCP
server, a code container), refused unless the harness gives ``--rexmle-allow-provider-tools``.

Why: such a tool reaches the web, or acts, from the provider's side, outside the egress policy (the
provider can fetch the tasks' answers from Zenodo for the agent) and outside the run's record (the
trajectory holds the call, not what the provider fetched). Tools the agent's own code carries out
(function tools, shell, text editor, computer use: the client performs the actions, inside the sandbox)
pass. With the option, each request carrying such tools is counted per run, and the session report says
that provider tools were allowed.

A model call whose body the gateway cannot read exactly (not JSON, invalid UTF-8, a key given twice, which
the provider might read another way) is refused: it could hide a tool.
"""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any

from .. import protocols

if TYPE_CHECKING:
    from ..protocols import Route
    from .server import GatewayRun


class AmbiguousRequest(ValueError):
    """A body the gateway reads one way, or not at all, and a provider could read another way."""


def _strict_object(pairs: list[tuple[str, Any]]) -> dict:
    doc = {}
    for key, value in pairs:
        if key in doc:
            raise AmbiguousRequest(f"the key {key[:60]!r} appears twice in one object")
        doc[key] = value
    return doc


def parse(raw: bytes) -> Any:
    """The body as JSON (about 10 µs for a chat call, as long as the plain parse for a 3 MB one); None when
    empty. A body the gateway cannot read exactly is refused, since a laxer reader upstream (invalid UTF-8
    replaced, a key given twice read first-wins, deeper nesting) could find a tool in it: AmbiguousRequest."""
    if not raw:
        return None
    try:
        return json.loads(raw, object_pairs_hook=_strict_object)
    except AmbiguousRequest:
        raise
    except RecursionError:
        raise AmbiguousRequest("the body is nested too deeply for the gateway to read") from None
    except ValueError as exc:  # UnicodeDecodeError included
        raise AmbiguousRequest(f"the body is not JSON the gateway can read ({type(exc).__name__})") from None


def find(protocol: str, doc: Any) -> list[str]:
    """The provider-side tools a request asks for, by the protocol's own names, each once, in order (each
    protocol module lists its provider's: :meth:`.protocols.base.Protocol.provider_tools`)."""
    return list(dict.fromkeys(protocols.get(protocol).provider_tools(doc))) if isinstance(doc, dict) else []


class ToolUse:
    """Per run: whether provider tools were allowed, and how many requests named each tool (thread-safe)."""

    def __init__(self, allowed: bool) -> None:
        self.allowed = allowed
        self._lock = threading.Lock()
        self._used: dict[str, int] = {}
        self._refused: dict[str, int] = {}

    def note(self, names: list[str], allowed: bool) -> None:
        with self._lock:
            counts = self._used if allowed else self._refused
            for name in names:
                counts[name] = counts.get(name, 0) + 1

    def to_json(self) -> dict:
        with self._lock:
            return {"allowed": self.allowed, "used": dict(self._used), "refused": dict(self._refused)}


def screen(run: GatewayRun, route: Route, method: str, body: bytes) -> str | None:
    """Called once per model call, after its body is read: why the call is refused (the caller refuses and
    records it, with the tools named), or None; an allowed call with provider tools is counted in the run's
    record."""
    if method != "POST" or not route.billed:
        return None
    try:
        names = find(route.api or route.protocol, parse(body))
    except AmbiguousRequest as exc:
        return (f"rexmle gateway: request refused: {exc}; the provider could read it otherwise than the gateway "
                f"(which checks it for provider-side tools)")
    if not names:
        return None
    uses: ToolUse = run.provider_tools
    uses.note(names, allowed=uses.allowed)
    if uses.allowed:
        return None
    return (f"rexmle gateway: provider-side tool(s) refused: {', '.join(names)}. The provider would reach the web "
            f"or act for the agent, outside the egress policy and the run's record; the harness allows them with "
            f"--rexmle-allow-provider-tools")
