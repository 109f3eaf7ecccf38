"""What a request on a run's listener is: an egress proxy request, the validation endpoint, or a model
call; and the token check that comes first for the latter two.

Why one listener for all three: the sandbox has exactly one network peer, the gateway, so model APIs,
the proxy and validation share its address (the agent's variables name them).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .. import protocols
from . import modelcall, proxy
from .connection import BadRequest

if TYPE_CHECKING:
    from .connection import Connection

VALIDATE_PATH = "/rexmle/validate"


def dispatch(conn: Connection) -> None:
    run = conn.run
    target = conn.path
    conn.framing()  # ambiguous framing is a 400 whoever asks
    if conn.command == "CONNECT":
        proxy.tunnel(conn, run)
        return
    if target.lower().startswith(("http://", "https://")):
        proxy.forward(conn, run)
        return
    if not target.startswith("/"):
        raise BadRequest(400, f"malformed request target {target[:100]!r}")
    parts = urlsplit(target)
    path, query = parts.path, parts.query
    if path == VALIDATE_PATH:
        if not _token_ok(conn, run, protocols.OPENAI, query):
            return
        _validate(conn, run)
        return
    try:
        route = protocols.classify(path, conn.headers, conn.command)
    except protocols.UnknownRoute as exc:
        if not _token_ok(conn, run, exc.protocol, query):
            return
        conn.read_body(run.gateway.limits.max_body)  # keep the connection in step
        run.refuse(conn, exc.protocol, 404, str(exc), route=f"{conn.command} {path}")
        return
    if not _token_ok(conn, run, route.protocol, query, route.api):
        return
    modelcall.forward(conn, run, route, protocols.strip_key_from_query(query))


def _token_ok(conn: Connection, run, protocol: str, query: str, api: str | None = None) -> bool:
    """The run's own token, in the protocol's place; otherwise a 401 in that protocol's shape."""
    presented = protocols.presented_token(conn.headers, query)
    if presented is not None and run.owns(presented):
        return True
    why = "missing API key" if presented is None else "invalid API key (not this run's token)"
    run.refuse(conn, protocol, 401, f"rexmle gateway: {why}", route=f"{conn.command} {urlsplit(conn.path).path}",
               close=True, api=api)
    return False


def _validate(conn: Connection, run) -> None:
    if conn.command != "POST":
        raise BadRequest(405, "POST /rexmle/validate")
    conn.read_body(64 * 1024)  # options are not needed: the run's own submission folder is validated
    verdict, status = run.validate()
    conn.respond(status, json.dumps(verdict).encode())
