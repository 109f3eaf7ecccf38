"""Every upstream answer reaches the agent without the keys: success bodies too, streamed or not, a key
split across two reads included, and headers."""

from __future__ import annotations

import json
import socket
import time

import pytest

from .conftest import REAL_KEYS, calls

OPENAI_KEY = REAL_KEYS["OPENAI_API_KEY"]


def mask(secret: bytes) -> bytes:
    """What a key becomes: ``[REDACTED]`` padded with ``*`` to its length (the answer keeps its size)."""
    return b"[REDACTED]" + b"*" * (len(secret) - 10)


def test_success_body_echoing_the_key_is_scrubbed(served, standin):
    status, headers, body = served.request("POST", "/openai/v1/chat/completions",
                                           {"model": "echo-headers", "messages": []})
    assert status == 200
    assert OPENAI_KEY.encode() not in body and OPENAI_KEY not in json.dumps(headers)
    doc = json.loads(body)  # still valid JSON, Content-Length still right
    assert doc["echo"]["authorization"] == "Bearer " + mask(OPENAI_KEY.encode()).decode()
    assert headers["x-echo-key"] == "Bearer [REDACTED]"
    served.run.close()
    assert OPENAI_KEY not in served.run.trajectory.path.read_text()


@pytest.mark.parametrize("path,doc,header", [
    ("/anthropic/v1/messages", {"model": "echo-headers", "max_tokens": 5, "messages": []}, "x-api-key"),
    ("/gemini/v1beta/models/echo-headers:generateContent", {"contents": []}, "x-goog-api-key"),
])
def test_other_protocols_success_bodies_scrubbed(served, standin, path, doc, header):
    status, _, body = served.request("POST", path, doc)
    assert status == 200
    for key in REAL_KEYS.values():
        assert key.encode() not in body
    assert json.loads(body)["echo"][header].startswith("[REDACTED]")


def test_key_split_across_two_stream_reads_is_scrubbed(served, standin):
    sock = socket.create_connection((served.host, served.port), timeout=10)
    body = json.dumps({"model": "echo-headers", "messages": [], "stream": True}).encode()
    sock.sendall(b"POST /openai/v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                 % (served.run.token.encode(), len(body), body))
    got, deadline = b"", time.monotonic() + 5
    while b"0\r\n\r\n" not in got and time.monotonic() < deadline:
        got += sock.recv(65536)
    sock.close()
    assert len(standin.seen) == 1
    stream = _dechunk(got.partition(b"\r\n\r\n")[2])
    assert OPENAI_KEY.encode() not in stream
    assert OPENAI_KEY[:10].encode() not in got and OPENAI_KEY[-10:].encode() not in got
    assert stream == b'data: {"echo": "Bearer ' + mask(OPENAI_KEY.encode()) + b'"}\n\ndata: [DONE]\n\n'
    served.run.close()
    (call,) = calls(served)
    assert call["response"][0] == {"echo": "Bearer " + mask(OPENAI_KEY.encode()).decode()}


def _dechunk(raw: bytes) -> bytes:
    """The body of a chunked answer."""
    out = b""
    while True:
        size, _, raw = raw.partition(b"\r\n")
        if int(size, 16) == 0:
            return out
        out, raw = out + raw[:int(size, 16)], raw[int(size, 16) + 2:]


def test_compressed_answer_refused_not_forwarded_unread(served, standin):
    status, _, body = served.request("POST", "/openai/v1/chat/completions", {"model": "gzip", "messages": []})
    assert status == 502 and "compressed" in json.loads(body)["error"]["message"]


SECRETS = ("sk-real-openai-0123456789abcdef", "rexmle-abcdefghijklmnopqrstuvwxyz0123456789")


@pytest.mark.parametrize("size", [1, 2, 3, 7, 31, 64])
def test_scrubber_catches_keys_at_every_split(size):
    from pytest_rexmle.gateway.scrub import Scrubber

    text = (b'{"a": "' + SECRETS[0].encode() + b'", "b": "sk-rea", "c": "' + SECRETS[1].encode() + b'sk-"}'
            + SECRETS[0].encode())
    expected = text.replace(SECRETS[0].encode(), mask(SECRETS[0].encode())).replace(
        SECRETS[1].encode(), mask(SECRETS[1].encode()))
    for offset in range(size):
        scrubber = Scrubber(SECRETS)
        pieces = [text[:offset]] + [text[i:i + size] for i in range(offset, len(text), size)]
        out = b"".join(scrubber.feed(p) for p in pieces) + scrubber.flush()
        assert out == expected and len(out) == len(text)
        assert scrubber.masked == 3


def test_scrubber_holds_back_only_a_possible_key_start():
    from pytest_rexmle.gateway.scrub import Scrubber

    scrubber = Scrubber(SECRETS)
    assert scrubber.feed(b'data: {"delta": "Hel"}\n\n') == b'data: {"delta": "Hel"}\n\n'  # streams are not delayed
    assert scrubber.feed(b"text sk-re") == b"text "
    assert scrubber.feed(b"ady") == b"sk-ready"
    assert scrubber.flush() == b""
    assert Scrubber(()).feed(b"anything") == b"anything"


@pytest.mark.parametrize("size", [4095, 4097, 9000])
def test_scrubber_on_large_reads(size):
    """Reads above the small-read fast path: a key straddling each read boundary is still masked."""
    from pytest_rexmle.gateway.scrub import Scrubber

    key = SECRETS[0].encode()
    text = b"".join(b"x" * (size - 7 + i) + key for i in range(4)) + b"sk-rea"
    scrubber = Scrubber(SECRETS)
    out = b"".join(scrubber.feed(text[i:i + size]) for i in range(0, len(text), size)) + scrubber.flush()
    assert out == text.replace(key, mask(key)) and scrubber.masked == 4
