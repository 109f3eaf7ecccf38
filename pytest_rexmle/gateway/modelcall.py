"""One model call passed through: token swapped for the host's key, body forwarded byte for byte, the
answer streamed back chunk by chunk while its usage is read on the side, then metered and recorded.

Why chunk by chunk: an agent streaming a long completion must see tokens as the provider sends them;
the gateway keeps at most what it needs for metering (and a capped copy for the trajectory).
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from contextlib import suppress
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from .connection import HOP_BY_HOP
from .metering import CallUsage, model_name
from .protocols import KEY_HEADERS, Route, auth_headers, error_body
from .sse import SSEReader
from .trajectory import MAX_RESPONSE_BYTES, EventLog, body_record

if TYPE_CHECKING:
    from .connection import Connection
    from .server import GatewayRun

#: a non-streamed answer larger than this is forwarded but not parsed for usage
MAX_METERED_BYTES = 32 * 1024 * 1024
#: an upstream error body is read whole (to redact it) up to this size
MAX_ERROR_BYTES = 1024 * 1024
READ_SIZE = 64 * 1024
#: what a kept-alive connection the provider has closed meanwhile looks like
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)


def upstream_headers(headers, protocol: str, key: str | None) -> dict[str, str]:
    """The client's headers minus hop-by-hop ones and every key, plus the host's real key."""
    dropped = HOP_BY_HOP.union(KEY_HEADERS, ("accept-encoding", "expect"))
    out = {name: value for name, value in headers.items() if name.lower() not in dropped}
    out.update(auth_headers(protocol, key))
    return out


def forward(conn: "Connection", run: "GatewayRun", route: Route, query: str) -> None:
    gateway = run.gateway
    body = conn.read_body(gateway.limits.max_body)
    label = f"{conn.command} {conn.path.split('?', 1)[0]}"
    request_doc, request_truncated = body_record(body)
    usage = CallUsage(route.protocol)
    if isinstance(request_doc, dict) and isinstance(request_doc.get("model"), str):
        usage.model = model_name(request_doc["model"])
    elif route.path_model:
        usage.model = model_name(route.path_model)
    upstream = gateway.upstreams.get(route.protocol)
    if upstream is None:  # the harness's own base URL is broken: say so, spend nothing
        run.refuse(conn, route.protocol, 502, f"rexmle gateway: no {route.protocol} upstream: "
                   f"{gateway.upstream_errors.get(route.protocol, 'not configured')}", route=label, model=usage.model)
        return
    refused = run.admit()
    if refused:
        run.refuse(conn, route.protocol, 429, f"rexmle gateway: this run's budget ran out: {refused}",
                   route=label, model=usage.model, request=request_doc)
        return
    started, clock = datetime.now(timezone.utc), time.perf_counter()
    record = {"ts": started.isoformat(), "protocol": route.protocol, "route": label, "model": usage.model,
              "status": None, "stream": False, "request": request_doc, "response": None,
              "truncated": request_truncated}
    try:
        status, stream, response_doc, truncated = _exchange(conn, run, route, upstream, query, body, usage)
        record.update(status=status, stream=stream, response=response_doc,
                      truncated=record["truncated"] or truncated)
    except _UpstreamFailure as exc:
        record.update(status=exc.status, error=exc.message)
        if not conn.headers_sent:
            conn.respond(exc.status, error_body(route.protocol, exc.status, exc.message))
        else:  # the answer had begun: the client sees a cut stream, the record says why
            conn.close_connection = True
    finally:
        seconds = time.perf_counter() - clock
        record["duration_s"] = round(seconds, 6)
        record["model"] = usage.model
        usage.answered = isinstance(record["status"], int) and 200 <= record["status"] < 300
        cost, why = run.settle(usage, seconds, billed=route.billed)
        record["usage"] = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                           "cached_tokens": usage.cached_tokens, "cost_usd": cost,
                           **({"cost_unknown_reason": why} if why else {})}
        run.trajectory.write(record)


class _UpstreamFailure(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def _exchange(conn, run, route: Route, upstream, query: str, body: bytes, usage: CallUsage):
    """Send upstream, relay the answer; returns (status, stream?, response record, truncated?)."""
    limits = run.gateway.limits
    where = f"the upstream {route.protocol} API ({upstream.display})"
    pool = run.gateway.pool(upstream)
    target = upstream.target(route.upstream_path, query)
    headers = {**upstream_headers(conn.headers, route.protocol, upstream.key), **upstream.request_headers()}
    payload = body if body or conn.command in ("POST", "PUT", "PATCH") else None
    for attempt in (0, 1):
        try:
            up, reused = pool.get(limits.connect_timeout) if attempt == 0 else (
                upstream.connect(limits.connect_timeout), False)
        except (TimeoutError, socket.timeout):
            raise _UpstreamFailure(504, f"rexmle gateway: {where} did not accept a connection within "
                                        f"{limits.connect_timeout:g} s") from None
        except OSError as exc:
            raise _UpstreamFailure(502, f"rexmle gateway: {where} cannot be reached: {type(exc).__name__}: "
                                        f"{exc.strerror or exc}") from None
        try:
            up.sock.settimeout(limits.upstream_timeout)
            up.request(conn.command, target, body=payload, headers=headers)
            resp = up.getresponse()
        except _STALE:
            up.close()
            if reused:  # an idle connection the provider had closed meanwhile: once more on a fresh one
                continue
            raise _UpstreamFailure(502, f"rexmle gateway: {where} closed the connection") from None
        except (TimeoutError, socket.timeout):
            up.close()
            raise _UpstreamFailure(504, f"rexmle gateway: {where} did not answer within "
                                        f"{limits.upstream_timeout:g} s") from None
        except (OSError, http.client.HTTPException) as exc:
            up.close()
            raise _UpstreamFailure(502, f"rexmle gateway: {where} failed: {type(exc).__name__}") from None
        try:
            result = _relay(conn, run, resp, usage, where)
        except BaseException:
            up.close()
            raise
        if (resp.isclosed() or resp.length == 0) and not resp.will_close:  # read to its end: reusable
            resp.close()  # releases the reader only; the connection stays open for the next call
            pool.put(up)
        else:
            up.close()
        return result
    raise _UpstreamFailure(502, f"rexmle gateway: {where} closed the connection twice")  # pragma: no cover


def _relay(conn, run, resp, usage: CallUsage, where: str):
    limits = run.gateway.limits
    ctype = (resp.getheader("content-type") or "").lower()
    stream = "text/event-stream" in ctype
    headers = [(k, run.redact(v)) for k, v in resp.getheaders() if k.lower() not in HOP_BY_HOP]
    if resp.status >= 400 and not stream:  # an error body is small: read it whole and take any key out
        try:
            raw = resp.read(MAX_ERROR_BYTES)
        except (TimeoutError, socket.timeout, OSError, http.client.HTTPException):
            raise _UpstreamFailure(504, f"rexmle gateway: {where} stopped answering") from None
        raw = run.redact(raw.decode("utf-8", "replace")).encode() if run.has_secret_in(raw) else raw
        conn.begin(resp.status, resp.reason, headers, len(raw))
        conn.wfile.write(raw)
        doc, truncated = body_record(raw, MAX_RESPONSE_BYTES)
        usage.observe(doc)
        return resp.status, False, doc, truncated
    length = resp.getheader("content-length")
    chunked = "chunked" in (resp.getheader("transfer-encoding") or "").lower()
    fixed = int(length) if length and length.isdigit() and not chunked else None
    conn.begin(resp.status, resp.reason, headers, fixed)
    reader, events = (SSEReader(), EventLog()) if stream else (None, None)
    kept, overflow = bytearray(), False
    while True:
        try:
            chunk = resp.read1(READ_SIZE)
        except (TimeoutError, socket.timeout):
            _finish_meter(reader, events, usage, kept, overflow)
            raise _UpstreamFailure(504, f"rexmle gateway: {where} stalled for {limits.upstream_timeout:g} s "
                                        f"mid-answer") from None
        except (OSError, http.client.HTTPException):
            _finish_meter(reader, events, usage, kept, overflow)
            raise _UpstreamFailure(502, f"rexmle gateway: {where} broke off its answer") from None
        if not chunk:
            break
        try:
            conn.send_part(chunk)
        except OSError:  # the client went away: stop reading, keep what was metered
            conn.close_connection = True
            break
        if reader is not None:
            for event, size in reader.feed(chunk):
                usage.observe(event)
                events.add(event, size)
        elif not overflow:
            if len(kept) + len(chunk) > MAX_METERED_BYTES:
                overflow = True
                kept.clear()
            else:
                kept += chunk
    try:
        conn.end()
    except OSError:
        conn.close_connection = True
    return (resp.status, stream, *_finish_meter(reader, events, usage, kept, overflow))


def _finish_meter(reader, events, usage: CallUsage, kept: bytearray, overflow: bool):
    """(response record, truncated?) after the last byte; usage folded in."""
    if reader is not None:
        for event, size in reader.close():
            usage.observe(event)
            events.add(event, size)
        return events.events, events.truncated
    if overflow:
        return {"preview": None, "note": f"answer larger than {MAX_METERED_BYTES} bytes: not parsed"}, True
    raw = bytes(kept)
    if raw:
        with suppress(ValueError):
            usage.observe(json.loads(raw))
    return body_record(raw, MAX_RESPONSE_BYTES)
