"""A request head read by the strict rules of HTTP/1.1 (RFC 9110/9112), or refused.

Why not the standard library's parser: it accepts continuation lines, control characters, spaces before
the colon, any bytes in a header name and splits the request line on any white space, so the gateway and
the host it forwards to could read one request two ways. Here every byte of the head is either part of a
well-formed line or the request is a 400; sizes are bounded before anything is kept.
"""

from __future__ import annotations

import http.client
import io
import re
from dataclasses import dataclass
from typing import BinaryIO

#: what the parser reads from: the connection's buffered reader, or any binary file
Reader = BinaryIO | io.BufferedIOBase

#: ``method SP request-target SP HTTP-version CRLF``: a token, visible ASCII, a version of two digits
_REQUEST_LINE = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+) ([\x21-\x7e]+) HTTP/([0-9])\.([0-9])\r\n")
#: the bytes a field value may hold: visible ASCII, obs-text, and space or tab between them
_VALUE_BYTES = bytes([0x20, 0x09, *range(0x21, 0x7F), *range(0x80, 0x100)])
#: a field name: an RFC 9110 token
_NAME = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


class BadRequest(Exception):
    """A request the gateway cannot read: answered with ``status`` and the connection closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Head:
    """A request line and its header fields, as read (values decoded as ISO 8859-1)."""

    method: str
    target: str
    version: str
    headers: http.client.HTTPMessage


def read_request_line(rfile: Reader, limit: int) -> Head | None:
    """The request line, or None when the client closed (or sent a blank line) before one."""
    line = rfile.readline(limit + 1)
    if not line or line in (b"\r\n", b"\n"):
        return None
    if len(line) > limit:
        raise BadRequest(414, f"request line longer than {limit} bytes")
    match = _REQUEST_LINE.fullmatch(line)
    if match is None:
        raise BadRequest(400, _why_not_request_line(line))
    major, minor = int(match[3]), int(match[4])
    if major != 1 or minor > 1:
        raise BadRequest(505, f"HTTP version {major}.{minor} is not supported (HTTP/1.1 or 1.0)")
    return Head(match[1].decode("ascii"), match[2].decode("ascii"), f"HTTP/1.{minor}", http.client.HTTPMessage())


def _why_not_request_line(line: bytes) -> str:
    if not line.endswith(b"\r\n"):
        return "request line must end with CRLF" if line.endswith(b"\n") else "request line ended early"
    if any(b < 0x20 or b == 0x7F for b in line[:-2]):
        return "control character in the request line"
    if b" HTTP/" not in line:
        return "request line without an HTTP version (HTTP/0.9 is not supported)"
    return f"malformed request line {line[:100]!r}"


def read_fields(rfile: Reader, head: Head, budget: int, max_fields: int) -> int:
    """Header fields up to the blank line into ``head.headers``; ``budget`` bytes at most, all counted.
    Returns the bytes read."""
    used = 0
    count = 0
    while True:
        line = rfile.readline(max(budget - used, 0) + 1)  # never unbounded (readline of a negative size)
        used += len(line)
        if used > budget:
            raise BadRequest(431, f"request header section larger than {budget} bytes")
        if line == b"\r\n":
            return used
        if not line.endswith(b"\r\n"):
            raise BadRequest(400, "header line must end with CRLF" if line.endswith(b"\n")
                             else "request head ended early")
        count += 1
        if count > max_fields:
            raise BadRequest(431, f"more than {max_fields} header fields")
        name, value = _field(line[:-2])
        head.headers[name] = value


def _field(line: bytes) -> tuple[str, str]:
    """``field-name ":" OWS field-value OWS`` (no regular expression over the value: linear time)."""
    if line[:1] in (b" ", b"\t"):
        raise BadRequest(400, "obsolete line folding (a header line starting with white space)")
    name, colon, rest = line.partition(b":")
    if not colon:
        raise BadRequest(400, "header line without a colon")
    if name[-1:] in (b" ", b"\t"):
        raise BadRequest(400, "white space between a header name and its colon")
    if not _NAME.fullmatch(name):
        raise BadRequest(400, f"invalid header name {name[:60]!r}")
    value = rest.strip(b" \t")
    if value.translate(None, _VALUE_BYTES):
        raise BadRequest(400, "control character in a header value")
    return name.decode("ascii"), value.decode("latin-1")


def skip_trailers(rfile: Reader, budget: int, max_fields: int) -> None:
    """The trailer fields after a chunked body, by the same rules as the head; none is kept."""
    read_fields(rfile, Head("", "", "HTTP/1.1", http.client.HTTPMessage()), budget, max_fields)


def check_semantics(head: Head) -> None:
    """Headers whose repetition or combination could be read two ways."""
    hosts = head.headers.get_all("host") or []
    if len(hosts) > 1:
        raise BadRequest(400, "more than one Host header")
    encodings = head.headers.get_all("transfer-encoding") or []
    if len(encodings) > 1:
        raise BadRequest(400, "more than one Transfer-Encoding header")
    if encodings and head.version == "HTTP/1.0":
        raise BadRequest(400, "Transfer-Encoding in an HTTP/1.0 request")
