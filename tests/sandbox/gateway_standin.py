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
        raise NotImplementedError("the stand-in serves only listeners handed to it")

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


class UnixService:
    """A unix socket service counting its connections: pathname (mode 0777, under ``/run`` like munged's
    when root can write there) or abstract."""

    def __init__(self, abstract: bool = False) -> None:
        self.accepted = 0
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.folder: Path | None = None
        if abstract:
            self.address = f"rexmle-test-{secrets.token_hex(6)}"
            self.sock.bind("\0" + self.address)
        else:
            parent = "/run" if os.access("/run", os.W_OK) else None
            self.folder = Path(tempfile.mkdtemp(prefix="rexmle-munge-standin-", dir=parent))
            self.folder.chmod(0o755)
            self.address = str(self.folder / "munge.socket.2")
            self.sock.bind(self.address)
            os.chmod(self.address, 0o777)
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()
        if self.folder is not None:
            for entry in self.folder.iterdir():
                entry.unlink()
            self.folder.rmdir()


#: the agent: from inside, look for the key everywhere and try every way out (reads TARGETS, a JSON dict)
HUNT = r'''
import errno, json, os, socket, urllib.request

def err(exc):
    reason = getattr(exc, "reason", exc)
    return errno.errorcode.get(getattr(reason, "errno", None), type(reason).__name__)

t = json.loads(TARGETS)
out = {"env_keys": {k: os.environ.get(k) for k in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY")},
       "gateway": None, "tcp": {}, "unix": None, "abstract": None, "dns": None, "proc_read": 0}
loot = [json.dumps(dict(os.environ))]
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for name in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{name}", "rb") as fh:
                    loot.append(fh.read().decode(errors="replace"))
                    out["proc_read"] += 1
            except OSError:
                pass
for top in {os.getcwd(), os.environ.get("HOME", "."), os.environ.get("TMPDIR", "/tmp"), "/tmp"}:
    for folder, _, files in os.walk(top):
        for f in files:
            try:
                with open(os.path.join(folder, f), "rb") as fh:
                    loot.append(fh.read(1 << 20).decode(errors="replace"))
            except OSError:
                pass
with open("loot.txt", "w") as fh:
    fh.write("\n".join(loot))
gw = os.environ.get("REXMLE_GATEWAY")
if gw:
    req = urllib.request.Request(gw + "/rexmle/ping", headers={"Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "")})
    try:
        out["gateway"] = urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=5).status
    except OSError as exc:
        out["gateway"] = getattr(exc, "code", None) or err(exc)
for host, port in t["tcp"]:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((host, port)); out["tcp"][f"{host}:{port}"] = "connected"
    except OSError as exc:
        out["tcp"][f"{host}:{port}"] = err(exc)
    finally:
        s.close()
for key, address in (("unix", t["unix"]), ("abstract", "\0" + t["abstract"])):
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(3)
        s.connect(address); out[key] = "connected"
        s.close()
    except OSError as exc:
        out[key] = err(exc)
try:
    out["dns"] = socket.getaddrinfo("zenodo.org", 443)[0][4][0]
except OSError as exc:
    out["dns"] = type(exc).__name__
try:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(2)
    u.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x06zenodo\x03org\x00\x00\x01\x00\x01", tuple(t["dns"]))
    out["udp_dns"] = "answered" if u.recvfrom(512) else "silent"
except OSError as exc:
    out["udp_dns"] = err(exc)
print(json.dumps(out))
'''


class UdpResponder:
    """A UDP service on the host's loopback answering every datagram (a stand-in DNS server)."""

    def __init__(self) -> None:
        self.received = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.address = self.sock.getsockname()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self.sock.recvfrom(512)
            except OSError:
                continue
            self.received += 1
            self.sock.sendto(data, peer)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


def hunt_code(targets: dict) -> str:
    return f"TARGETS = {json.dumps(json.dumps(targets))}\n{HUNT}"


def host_address() -> str:
    """This machine's address on its default route (a host service bound to all interfaces answers there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent, only the route is looked up
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"
