"""Network stand-ins for the bridge tests: a token server, a tiny DNS server, and an offline "internet".

No test may contact a real address of this machine's networks, so the "internet" is a network
namespace of our own joined to the host's by a veth pair with addresses from 198.18.0.0/15 (the
benchmarking range, RFC 2544): slirp4netns reaches it like any outside host, through the host's
routing table, and nothing leaves the machine. Its servers are sockets of this very process, created
by a thread that first entered the namespace (``setns`` changes only the calling thread).
"""

from __future__ import annotations

import ctypes
import http.server
import os
import random
import socket
import subprocess
import threading
import uuid
from dataclasses import dataclass, field

from .gateway_standin import SocketService

CLONE_NEWNET = 0x40000000
NAME = "internet.rexmle.test"


class TokenServer:
    """An HTTP server answering every GET with a secret token (bound where ``bind`` says)."""

    def __init__(self, address: str = "127.0.0.1", netns: str | None = None) -> None:
        self.token = f"rexmle-net-token-{uuid.uuid4().hex}"
        token = self.token.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                self.send_response(200)
                self.end_headers()
                self.wfile.write(token)

            def log_message(self, *args):
                pass

        self.server = in_namespace(netns, lambda: http.server.ThreadingHTTPServer((address, 0), Handler))
        self.address, self.port = address, self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class DnsServer(SocketService):
    """Answers A queries for the names it knows, NXDOMAIN for any other (UDP, one thread)."""

    def __init__(self, address: str, names: dict[str, str], netns: str | None = None) -> None:
        self.names = {k.lower(): v for k, v in names.items()}
        self.queries: list[str] = []
        self._start(in_namespace(netns, lambda: _udp(address, 53)))

    def serve_one(self) -> None:
        query, peer = self.sock.recvfrom(512)
        try:
            reply = self.answer(query)
        except (IndexError, ValueError):  # a malformed query gets no answer
            return
        self.sock.sendto(reply, peer)

    def answer(self, query: bytes) -> bytes:
        labels, i = [], 12
        while query[i]:
            labels.append(query[i + 1:i + 1 + query[i]].decode("ascii", "replace"))
            i += 1 + query[i]
        qtype = int.from_bytes(query[i + 1:i + 3], "big")
        question = query[12:i + 5]
        name = ".".join(labels).lower()
        self.queries.append(name)
        address = self.names.get(name)
        if address is not None and qtype == 1:
            record = b"\xc0\x0c\x00\x01\x00\x01" + (60).to_bytes(4, "big") + b"\x00\x04" + socket.inet_aton(address)
            return query[:2] + b"\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00" + question + record
        rcode = 3 if address is None else 0  # NXDOMAIN, or a known name without this record type
        return query[:2] + bytes([0x81, 0x80 | rcode]) + b"\x00\x01\x00\x00\x00\x00\x00\x00" + question


def _udp(address: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((address, port))
    return sock


def in_namespace(netns: str | None, make):
    """``make()`` run by a thread inside network namespace ``netns`` (``ip netns`` name), or here."""
    if netns is None:
        return make()
    box: dict = {}

    def enter_and_make() -> None:
        try:
            fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
            try:
                if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns({netns})")
            finally:
                os.close(fd)
            box["value"] = make()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=enter_and_make)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


@dataclass
class StandInInternet:
    """A namespace ``netns`` at ``address``, reached from the host through ``host_address``."""
    netns: str
    host_link: str
    address: str
    host_address: str
    closers: list = field(default_factory=list)

    @classmethod
    def create(cls) -> StandInInternet:
        tag = uuid.uuid4().hex[:8]
        third, fourth = random.randrange(256), 4 * random.randrange(64)
        net = f"198.18.{third}"
        self = cls(f"rexmle-inet-{tag}", f"rxi{tag}", f"{net}.{fourth + 2}", f"{net}.{fourth + 1}")
        peer = f"rxp{tag}"
        try:
            for command in (["ip", "netns", "add", self.netns],
                            ["ip", "link", "add", self.host_link, "type", "veth", "peer", "name", peer],
                            ["ip", "link", "set", peer, "netns", self.netns],
                            ["ip", "addr", "add", f"{self.host_address}/30", "dev", self.host_link],
                            ["ip", "link", "set", self.host_link, "up"],
                            ["ip", "-n", self.netns, "addr", "add", f"{self.address}/30", "dev", peer],
                            ["ip", "-n", self.netns, "link", "set", peer, "up"],
                            ["ip", "-n", self.netns, "link", "set", "lo", "up"]):
                subprocess.run(command, check=True, capture_output=True, text=True, timeout=30)
        except BaseException:
            self.remove()
            raise
        return self

    def serve(self, names: dict[str, str]) -> tuple[TokenServer, DnsServer]:
        web = TokenServer(self.address, self.netns)
        self.closers.append(web.close)
        dns = DnsServer(self.address, names, self.netns)
        self.closers.append(dns.close)
        return web, dns

    def remove(self) -> None:
        for close in reversed(self.closers):
            close()
        self.closers.clear()
        # deleting the namespace deletes the veth pair; the host side goes too if the move never happened
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", self.host_link], capture_output=True, timeout=30)
