"""The gateway reaches the model APIs through the site's HTTP proxy (compute nodes without a route out):
``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY`` of the harness, or ``--rexmle-upstream-proxy``. A loopback proxy
written here sits in front of the stand-in provider; every protocol goes through it, streams included:
CONNECT tunnels for https upstreams (TLS verified end to end, the key never readable by the proxy),
absolute-form requests for http ones."""

from __future__ import annotations

import json
import select
import socket
import ssl
import subprocess
import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest

from pytest_rexmle.gateway import Gateway, Limits

from .conftest import REAL_KEYS, TASK_HOSTS, open_served
from .standin import StandIn, _handler, _QuietServer


@dataclass
class LoopbackProxy:
    """A tiny HTTP proxy: CONNECT opens a tunnel, an absolute-form request is passed to its origin; each
    connection's first request line and headers are recorded, and every byte it relayed."""

    port: int = 0
    first_lines: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    relayed: bytearray = field(default_factory=bytearray)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def serve(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(client,), daemon=True).start()

    def _connection(self, client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = client.recv(65536)
            if not chunk:
                return client.close()
            head += chunk
        head, _, rest = head.partition(b"\r\n\r\n")
        line, *header_lines = head.decode("latin-1").split("\r\n")
        self.first_lines.append(line)
        self.headers.append({k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)})
        method, target, _ = line.split(" ", 2)
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            upstream = socket.create_connection((host, int(port)))
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if rest:
                upstream.sendall(rest)
        else:
            parts = urlsplit(target)
            upstream = socket.create_connection((parts.hostname, parts.port or 80))
            upstream.sendall(head + b"\r\n\r\n" + rest)  # absolute form kept: HTTP/1.1 origins accept it
            self.relayed += head + rest
        self._pipe(client, upstream)

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        try:
            while True:
                ready, _, _ = select.select(list(peers), [], [], 30)
                if not ready:
                    return
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    self.relayed += data
                    peers[sock].sendall(data)
        except OSError:
            return
        finally:
            a.close()
            b.close()


@pytest.fixture
def proxy():
    listener = socket.create_server(("127.0.0.1", 0))
    state = LoopbackProxy(listener.getsockname()[1])
    threading.Thread(target=state.serve, args=(listener,), daemon=True).start()
    yield state
    listener.close()


@pytest.fixture
def tls_standin(tmp_path, monkeypatch):
    """The stand-in behind TLS for ``localhost``, with its certificate as the trusted CA of this process."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
                   check=True, capture_output=True)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    state = StandIn("")
    server = _QuietServer(("127.0.0.1", 0), _handler(state))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    state.url = f"https://localhost:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield state
    server.shutdown()
    server.server_close()


def gateway_for(url: str, settings=None, **proxy_env: str) -> Gateway:
    environ = {"OPENAI_BASE_URL": url + "/v1", "ANTHROPIC_BASE_URL": url, "GEMINI_BASE_URL": url, **REAL_KEYS,
               **proxy_env}
    limits = Limits(client_timeout=5.0, connect_timeout=2.0, upstream_timeout=5.0, validate_timeout=60.0,
                    max_body=1024 * 1024)
    return Gateway(settings, environ=environ, limits=limits, task_hosts=TASK_HOSTS)


#: one call per protocol, plain and streamed: (gateway path, body, what the stand-in must have seen)
CALLS = [
    ("/openai/v1/chat/completions", {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]},
     "/v1/chat/completions"),
    ("/openai/v1/chat/completions", {"model": "gpt-4o-mini", "stream": True,
                                     "messages": [{"role": "user", "content": "hi"}]}, "/v1/chat/completions"),
    ("/openai/v1/responses", {"model": "gpt-4o-mini", "input": "hi", "stream": True}, "/v1/responses"),
    ("/anthropic/v1/messages", {"model": "claude-sonnet-4-5", "max_tokens": 8,
                                "messages": [{"role": "user", "content": "hi"}]}, "/v1/messages"),
    ("/anthropic/v1/messages", {"model": "claude-sonnet-4-5", "max_tokens": 8, "stream": True,
                                "messages": [{"role": "user", "content": "hi"}]}, "/v1/messages"),
    ("/gemini/v1beta/models/gemini-2.5-flash:generateContent", {"contents": [{"parts": [{"text": "hi"}]}]},
     "/v1beta/models/gemini-2.5-flash:generateContent"),
    ("/gemini/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", {"contents": [{"parts": [{"text": "hi"}]}]},
     "/v1beta/models/gemini-2.5-flash:streamGenerateContent"),
]


def every_protocol(gateway: Gateway, tmp_path, standin) -> None:
    served = open_served(gateway, tmp_path)
    try:
        for path, body, upstream_path in CALLS:
            status, headers, data = served.request("POST", path, body)
            assert status == 200, (path, data[:300])
            assert urlsplit(standin.last().path).path == upstream_path
            if body.get("stream") or "alt=sse" in path:
                assert headers["content-type"].startswith("text/event-stream") and b"data: " in data, data[:200]
    finally:
        served.run.close()
    assert len(standin.seen) == len(CALLS)
    assert standin.seen[0].headers["authorization"] == f"Bearer {REAL_KEYS['OPENAI_API_KEY']}"
    assert standin.seen[3].headers["x-api-key"] == REAL_KEYS["ANTHROPIC_API_KEY"]


def test_https_upstreams_go_through_a_connect_tunnel(proxy, tls_standin, tmp_path):
    gateway = gateway_for(tls_standin.url, HTTPS_PROXY=proxy.url)
    try:
        assert "via proxy 127.0.0.1" in gateway.upstreams["anthropic"].display
        every_protocol(gateway, tmp_path, tls_standin)
    finally:
        gateway.close()
    port = tls_standin.url.rpartition(":")[2]
    assert proxy.first_lines and {line.rpartition(" ")[0] for line in proxy.first_lines} == {f"CONNECT localhost:{port}"}
    for key in REAL_KEYS.values():  # end-to-end TLS: the proxy relayed ciphertext only
        assert key.encode() not in proxy.relayed


def test_http_upstreams_use_absolute_form_through_the_proxy(proxy, standin, tmp_path):
    gateway = gateway_for(standin.url, HTTP_PROXY=proxy.url, HTTPS_PROXY="http://127.0.0.1:9")
    try:
        every_protocol(gateway, tmp_path, standin)
    finally:
        gateway.close()
    assert proxy.first_lines and all(line.startswith(("POST http://127.0.0.1:", "GET http://127.0.0.1:"))
                                     for line in proxy.first_lines), proxy.first_lines
    relayed = proxy.relayed.decode("latin-1")
    assert f"POST {standin.url}/v1/chat/completions HTTP/1.1" in relayed
    assert f"POST {standin.url}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse HTTP/1.1" in relayed


def test_no_proxy_exempts_its_hosts(proxy, standin, tmp_path):
    control = gateway_for(standin.url, HTTP_PROXY=proxy.url, NO_PROXY="example.org,.internal")
    assert control.upstreams["openai"].proxy.port == proxy.port  # not exempt: through the proxy
    control.close()
    gateway = gateway_for(standin.url, HTTP_PROXY=proxy.url, NO_PROXY="localhost,127.0.0.1")
    assert gateway.upstreams["openai"].proxy is None
    try:
        every_protocol(gateway, tmp_path, standin)
    finally:
        gateway.close()
    assert proxy.first_lines == []


def test_the_option_overrides_the_variables_and_sends_its_credentials(proxy, tls_standin, tmp_path):
    settings = SimpleNamespace(upstream_proxy=f"http://lab:s3cret@127.0.0.1:{proxy.port}")
    gateway = gateway_for(tls_standin.url, settings, HTTPS_PROXY="http://127.0.0.1:9")
    try:
        every_protocol(gateway, tmp_path, tls_standin)
        assert "Basic bGFiOnMzY3JldA==" in gateway.secrets  # redacted like a key wherever it could show
    finally:
        gateway.close()
    assert {h.get("proxy-authorization") for h in proxy.headers} == {"Basic bGFiOnMzY3JldA=="}


def test_an_unusable_proxy_breaks_only_the_upstreams_it_serves(standin):
    gateway = gateway_for(standin.url, HTTPS_PROXY="https://proxy.example:3128")
    try:
        assert set(gateway.upstreams) == {"openai", "anthropic", "gemini"}  # http upstreams: HTTPS_PROXY not used
    finally:
        gateway.close()
    broken = Gateway(None, environ={"HTTPS_PROXY": "https://proxy.example:3128"}, task_hosts=TASK_HOSTS)
    try:
        assert set(broken.upstream_errors) == {"openai", "anthropic", "gemini"}
        assert "expected http://[user:password@]host:port" in json.dumps(broken.upstream_errors)
    finally:
        broken.close()


def test_the_option_is_checked_at_session_start(pytester):
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--agent=sample",
                                           "--rexmle-upstream-proxy=ftp://proxy:21")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--rexmle-upstream-proxy*expected http://*"])
