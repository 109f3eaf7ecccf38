"""One client connection: strict HTTP/1.1 parsing with limits, request bodies, and responses written as they go.

Why a thread per connection with its own time-outs: a slow or hostile client holds only its own thread,
never the gateway or another run; a malformed request gets a clear error in JSON and the connection
ends, the session goes on.
"""

from __future__ import annotations

import http.client
import io
import re
import socket
import time
from collections.abc import Sequence
from contextlib import suppress
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING

from ..protocols import OPENAI, error_body
from .http11 import BadRequest, check_semantics, read_fields, read_request_line, skip_trailers

if TYPE_CHECKING:
    from .server import GatewayRun

#: hop-by-hop headers: never copied between the two sides of the gateway
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
                        "te", "trailer", "trailers", "transfer-encoding", "upgrade", "content-length", "host"})


_DIGITS = re.compile(r"[0-9]{1,18}")
#: ``chunk-size [chunk-ext] CRLF``: at most 16 hex digits, extensions of visible characters only
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,16})((?:[ \t]*;[\x20-\x7e\t]*)?)\r\n")
_CHUNK_LINE = 1024


class _DeadlineReader(socket.SocketIO):
    """The connection's reads, each bounded by the per-read time-out *and* by the request's deadline, so a
    client trickling one byte at a time cannot hold its thread forever."""

    def __init__(self, sock: socket.socket, per_read: float) -> None:
        super().__init__(sock, "rb")
        self._socket = sock  # SocketIO keeps it as _sock, which typeshed does not declare
        self.per_read = per_read
        self.deadline: float | None = None

    def readinto(self, buffer) -> int | None:
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the client took too long to send its request")
            self._socket.settimeout(min(self.per_read, left))
        return super().readinto(buffer)


class Connection(BaseHTTPRequestHandler):
    """Parses each request of one client connection and hands it to the run's router. Every request on it
    belongs to ``run``; ``token_required`` (a listener on the host's loopback): proxy requests must carry
    the run's token too."""

    protocol_version = "HTTP/1.1"
    server_version = "rexmle-gateway"
    sys_version = ""

    def __init__(self, sock: socket.socket, address, run: GatewayRun, token_required: bool) -> None:
        self.run, self.token_required = run, token_required
        # typeshed declares timeout a ClassVar; StreamRequestHandler reads it per instance
        self.timeout = run.gateway.limits.client_timeout  # type: ignore[misc]
        self.headers_sent = False
        self._chunked = False
        self._held = 0  # bytes of request body this connection holds against the run's memory cap
        # no socketserver server: the gateway's own accept loop serves each connection
        super().__init__(sock, address, None)  # type: ignore[arg-type]

    def setup(self) -> None:
        super().setup()
        if self.connection.family in (socket.AF_INET, socket.AF_INET6):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rfile.close()  # the plain reader made by StreamRequestHandler: replaced by a bounded one
        self._reader = _DeadlineReader(self.connection, self.run.gateway.limits.client_timeout)
        self.rfile = io.BufferedReader(self._reader, 64 * 1024)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the run's record replaces stderr logging
        return

    def handle_one_request(self) -> None:
        from .router import dispatch  # gateway.router imports this module at its top

        self.headers_sent = False
        self._chunked = False
        self.command, self.request_version = None, "HTTP/1.1"  # type: ignore[assignment]  # as the stdlib resets it
        self._reader.deadline = time.monotonic() + self.run.gateway.limits.request_timeout
        try:
            if not self.read_head():
                self.close_connection = True
                return
            dispatch(self)
            self.wfile.flush()
        except BadRequest as exc:
            self.run.note_bad_request(self, exc.status, str(exc))
            if not self.headers_sent:
                self.send_error(exc.status, str(exc))
            self.close_connection = True
        except (TimeoutError, ConnectionError, OSError):
            self.close_connection = True
        except Exception as exc:  # a gateway bug: one clear 500, the session goes on
            self.run.note_error("internal", f"{type(exc).__name__}: {exc}")
            if not self.headers_sent:
                with suppress(OSError):
                    self.send_error(500, f"rexmle gateway internal error: {type(exc).__name__}")
            self.close_connection = True
        finally:
            self.run.release_body(self._held)
            self._held = 0

    def read_head(self) -> bool:
        """The request line and header fields by the strict rules of :mod:`.http11` (BadRequest otherwise);
        False when the client closed before a request. Replaces BaseHTTPRequestHandler.parse_request."""
        limits = self.run.gateway.limits
        head = read_request_line(self.rfile, limits.max_header_bytes)
        if head is None:
            return False
        self.command, self.path, self.request_version = head.method, head.target, head.version
        self.requestline = f"{head.method} {head.target} {head.version}"
        if self.path.startswith("//"):  # as the standard library does: never an authority by accident
            self.path = "/" + self.path.lstrip("/")
        read_fields(self.rfile, head, limits.max_header_bytes - len(self.requestline) - 2, limits.max_header_fields)
        check_semantics(head)
        self.headers = head.headers
        connection = (self.headers.get("connection") or "").strip().lower()
        self.close_connection = connection == "close" or (head.version == "HTTP/1.0" and connection != "keep-alive")
        expect = (self.headers.get("expect") or "").strip().lower()
        if expect == "100-continue" and head.version == "HTTP/1.1":
            return self.handle_expect_100()
        return True

    def handle_expect_100(self) -> bool:
        """``Expect: 100-continue`` with a body over the cap: 413 at once, so the client never sends it."""
        length = (self.headers.get("content-length") or "").strip()
        limit = self.run.gateway.limits.max_body
        if _DIGITS.fullmatch(length) and int(length) > limit:
            self.run.note_bad_request(self, 413, "body over the cap (Expect: 100-continue)")
            self.send_error(413, f"request body of {length} bytes exceeds the gateway's limit of {limit} bytes")
            return False
        return super().handle_expect_100()

    # --- requests --------------------------------------------------------------------------------------

    def framing(self) -> int | None:
        """The body's length (0 without Content-Length), or None when it is chunked. Ambiguous framing
        (both headers, differing lengths: the stuff of request smuggling) is refused before anything else."""
        lengths = self.headers.get_all("content-length") or []
        encoding = (self.headers.get("transfer-encoding") or "").strip().lower()
        if encoding and lengths:
            raise BadRequest(400, "both Transfer-Encoding and Content-Length given")
        if encoding:
            if encoding != "chunked":
                raise BadRequest(501, f"transfer encoding {encoding[:60]!r} is not supported")
            return None
        if not lengths:
            return 0
        if len(set(lengths)) != 1 or not _DIGITS.fullmatch(lengths[0]):
            raise BadRequest(400, f"invalid Content-Length {[v[:30] for v in lengths[:4]]!r}")
        return int(lengths[0])

    def hold(self, size: int) -> None:
        """Count ``size`` more body bytes against the run's cap on request bodies held at once (503 past it:
        the harness's memory stays bounded however many connections the agent opens)."""
        if not self.run.hold_body(size):
            cap = self.run.gateway.limits.max_held_body
            self.run.note_error("body_memory", f"request bodies held at once would exceed {cap} bytes")
            raise BadRequest(503, f"rexmle gateway: this run's connections already hold close to {cap} bytes of "
                                  "request bodies at once; retry when the other requests have finished")
        self._held += size

    def read_body(self, limit: int) -> bytes:
        """The request body (Content-Length or chunked), at most ``limit`` bytes; BadRequest otherwise."""
        length = self.framing()
        if length is None:
            return self._read_chunked(limit)
        if length > limit:
            raise BadRequest(413, f"request body of {length} bytes exceeds the gateway's limit of {limit} bytes")
        self.hold(length)
        body = self.rfile.read(length)
        if len(body) != length:
            raise BadRequest(400, "request body ended early")
        return body

    def _read_chunked(self, limit: int) -> bytes:
        """A chunked body into one buffer: chunk count, size lines and total bytes are all bounded, so many
        tiny chunks cost their bytes and nothing per chunk."""
        limits = self.run.gateway.limits
        body = bytearray()
        chunks = 0
        while True:
            line = self.rfile.readline(_CHUNK_LINE + 1)
            match = _CHUNK_SIZE.fullmatch(line)
            if match is None:
                raise BadRequest(400, "malformed chunk size line")
            n = int(match[1], 16)
            if n == 0:
                break
            chunks += 1
            if chunks > limits.max_chunks:
                raise BadRequest(413, f"chunked body of more than {limits.max_chunks} chunks")
            if len(body) + n > limit:
                raise BadRequest(413, f"request body exceeds the gateway's limit of {limit} bytes")
            self.hold(n)
            data = self.rfile.read(n)
            if len(data) != n or self.rfile.read(2) != b"\r\n":
                raise BadRequest(400, "malformed chunked body")
            body += data
        skip_trailers(self.rfile, limits.max_header_bytes, limits.max_header_fields)
        return bytes(body)

    # --- responses -------------------------------------------------------------------------------------

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Errors before a request is understood: an OpenAI-shaped JSON body (the most common client)."""
        self.close_connection = True
        self.respond(code, error_body(OPENAI, code, message or "bad request"), close=True)

    def respond(self, status: int, body: bytes, content_type: str = "application/json",
                headers: Sequence[tuple[str, str]] = (), close: bool = False) -> None:
        """A whole response with its length."""
        extra = list(headers) + ([("Connection", "close")] if close else [])
        self.begin(status, None, [("Content-Type", content_type), *extra], len(body))
        self.wfile.write(body)
        if close:
            self.close_connection = True

    def begin(self, status: int, reason: str | None, headers: list[tuple[str, str]], length: int | None) -> None:
        """Status line and headers; without a length the body is chunked (or ends with the connection)."""
        lines = [f"{self.protocol_version} {status} {reason or self.responses.get(status, ('',))[0]}"]
        lines += [f"{k}: {v}" for k, v in headers]
        if length is not None:
            lines.append(f"Content-Length: {length}")
        elif self.request_version == "HTTP/1.1":
            lines.append("Transfer-Encoding: chunked")
            self._chunked = True
        else:
            self.close_connection = True
        self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace"))
        self.headers_sent = True

    def begin_relayed(self, resp: http.client.HTTPResponse, headers: list[tuple[str, str]]) -> None:
        """:meth:`begin` for an upstream's answer, framed as upstream framed it (an answer to HEAD never chunked)."""
        length = resp.getheader("content-length")
        chunked = "chunked" in (resp.getheader("transfer-encoding") or "").lower()
        fixed = int(length) if length and length.isdigit() and not chunked else None
        self.begin(resp.status, resp.reason, headers, fixed if self.command != "HEAD" else (fixed or 0))

    def send_part(self, data: bytes) -> None:
        if not data:
            return
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if self._chunked else data)

    def end(self) -> None:
        if self._chunked:
            self.wfile.write(b"0\r\n\r\n")
            self._chunked = False
