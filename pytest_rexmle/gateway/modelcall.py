"""One model call passed through: token swapped for the host's key, body forwarded byte for byte, the
answer streamed back chunk by chunk while its usage is read on the side, then metered and recorded.

Why chunk by chunk: an agent streaming a long completion must see tokens as the provider sends them;
the gateway keeps at most what it needs for metering (and a capped copy for the trajectory).
"""

from __future__ import annotations

import http.client
import json
import re
import time
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from .. import protocols
from ..protocols import Route, error_body
from . import provider_tools
from .connection import HOP_BY_HOP
from .metering import CallUsage, model_name
from .scrub import Scrubber
from .sse import SSEReader
from .trajectory import MAX_RESPONSE_BYTES, EventLog, RecordError, body_record

if TYPE_CHECKING:
    from .connection import Connection
    from .server import GatewayRun

#: a non-streamed answer larger than this is forwarded but not parsed for usage
MAX_METERED_BYTES = 32 * 1024 * 1024
#: an upstream error body is read whole (to redact it) up to this size
MAX_ERROR_BYTES = 1024 * 1024
READ_SIZE = 64 * 1024
#: request headers passed upstream in every protocol: body type, what the client accepts, who it is, retries
#: made safe to repeat; each protocol adds its version and beta switches (anything else is dropped)
_COMMON = frozenset({"content-type", "accept", "user-agent", "idempotency-key"})
#: the Stainless-generated SDKs' (openai, anthropic) telemetry: language, OS, runtime, retry count, time-out
_TELEMETRY = re.compile(r"^x-stainless-[a-z0-9-]{1,40}$")
#: what a kept-alive connection the provider has closed meanwhile looks like
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)


def upstream_headers(headers, protocol: str, key: str | None,
                     account: tuple[tuple[str, str], ...] = ()) -> dict[str, str]:
    """The client's headers that the provider needs to read the call (``_COMMON`` and the protocol's own, the SDKs'
    telemetry), then the host's real key and the host's organisation/project headers. An allow-list, not a
    deny-list: an agent-chosen ``OpenAI-Organization`` or ``-Project`` (billing another account of the host's
    key), a provider's admin or routing header, or one nobody has thought of yet never goes upstream."""
    reader = protocols.get(protocol)
    allowed = _COMMON | reader.forwarded_headers
    out = {}
    for name, value in headers.items():
        low = name.lower()
        if low in allowed or (reader.telemetry and _TELEMETRY.match(low)):
            out[name] = value
    out.update(protocols.auth_headers(protocol, key))
    out.update(account)
    return out


def forward(conn: Connection, run: GatewayRun, route: Route, query: str) -> None:
    """One model call: refusals first (each recorded as refused), then the request's record line, and only
    then the provider; the answer's line follows once it has ended."""
    gateway = run.gateway
    body = conn.read_body(gateway.limits.max_body)
    label = f"{conn.command} {conn.path.split('?', 1)[0]}"
    request_doc, request_truncated = body_record(body)
    usage = CallUsage(route.protocol, api=route.api)
    if isinstance(request_doc, dict) and isinstance(request_doc.get("model"), str):
        usage.model = model_name(request_doc["model"])
    elif route.path_model:
        usage.model = model_name(route.path_model)

    def refuse(status: int, message: str) -> None:
        run.refuse(conn, route.protocol, status, message, route=label, api=route.api, model=usage.model,
                   request_bytes=len(body))

    # --- refused before anything goes upstream --------------------------------------------------------
    # provider-side tools (web search, URL fetch, remote MCP, code containers): refused and recorded as
    # refused unless the harness allows them; see provider_tools.py
    why = provider_tools.screen(run, route, conn.command, body)
    if why:
        refuse(400, why)
        return
    upstream = gateway.upstreams.get(route.protocol)
    if upstream is None:  # the harness's own base URL is broken: say so, spend nothing
        refuse(502, f"rexmle gateway: no {route.protocol} upstream: "
                    f"{gateway.upstream_errors.get(route.protocol, 'not configured')}")
        return
    reservation = run.ledger.reserve(route.api or route.protocol, usage.model, request_doc, len(body),
                                     billed=route.billed, generates="embed" not in route.upstream_path.lower())
    refused = run.admit(reservation)
    if refused:
        refuse(429, f"rexmle gateway: this call does not fit the run's budget: {refused}")
        return

    # --- the record before the answer: a call that cannot be recorded is not made ---------------------
    requested_stream = isinstance(request_doc, dict) and request_doc.get("stream") is True
    try:
        call = run.trajectory.open_call({"protocol": route.protocol, "api": route.api, "route": label,
                                         "model": usage.model,
                                         "stream": requested_stream, "request": request_doc,
                                         "truncated": request_truncated})
    except RecordError as exc:
        run.ledger.release(reservation)  # it never went upstream: nothing is charged
        refuse(507, f"rexmle gateway: the call was not made: {exc}")
        return

    # --- the provider, then the answer's line ---------------------------------------------------------
    clock = time.perf_counter()
    record: dict[str, Any] = {"protocol": route.protocol, "api": route.api, "route": label, "status": None,
                              "stream": False, "response": None, "truncated": request_truncated}
    sent = True
    try:
        status, stream, response_doc, truncated = _exchange(conn, run, route, upstream, query, body, usage)
        record.update(status=status, stream=stream, response=response_doc, truncated=request_truncated or truncated)
    except _UpstreamFailure as exc:
        sent = exc.sent
        record.update(status=exc.status, error=exc.message)
        if not conn.headers_sent:
            conn.respond(exc.status, error_body(route.protocol, exc.status, exc.message))
        else:  # the answer had begun: the client sees a cut stream, the record says why
            conn.close_connection = True
    finally:
        seconds = time.perf_counter() - clock
        usage.answered = isinstance(record["status"], int) and 200 <= record["status"] < 300
        metered = usage.metered(sent)
        cost, why, (tokens, usd) = run.settle(usage, seconds, reservation, metered=metered, billed=route.billed)
        record.update(duration_s=round(seconds, 6), model=usage.model,
                      usage={"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                             "cached_tokens": usage.cached_tokens, "cost_usd": cost,
                             **({"cost_unknown_reason": why} if why else {})})
        if run.budget is not None:
            record["budget_charge"] = {"tokens": tokens, "usd": usd, "at_reservation": not metered}
        try:
            run.trajectory.close_call(call, record)
        except RecordError as exc:  # the answer is out: the request's line stands, the failure is counted
            run.note_error("record", str(exc))


class _UpstreamFailure(Exception):
    """The provider could not be reached or broke off; ``sent`` False when the request never left."""

    def __init__(self, status: int, message: str, sent: bool = True) -> None:
        super().__init__(message)
        self.status, self.message, self.sent = status, message, sent


def _exchange(conn, run, route: Route, upstream, query: str, body: bytes, usage: CallUsage):
    """Send upstream, relay the answer; returns (status, stream?, response record, truncated?)."""
    limits = run.gateway.limits
    where = f"the upstream {route.protocol} API ({upstream.display})"
    pool = run.gateway.pool(upstream)
    target = upstream.target(route.upstream_path, query)
    headers = {**upstream_headers(conn.headers, route.protocol, upstream.key, upstream.account),
               **upstream.request_headers()}
    payload = body if body or conn.command in ("POST", "PUT", "PATCH") else None
    for attempt in (0, 1):
        try:
            up, reused = pool.get(limits.connect_timeout) if attempt == 0 else (
                upstream.connect(limits.connect_timeout), False)
        except TimeoutError:
            raise _UpstreamFailure(504, f"rexmle gateway: {where} did not accept a connection within "
                                        f"{limits.connect_timeout:g} s", sent=False) from None
        except OSError as exc:
            raise _UpstreamFailure(502, f"rexmle gateway: {where} cannot be reached: {type(exc).__name__}: "
                                        f"{exc.strerror or exc}", sent=False) from None
        try:
            up.sock.settimeout(limits.upstream_timeout)
            up.request(conn.command, target, body=payload, headers=headers)
            resp = up.getresponse()
        except _STALE:
            up.close()
            if reused:  # an idle connection the provider had closed meanwhile: once more on a fresh one
                continue
            raise _UpstreamFailure(502, f"rexmle gateway: {where} closed the connection") from None
        except TimeoutError:
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
        usage.complete = resp.isclosed() or resp.length == 0  # read to its end (not cut by the client)
        if usage.complete and not resp.will_close:  # reusable
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
    headers = [(k, run.redact(v)) for k, v in resp.getheaders()
               if k.lower() not in HOP_BY_HOP and run.redact(k) == k]  # a header named by a key: dropped
    encoding = (resp.getheader("content-encoding") or "identity").strip().lower()
    if encoding != "identity":  # asked for identity: a compressed body could carry a key past the scrubber
        raise _UpstreamFailure(502, f"rexmle gateway: {where} sent a compressed answer (Content-Encoding: "
                                    f"{encoding[:40]}) that the gateway cannot check for keys")
    scrubber = Scrubber((run.token, *run.gateway.secrets))  # every answer, success or error, streamed or not
    if resp.status >= 400 and not stream:  # an error body is small: read it whole and take any key out
        try:
            raw = resp.read(MAX_ERROR_BYTES)
        except (TimeoutError, OSError, http.client.HTTPException):
            raise _UpstreamFailure(504, f"rexmle gateway: {where} stopped answering") from None
        raw = scrubber.feed(raw) + scrubber.flush()
        conn.begin(resp.status, resp.reason, headers, len(raw))
        conn.wfile.write(raw)
        doc, truncated = body_record(raw, MAX_RESPONSE_BYTES)
        usage.observe(doc)
        return resp.status, False, doc, truncated
    conn.begin_relayed(resp, headers)
    reader, events = (SSEReader(), EventLog()) if stream else (None, None)
    kept, overflow = bytearray(), False
    while True:
        try:
            chunk = resp.read1(READ_SIZE)
        except TimeoutError:
            _finish_meter(reader, events, usage, kept, overflow)
            raise _UpstreamFailure(504, f"rexmle gateway: {where} stalled for {limits.upstream_timeout:g} s "
                                        f"mid-answer") from None
        except (OSError, http.client.HTTPException):
            _finish_meter(reader, events, usage, kept, overflow)
            raise _UpstreamFailure(502, f"rexmle gateway: {where} broke off its answer") from None
        last = not chunk
        chunk = scrubber.flush() if last else scrubber.feed(chunk)
        if chunk:
            try:
                conn.send_part(chunk)
            except OSError:  # the client went away: stop reading, keep what was metered
                conn.close_connection = True
                break
            if reader is not None and events is not None:  # set together for a stream
                for event, size in reader.feed(chunk):
                    usage.observe(event)
                    events.add(event, size)
            elif not overflow:
                if len(kept) + len(chunk) > MAX_METERED_BYTES:
                    overflow = True
                    kept.clear()
                else:
                    kept += chunk
        if last:
            break
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
