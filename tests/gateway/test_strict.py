"""Issue 32: what the gateway cannot read exactly, it refuses; what an agent sends is bounded per connection
and per run; the egress log keeps a trace however hard it is flooded.

Every test here sends the attack through a real gateway run on loopback with raw sockets, and a loopback
site stands in for the host a trick would reach: "never contacted" is the site's own count of requests.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pytest_rexmle.gateway import Limits
from pytest_rexmle.gateway.egress import OTHER_HOSTS, Decision, EgressPolicy, internal_address, resolve
from pytest_rexmle.gateway.hostname import InvalidHost, normal_host, split_authority

from .conftest import calls, make_gateway, open_served

CHAT = json.dumps({"model": "gpt-4o-mini", "messages": []}).encode()


class _Site(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        return

    def do_GET(self) -> None:
        type(self).hits.append(self.path)
        body = b"site says " + self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _start_site(family: int = socket.AF_INET, host: str = "127.0.0.1"):
    handler = type("Site", (_Site,), {"hits": []})
    server_class = type("Server", (ThreadingHTTPServer,), {"address_family": family})
    server = server_class((host, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, handler


@pytest.fixture
def site():
    """A loopback HTTP server standing in for a host the agent must not reach; counts every request."""
    server, handler = _start_site()
    yield server.server_address[1], handler
    server.shutdown()
    server.server_close()


def _exchange(served, data: bytes, timeout: float = 10.0) -> bytes:
    """Send raw bytes, then read everything the gateway answers until it closes (or falls silent)."""
    sock = socket.create_connection((served.host, served.port), timeout=timeout)
    try:
        sock.sendall(data)
        got = b""
        while part := sock.recv(65536):
            got += part
            if b"200 Connection Established" in got:  # a tunnel: say something through it and stop
                sock.sendall(b"GET /through HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    except (TimeoutError, ConnectionError):
        pass
    finally:
        sock.close()
    return got


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


# --- item 1: strict parsing of the CONNECT authority and the absolute URI ----------------------------------

@pytest.mark.parametrize("char", ["\x00", "\x01", "\x1f", "\x7f"])
def test_control_character_in_connect_authority_is_400_and_nothing_is_contacted(gateway, tmp_path, site, char):
    """The issue's critical attack: ``CONNECT zenodo.org\\0.pypi.org:443`` was checked as a pypi.org
    subdomain and resolved as zenodo.org. Here the allowed name is an explicit entry and the name before
    the NUL is ``localhost``, where the stand-in site listens."""
    port, handler = site
    s = open_served(gateway, tmp_path, egress_allow=[f"lab-mirror.example:{port}"])
    target = f"localhost{char}.lab-mirror.example:{port}".encode("latin-1")
    answer = _exchange(s, b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target))
    assert _status(answer) == 400 and b"control character" in answer, answer[:300]
    assert handler.hits == []
    record = s.run.close()
    assert not any(e["allowed"] for e in record["egress"]), record["egress"]
    assert calls(s)[-1]["status"] == 400


@pytest.mark.parametrize("char", ["\x00", "\x01", "\x7f"])
def test_control_character_in_absolute_uri_is_400_and_nothing_is_contacted(gateway, tmp_path, site, char):
    port, handler = site
    s = open_served(gateway, tmp_path, egress_allow=[f"lab-mirror.example:{port}"])
    url = f"http://localhost{char}.lab-mirror.example:{port}/labels.csv".encode("latin-1")
    answer = _exchange(s, b"GET %s HTTP/1.1\r\nHost: lab-mirror.example\r\nConnection: close\r\n\r\n" % url)
    assert _status(answer) == 400, answer[:300]
    assert handler.hits == []
    s.run.close()


@pytest.mark.parametrize("url", [
    "http://lab-mirror.example@127.0.0.1:{port}/x",   # user information
    "http://127.0.0.1:{port}\\@lab-mirror.example/x",  # a backslash before the @
    "http://127.1:{port}/x",
    "http://LAB-MIRROR.example.:{port}/x#frag",
])
def test_absolute_uri_must_name_one_host_exactly(gateway, tmp_path, site, url):
    port, handler = site
    s = open_served(gateway, tmp_path, egress_allow=["lab-mirror.example", f"127.0.0.1:{port}"])
    answer = _exchange(s, b"GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % url.format(port=port).encode())
    assert _status(answer) == 400, (url, answer[:300])
    assert handler.hits == []
    s.run.close()


def test_mapped_address_is_not_the_address_it_carries(gateway, tmp_path, site):
    """``[::ffff:127.0.0.1]`` is a valid literal, but not the entry ``127.0.0.1``: refused, never contacted."""
    port, handler = site
    s = open_served(gateway, tmp_path, egress_allow=[f"127.0.0.1:{port}"])
    answer = _exchange(s, b"CONNECT [::ffff:127.0.0.1]:%d HTTP/1.1\r\nHost: x\r\n\r\n" % port)
    assert _status(answer) == 403 and b"not on the allow-list" in answer, answer[:300]
    assert handler.hits == []
    assert [(e["host"], e["allowed"]) for e in s.run.close()["egress"]] == [("::ffff:7f00:1", False)]


def test_connect_with_a_body_is_400(gateway, tmp_path, site):
    port, handler = site
    s = open_served(gateway, tmp_path, egress_allow=[f"127.0.0.1:{port}"])
    answer = _exchange(s, b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" % port)
    assert _status(answer) == 400 and handler.hits == []
    s.run.close()


@pytest.mark.parametrize("authority", [
    "127.1:{port}",              # inet_aton reads it as 127.0.0.1
    "2130706433:{port}",         # so is a bare number
    "0x7f000001:{port}",         # and a hexadecimal one
    "lab_mirror.example:{port}",  # not an RFC 1123 label
    "lab-mirror..example:{port}",
    "-lab.example:{port}",
    "user@127.0.0.1:{port}",
    "[fe80::1%lo]:{port}",
    "::1:{port}",                # an IPv6 literal must be bracketed
    "127.0.0.1:0{port}9999",     # not a port
])
def test_connect_authority_must_be_a_host_name_or_ip_literal(gateway, tmp_path, site, authority):
    port, handler = site
    s = open_served(gateway, tmp_path, egress_allow=[f"127.0.0.1:{port}", "lab-mirror.example"])
    target = authority.format(port=port).encode()
    answer = _exchange(s, b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target))
    assert _status(answer) == 400, (authority, answer[:300])
    assert handler.hits == []
    s.run.close()


def test_host_names_are_compared_in_one_spelling():
    assert normal_host("PyPI.ORG.") == "pypi.org"
    assert normal_host("Bücher.Example") == "xn--bcher-kva.example"
    assert normal_host("[0:0:0:0:0:0:0:1]") == "::1" and normal_host("::FFFF:7F00:1") == "::ffff:7f00:1"
    assert split_authority("[::1]:8080") == ("::1", 8080) and split_authority("A.b", 80) == ("a.b", 80)
    for bad in ("zenodo.org\x00.pypi.org", "a b", "a..b", "", ".", "x" * 64 + ".org", "010.0.0.1", "1.2.3.4.5"):
        with pytest.raises(InvalidHost):
            normal_host(bad)
    # list entries are spelled the same way: an international entry matches the A-label the client sends
    policy = EgressPolicy(allow=["Bücher.Example.", "PYPI-Mirror.Lab:3141"], deny=["Mirror.Zenodo.ORG."], task_hosts=())
    assert policy.decide("xn--bcher-kva.example", 443, None, tunnel=True).allowed
    assert policy.decide("pypi-mirror.lab", 3141, None, tunnel=True).allowed
    assert not policy.decide("mirror.zenodo.org", 443, None, tunnel=True).allowed


def test_ipv6_literal_is_compared_after_normalisation(gateway, tmp_path):
    server, handler = _start_site(socket.AF_INET6, "::1")
    try:
        port = server.server_address[1]
        s = open_served(gateway, tmp_path, egress_allow=[f"[::1]:{port}"])
        answer = _exchange(s, b"CONNECT [0:0:0:0:0:0:0:1]:%d HTTP/1.1\r\nHost: x\r\n\r\n" % port)
        assert _status(answer) == 200 and b"site says /through" in answer, answer[:300]
        (entry,) = s.run.close()["egress"]
        assert entry["host"] == "::1" and entry["allowed"] is True and handler.hits == ["/through"]
    finally:
        server.shutdown()
        server.server_close()


# --- item 1: strict parsing of the request head ----------------------------------------------------------

def _chat_request(served, *, head: bytes = b"", version: bytes = b"HTTP/1.1", eol: bytes = b"\r\n",
                  framing: bytes | None = None, body: bytes = CHAT) -> bytes:
    lines = [b"POST /openai/v1/chat/completions " + version, b"Host: gw",
             b"Authorization: Bearer " + served.run.token.encode(), b"Content-Type: application/json",
             framing if framing is not None else b"Content-Length: %d" % len(body), b"Connection: close"]
    return eol.join(lines) + eol + head + eol + body


@pytest.mark.parametrize("head,why", [
    (b"X-Folded: a\r\n continued\r\n", b"obsolete line folding"),
    (b"X-Space : a\r\n", b"white space between a header name"),
    (b"X(Bad): a\r\n", b"invalid header name"),
    (b"X-Nul: a\x00b\r\n", b"control character"),
    (b"X-Esc: a\x1bb\r\n", b"control character"),
    (b"X-Cr: a\rb\r\n", b"control character"),
    (b"Host: other\r\n", b"more than one Host"),
])
def test_malformed_header_lines_are_400(served, standin, head, why):
    answer = _exchange(served, _chat_request(served, head=head))
    assert _status(answer) == 400 and why in answer, answer[:300]
    assert standin.seen == []


def test_framing_ambiguities_are_400(served, standin):
    cases = [
        _chat_request(served, eol=b"\n"),  # bare LF line ends
        _chat_request(served, version=b"HTTP/1.0", framing=b"Transfer-Encoding: chunked",
                      body=b"%x\r\n%s\r\n0\r\n\r\n" % (len(CHAT), CHAT)),
        _chat_request(served, framing=b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
                      body=b"%x\r\n%s\r\n0\r\n\r\n" % (len(CHAT), CHAT)),
        _chat_request(served, framing="Content-Length: \u00b2".encode("latin-1"), body=b"ab"),
        _chat_request(served, framing=b"Transfer-Encoding: chunked", body=b"%x\n%s\r\n0\r\n\r\n" % (len(CHAT), CHAT)),
        _chat_request(served, framing=b"Transfer-Encoding: chunked", body=b"%x\r\n%sXY0\r\n\r\n" % (len(CHAT), CHAT)),
    ]
    for raw in cases:
        answer = _exchange(served, raw)
        assert _status(answer) == 400, (raw[:200], answer[:300])
    assert standin.seen == []
    assert _status(_exchange(served, _chat_request(served))) == 200  # the strict reader still reads a good one


# --- item 2: the internal-address check covers every range and every destination ---------------------------

def test_internal_ranges_are_complete():
    internal = ("::7f00:1", "::a00:1", "64:ff9b::7f00:1", "64:ff9b::808:808", "64:ff9b:1::1", "198.18.0.1",
                "198.19.255.254", "240.0.0.1", "255.255.255.255", "192.0.0.170", "fec0::1", "100::1", "ff02::1",
                "2002:7f00:1::1",                            # 6to4 carrying 127.0.0.1
                "2001:0:4136:e378:8000:63bf:f5ff:fffe",      # Teredo carrying 10.0.0.1
                "::ffff:169.254.169.254", "::ffff:0:a00:1", "169.254.169.254", "fe80::1%eth0")
    for address in internal:
        assert internal_address(address), address
    for address in ("151.101.0.223", "2a04:4e42::223", "203.0.113.80", "8.8.8.8", "2002:808:808::1", "198.20.0.1"):
        assert not internal_address(address), address


@pytest.mark.parametrize("address", ["::7f00:1", "64:ff9b::7f00:1", "198.18.0.1"])
def test_default_allowed_destination_never_reaches_an_internal_address(address):
    with pytest.raises(PermissionError, match="host-internal"):
        resolve(address, 443, Decision(True, "allow-list: pypi.org"))


def _loopback_name() -> str | None:
    """A name other than ``localhost`` that this machine's /etc/hosts maps to a loopback address."""
    try:
        lines = open("/etc/hosts").read().splitlines()
    except OSError:
        return None
    for line in lines:
        address, *names = line.split("#", 1)[0].split() or [""]
        if address.startswith("127."):
            for name in names:
                if name != "localhost" and "." not in name.rstrip("."):
                    return name
    return None


def test_explicit_name_entry_resolving_internal_is_refused_with_the_way_to_allow_it(gateway, tmp_path, site):
    port, handler = site
    name = _loopback_name()
    if name is None:
        pytest.skip("no name besides localhost maps to a loopback address in /etc/hosts")
    s = open_served(gateway, tmp_path, egress_allow=[f"{name}:{port}"])
    answer = _exchange(s, b"CONNECT %s:%d HTTP/1.1\r\nHost: x\r\n\r\n" % (name.upper().encode(), port))
    assert _status(answer) == 403, answer[:300]
    assert b"host-internal address (127." in answer and b"--rexmle-egress-allow 127." in answer
    assert handler.hits == []
    (entry,) = s.run.close()["egress"]
    assert entry["host"] == name.lower() and entry["allowed"] is False


def test_explicit_address_entries_reach_exactly_that_address(gateway, tmp_path, site):
    port, handler = site
    # an IP literal entry reaches its address, and only by that spelling
    s = open_served(gateway, tmp_path, "literal", egress_allow=[f"127.0.0.1:{port}"])
    assert b"site says /through" in _exchange(s, b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: x\r\n\r\n" % port)
    assert _status(_exchange(s, b"CONNECT localhost:%d HTTP/1.1\r\nHost: x\r\n\r\n" % port)) == 403
    s.run.close()
    # ``localhost.`` (any case, trailing dot) names the loopback addresses themselves
    s = open_served(gateway, tmp_path, "localhost", egress_allow=[f"LocalHost.:{port}"])
    assert b"site says /through" in _exchange(s, b"CONNECT localhost.:%d HTTP/1.1\r\nHost: x\r\n\r\n" % port)
    egress = s.run.close()["egress"]
    assert [(e["host"], e["allowed"]) for e in egress] == [("localhost", True)]
    assert handler.hits == ["/through", "/through"]


# --- item 3: bounded by construction -------------------------------------------------------------------

def test_limits_come_from_the_environment():
    limits = Limits.from_env({"REXMLE_GATEWAY_MAX_HELD_BODY": "1000", "REXMLE_GATEWAY_MAX_CHUNKS": "7",
                              "REXMLE_GATEWAY_MAX_HEADER_BYTES": "4096", "REXMLE_GATEWAY_MAX_CONNECTIONS": "3"})
    assert (limits.max_held_body, limits.max_chunks, limits.max_header_bytes, limits.max_connections) == (
        1000, 7, 4096, 3)
    defaults = Limits()
    assert defaults.max_held_body <= 64 * 1024 * 1024 and defaults.max_header_bytes <= 64 * 1024


def test_tiny_chunks_hold_no_memory_per_chunk_and_get_a_413(served, standin):
    """2-byte chunks held ~28 bytes of Python object each: a 32 MiB body of them ~900 MiB of harness memory.
    The body is now one buffer and its chunk count is capped: the gateway answers 413 while what it holds
    stays near the bytes received."""
    head = (b"POST /openai/v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" % served.run.token.encode())
    chunks = 200_000  # 400 kB of body, under the test gateway's 1 MiB cap
    sock = socket.create_connection((served.host, served.port), timeout=20)
    answer = b""
    tracemalloc.start()
    try:
        sock.sendall(head)
        block = b"2\r\nab\r\n" * 10_000
        for _ in range(chunks // 10_000):
            try:
                sock.sendall(block)
            except (BrokenPipeError, ConnectionResetError):
                break
        sock.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    try:
        while part := sock.recv(65536):
            answer += part
    except (TimeoutError, ConnectionError):
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        sock.close()
    assert peak < 3 * 1024 * 1024, f"the gateway held {peak} bytes for a 400 kB body"
    assert _status(answer) == 413 and b"chunks" in answer, answer[:300]
    assert standin.seen == []


def test_header_flood_is_431(served, standin):
    fields = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"a" * 8000) for i in range(90))  # 720 kB, 90 fields
    answer = _exchange(served, _chat_request(served, head=fields))
    assert _status(answer) == 431, answer[:300]
    assert standin.seen == []
    many = b"".join(b"X-F%d: a\r\n" % i for i in range(150))
    assert _status(_exchange(served, _chat_request(served, head=many))) == 431


def test_request_bodies_held_at_once_are_capped_per_run(standin, tmp_path):
    """Bodies held by all of a run's connections together stay under Limits.max_held_body: past it a 503
    with the reason, recorded; the cap frees as requests finish."""
    gw = make_gateway(standin, max_body=2 * 1024 * 1024, max_held_body=3 * 1024 * 1024)
    s = open_served(gw, tmp_path)
    body = b'{"model": "gpt-4o-mini", "messages": [], "pad": "' + b"x" * (2 * 1024 * 1024 - 60) + b'"}'
    first = socket.create_connection((s.host, s.port), timeout=10)
    whole, half = _chat_request(s, body=body), len(body) // 2
    first.sendall(whole[:-half])  # the head and half the body, then wait
    time.sleep(0.3)
    second = socket.create_connection((s.host, s.port), timeout=5)
    second.sendall(_chat_request(s, body=body)[:-len(body)])  # only the head: it asks for 2 MiB more
    answer = b""
    try:
        while part := second.recv(65536):
            answer += part
    except TimeoutError:
        pass
    second.close()
    assert _status(answer) == 503 and b"request bodies at once" in answer, answer[:300]
    first.sendall(whole[-half:])
    rest = b""
    while part := first.recv(65536):
        rest += part
    first.close()
    assert _status(rest) == 200, rest[:300]
    assert _status(_exchange(s, _chat_request(s, body=body))) == 200  # freed: the next one fits again
    record = s.run.close()
    assert record["errors"].get("body_memory") == 1
    assert [c["status"] for c in calls(s) if c["status"] == 503] == [503]
    assert s.run._held_body == 0
    gw.close()


def test_connections_per_run_follow_the_limit(standin, tmp_path):
    gw = make_gateway(standin, max_connections=3)
    s = open_served(gw, tmp_path)
    idle = [socket.create_connection((s.host, s.port), timeout=5) for _ in range(3)]
    time.sleep(0.3)
    answer = _exchange(s, _chat_request(s))
    assert _status(answer) == 503 and b"too many connections" in answer, answer[:300]
    for sock in idle:
        sock.close()
    time.sleep(0.3)
    assert _status(_exchange(s, _chat_request(s))) == 200
    assert s.run.close()["errors"]["too_many_connections"] == 1
    gw.close()


# --- item 4: the egress log is never evicted ----------------------------------------------------------

def test_egress_flood_then_an_allowed_download_still_on_record(gateway, tmp_path, site):
    port, handler = site
    s = open_served(gateway, tmp_path, egress_allow=[f"127.0.0.1:{port}"])
    for i in range(1100):  # refused at once (not on the allow-list): no name is looked up
        sock = socket.create_connection((s.host, s.port), timeout=10)
        sock.sendall(b"CONNECT h%d.flood.example:443 HTTP/1.1\r\nHost: x\r\n\r\n" % i)
        assert sock.recv(100).startswith(b"HTTP/1.1 403")
        sock.close()
    assert b"site says /through" in _exchange(s, b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: x\r\n\r\n" % port)
    egress = s.run.close()["egress"]
    allowed = [e for e in egress if e["allowed"]]
    assert [(e["host"], e["port"], e["count"]) for e in allowed] == [("127.0.0.1", port, 1)]
    (other,) = [e for e in egress if e.get("flooded")]
    assert other["host"] == OTHER_HOSTS and other["allowed"] is False
    assert other["count"] == 100 and other["distinct_hosts"] == 100
    assert other["latest_hosts"][-1] == "h1099.flood.example:443"
    assert len([e for e in egress if not e["allowed"]]) == 1001  # 1000 listed and the aggregate


def test_egress_log_with_flooded_paths_stays_readable(tmp_path):
    """Long paths on many hosts must not grow run.json past what its readers accept (4 MiB): paths past the
    log's budget are counted, and the leak note still reads the log."""
    from pytest_rexmle.gateway.egress import MAX_HOSTS, EgressLog
    from pytest_rexmle.scoring.leaks import MAX_RUN_JSON, egress_note

    log = EgressLog()
    refused = Decision(False, "not on the allow-list")
    for i in range(MAX_HOSTS):
        for j in range(50):
            log.record(f"h{i}.example", 80, refused, f"/{j}/" + "p" * 480)
    log.record("pypi.org", 80, Decision(True, "allow-list: pypi.org"), "/simple/numpy/")
    egress = log.to_json()
    (tmp_path / "run.json").write_text(json.dumps({"egress": egress}))
    assert (tmp_path / "run.json").stat().st_size < MAX_RUN_JSON / 2
    assert sum(e.get("more_paths", 0) for e in egress) > 0 and sum(e["count"] for e in egress) == MAX_HOSTS * 50 + 1
    assert egress_note(tmp_path) == f"run.json egress: {MAX_HOSTS + 1} request(s), allowed hosts: pypi.org"
