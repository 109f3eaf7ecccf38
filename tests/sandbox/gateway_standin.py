"""The gateway as the network tests need it, and the agent that hunts through the sandbox.

``gateway_factory()`` is the session's real gateway (``pytest_rexmle.gateway``) where it is installed;
otherwise a minimal stand-in speaking the same per-run interface (``open_run`` → ``token``,
``environment``, ``serve``, ``close``), so the *network plumbing* — the listener carried out of the
sandbox's namespace, the agent's variables — is tested either way. Tests of the gateway's own
behaviour (egress refusals, usage) ask for the real one with :func:`require_real_gateway`.

Host services the agent must not reach are made here too: a TCP token server on the host's
127.0.0.1 (a stand-in model provider or database), a pathname unix socket under ``/run`` (a stand-in
for munged's) and an abstract unix socket, each counting the connections it accepted.
"""

from __future__ import annotations

import http.server
import json
import os
import secrets
import socket
import tempfile
import threading
from pathlib import Path


def real_gateway_factory(settings=None):
    try:
        from pytest_rexmle.gateway import session_gateway
    except ImportError:
        return None
    return lambda: session_gateway(settings)


def require_real_gateway():
    import pytest  # not at the top: the unprivileged harness imports this module without pytest

    factory = real_gateway_factory()
    if factory is None:
        pytest.skip("pytest_rexmle.gateway (the gateway server) is not part of this checkout")
    return factory


class StandInRun:
    """One run on the stand-in: answers every GET on its listener with JSON naming the path and whether
    the request carried the run's token."""

    def __init__(self) -> None:
        self.token = "rexmle-standin-" + secrets.token_hex(16)
        self.paths: list[str] = []
        self._servers: list[http.server.ThreadingHTTPServer] = []

    def environment(self, base_url: str) -> dict[str, str]:
        return {"OPENAI_BASE_URL": f"{base_url}/openai/v1", "OPENAI_API_KEY": self.token,
                "ANTHROPIC_API_KEY": self.token, "REXMLE_GATEWAY": base_url, "NO_PROXY": "127.0.0.1,localhost"}

    def serve(self, listener: socket.socket) -> None:
        run = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                run.paths.append(self.path)
                body = json.dumps({"path": self.path,
                                   "token_ok": self.headers.get("Authorization") == f"Bearer {run.token}"}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(listener.getsockname(), Handler, bind_and_activate=False)
        server.socket.close()
        server.socket = listener
        self._servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()

    def host_address(self) -> tuple[str, int]:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        self.serve(listener)
        return listener.getsockname()

    def close(self) -> dict:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        return {"usage": {"requests": len(self.paths), "source": "gateway"}, "egress": [], "budget_exhausted": None,
                "calls": "model-calls.jsonl"}


class StandInGateway:
    def __init__(self) -> None:
        self.runs: list[StandInRun] = []

    def open_run(self, run_id: str, **_: object) -> StandInRun:
        run = StandInRun()
        self.runs.append(run)
        return run


def gateway_factory():
    """The real gateway where installed, else a fresh stand-in (returned too, to inspect its runs)."""
    factory = real_gateway_factory()
    if factory is not None:
        return factory, None
    standin = StandInGateway()
    return (lambda: standin), standin


class SocketService:
    """A socket answered by a daemon thread until :meth:`close`. The socket's short time-out lets the
    thread see the stop; an ``OSError`` while serving (that time-out, a peer gone) skips to the next."""

    def _start(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                self.serve_one()
            except OSError:
                continue

    def serve_one(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


class UnixService(SocketService):
    """A unix socket service counting its connections: pathname (mode 0777, under ``/run`` like munged's
    when root can write there) or abstract."""

    def __init__(self, abstract: bool = False) -> None:
        self.accepted = 0
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.folder: Path | None = None
        if abstract:
            self.address = f"rexmle-test-{secrets.token_hex(6)}"
            sock.bind("\0" + self.address)
        else:
            parent = "/run" if os.access("/run", os.W_OK) else None
            self.folder = Path(tempfile.mkdtemp(prefix="rexmle-munge-standin-", dir=parent))
            self.folder.chmod(0o755)
            self.address = str(self.folder / "munge.socket.2")
            sock.bind(self.address)
            os.chmod(self.address, 0o777)
        sock.listen(8)
        self._start(sock)

    def serve_one(self) -> None:
        conn, _ = self.sock.accept()
        self.accepted += 1
        conn.close()

    def close(self) -> None:
        super().close()
        if self.folder is not None:
            for entry in self.folder.iterdir():
                entry.unlink()
            self.folder.rmdir()


#: the agent that hunts for the key and a way out (``fixtures/agents/gateway_hunt/agent.py``)
HUNT_AGENT = Path(__file__).resolve().parents[2] / "fixtures" / "agents" / "gateway_hunt" / "agent.py"


class UdpResponder(SocketService):
    """A UDP service on the host's loopback answering every datagram (a stand-in DNS server)."""

    def __init__(self) -> None:
        self.received = 0
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        self.address = sock.getsockname()
        self._start(sock)

    def serve_one(self) -> None:
        data, peer = self.sock.recvfrom(512)
        self.received += 1
        self.sock.sendto(data, peer)


def hunt_code(targets: dict) -> str:
    return f"TARGETS = {json.dumps(json.dumps(targets))}\n{HUNT_AGENT.read_text()}"


#: the host's real services an escaped agent used (issue 23: munge, then sbatch; MariaDB by socket and TCP)
REAL_SOCKETS = ("/run/munge/munge.socket.2", "/run/mysqld/mysqld.sock", "/var/run/docker.sock",
                "/run/dbus/system_bus_socket")
REAL_TCP = (("127.0.0.1", 3306), ("127.0.0.1", 6817), ("127.0.0.1", 6819))


def real_host_services() -> tuple[list[list], list[str]]:
    """Those of :data:`REAL_TCP` that listen here and :data:`REAL_SOCKETS` that exist: connecting is the
    whole attempt (nothing is sent), and it must fail from inside every sandbox."""
    tcp = []
    for host, port in REAL_TCP:
        with socket.socket() as probe:
            probe.settimeout(1)
            if probe.connect_ex((host, port)) == 0:
                tcp.append([host, port])
    return tcp, [p for p in REAL_SOCKETS if os.path.exists(p)]


def host_address() -> str:
    """This machine's address on its default route (a host service bound to all interfaces answers there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent, only the route is looked up
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"


class StandInProvider:
    """An OpenAI-compatible chat endpoint on the host's loopback (the model provider, which cannot exist
    here): answers ``POST /v1/chat/completions`` with a fixed completion and its usage, and records the
    ``Authorization`` header of every request, so a test can see which key reached it."""

    ANSWER = "rexmle-provider-answer"

    def __init__(self) -> None:
        self.authorizations: list[str] = []
        provider = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                request = json.loads(self.rfile.read(length) or b"{}")
                provider.authorizations.append(self.headers.get("Authorization", ""))
                body = json.dumps({"id": "chatcmpl-standin", "object": "chat.completion", "model": request.get("model"),
                                   "choices": [{"index": 0, "finish_reason": "stop",
                                                "message": {"role": "assistant", "content": provider.ANSWER}}],
                                   "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):  # noqa: N802
                provider.authorizations.append(self.headers.get("Authorization", ""))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(provider.ANSWER.encode())

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
