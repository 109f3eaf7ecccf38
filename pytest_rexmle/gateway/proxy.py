"""The egress proxy on the run's listener: absolute-form HTTP requests and CONNECT tunnels, by policy.

Why the proxy resolves names: the sandbox has no DNS of its own, so every name the agent wants goes
through here, is decided and recorded, and a refused host is never contacted at all.
"""

from __future__ import annotations

import base64
import binascii
import http.client
import selectors
import socket
import time
from contextlib import suppress
from typing import TYPE_CHECKING, cast

from .connection import HOP_BY_HOP, BadRequest
from .egress import Decision, resolve
from .hostname import InvalidHost, as_authority, split_authority

if TYPE_CHECKING:
    from .connection import Connection
    from .server import GatewayRun

#: a tunnel with no byte either way for this long is closed
TUNNEL_IDLE_SECONDS = 300.0


def _authorised(conn: Connection, run: GatewayRun) -> bool:
    """A listener inside the sandbox belongs to its run; on the host's loopback the token must come along
    (``http://rexmle:<token>@host:port`` in the proxy variables gives it as Proxy-Authorization)."""
    if not conn.token_required:
        return True
    value = conn.headers.get("proxy-authorization") or ""
    scheme, _, encoded = value.partition(" ")
    if scheme.lower() == "basic":
        try:
            _, _, password = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            password = ""
        if password and run.owns(password):
            return True
    elif scheme.lower() == "bearer" and encoded.strip() and run.owns(encoded.strip()):
        return True
    conn.respond(407, b"rexmle gateway: proxy authorization required (this run's token)\n", "text/plain",
                 [("Proxy-Authenticate", 'Basic realm="rexmle"')], close=True)
    return False


def _refuse(conn: Connection, host: str, port: int, reason: str, status: int | None = None) -> None:
    """403 for a refused host, 502 when an allowed one could not be reached (or ``status``)."""
    status = status or (502 if reason.startswith("connection failed") else 403)
    conn.respond(status, f"rexmle gateway: {host}:{port} refused: {reason}\n".encode(), "text/plain", close=True)


def _open(run: GatewayRun, host: str, port: int, path: str | None,
          tunnel: bool) -> tuple[socket.socket | None, str]:
    """Decide, record, and connect when allowed; (socket, "") or (None, why refused). ``host`` is canonical
    (:func:`.hostname.normal_host`); the addresses connected to are exactly those resolved and checked."""
    decision = run.policy.decide(host, port, path, tunnel)
    if not decision.allowed:
        run.egress.record(host, port, decision, path)
        return None, decision.reason
    try:
        infos = resolve(host, port, decision)
    except PermissionError as exc:
        run.egress.record(host, port, Decision(False, str(exc)), path)
        return None, str(exc)
    except OSError as exc:
        run.egress.record(host, port, Decision(False, f"name not resolved: {exc}"), path)
        return None, f"name not resolved: {exc}"
    run.egress.record(host, port, decision, path)
    last: OSError | None = None
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        sock.settimeout(run.gateway.limits.connect_timeout)
        try:
            sock.connect(address)
            return sock, ""
        except OSError as exc:
            last = exc
            sock.close()
    return None, f"connection failed: {last}"


def tunnel(conn: Connection, run: GatewayRun) -> None:
    """CONNECT host:443 → 200, then bytes both ways until either side closes or the tunnel idles."""
    conn.close_connection = True
    if not _authorised(conn, run):
        return
    if conn.framing() != 0:
        raise BadRequest(400, "a CONNECT request with a body")
    try:
        host, port = split_authority(conn.path)
    except InvalidHost as exc:
        raise BadRequest(400, f"CONNECT needs host:port with a valid host name or IP literal: {exc}") from None
    upstream, why = _open(run, host, port, None, tunnel=True)
    if upstream is None:
        _refuse(conn, host, port, why)
        return
    with upstream:
        conn.wfile.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        conn.headers_sent = True
        pending = _buffered(conn)
        if pending:
            upstream.sendall(pending)
        _splice(conn.connection, upstream)


def _buffered(conn: Connection) -> bytes:
    """Bytes the client sent after its CONNECT header that already sit in the reader's buffer."""
    sock = conn.connection
    sock.setblocking(False)
    try:
        return conn.rfile.read1(65536) or b""
    except (BlockingIOError, OSError, TypeError):
        return b""
    finally:
        sock.settimeout(conn.timeout)


def _splice(client: socket.socket, upstream: socket.socket) -> None:
    peers = {client: upstream, upstream: client}
    open_ends = {client, upstream}
    with selectors.DefaultSelector() as sel:
        for sock in peers:
            sock.setblocking(False)
            sel.register(sock, selectors.EVENT_READ)
        idle_since = time.monotonic()
        while open_ends:
            ready = sel.select(timeout=5.0)
            if not ready:
                if time.monotonic() - idle_since > TUNNEL_IDLE_SECONDS:
                    return
                continue
            idle_since = time.monotonic()
            for key, _ in ready:
                src = cast(socket.socket, key.fileobj)  # only the two sockets are registered
                try:
                    data = src.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    return
                dst = peers[src]
                if not data:
                    sel.unregister(src)
                    open_ends.discard(src)
                    with suppress(OSError):
                        dst.shutdown(socket.SHUT_WR)
                    continue
                try:
                    dst.settimeout(30.0)
                    dst.sendall(data)
                    dst.setblocking(False)
                except OSError:
                    return


def absolute_target(target: str) -> tuple[str, int, str]:
    """(canonical host, port, path with query) of ``http://host[:port]/path``; BadRequest for anything else
    (another scheme, user information, a fragment, a host that is not a valid name or IP literal)."""
    scheme, sep, rest = target.partition("://")
    if not sep or scheme.lower() != "http":
        raise BadRequest(400, "only http:// URLs in absolute form; use CONNECT for https")
    if "#" in rest:
        raise BadRequest(400, "a fragment (#) in the request target")
    end = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, path = rest[:end], rest[end:]
    try:
        host, port = split_authority(authority, default_port=80)
    except InvalidHost as exc:
        raise BadRequest(400, f"invalid host in the request URL: {exc}") from None
    return host, port, path if path.startswith("/") else "/" + path


def forward(conn: Connection, run: GatewayRun) -> None:
    """``GET http://host/path`` → the same request to host:80 (or an allowed HOST:PORT), answer relayed."""
    if not _authorised(conn, run):
        return
    host, port, path = absolute_target(conn.path)
    body = conn.read_body(run.gateway.limits.max_body)
    sock, why = _open(run, host, port, path.split("?", 1)[0], tunnel=False)
    if sock is None:
        _refuse(conn, host, port, why)
        return
    upstream = http.client.HTTPConnection(host, port, timeout=run.gateway.limits.upstream_timeout)
    upstream.sock = sock
    sock.settimeout(run.gateway.limits.upstream_timeout)
    try:
        # Host is the URL's: a different Host header would let an allowed CDN front for a refused site
        headers = {k: v for k, v in conn.headers.items() if k.lower() not in HOP_BY_HOP}
        headers["Host"] = host if port == 80 and ":" not in host else as_authority(host, port)
        try:
            upstream.request(conn.command, path, body=body or None, headers=headers)
            resp = upstream.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            _refuse(conn, host, port, f"upstream failed: {type(exc).__name__}", 502)
            return
        conn.begin_relayed(resp, [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP_BY_HOP])
        if conn.command == "HEAD":
            return
        while True:
            try:
                chunk = resp.read1(65536)
            except (OSError, http.client.HTTPException):
                conn.close_connection = True
                return
            if not chunk:
                break
            conn.send_part(chunk)
        conn.end()
    finally:
        upstream.close()
