"""The ``gateway`` network: the sandbox's only peer is a listener that belongs to the session's gateway.

The agent gets a network namespace of its own with nothing in it but a loopback, and on that loopback one
listening TCP socket (``127.0.0.1:GATEWAY_PORT``) whose connections the *harness* accepts and hands to
its gateway (model APIs with the host's keys, the egress proxy, validation). Nothing else exists there:
no route out, no host loopback, no DNS server, and abstract unix sockets are per network namespace.

Why the listener is made inside and carried out, rather than the harness connecting in: a socket keeps
the network namespace it was created in, whoever holds it later. So a process that is *in* the sandbox's
namespace creates, binds and listens, then passes the descriptor back over a unix socketpair
(``SCM_RIGHTS``); the harness calls ``accept()`` on it from outside. The kernel queues connections in
the backlog from ``listen()`` on, so the agent may connect before the harness has started serving.

Who makes it:
* bubblewrap (``--unshare-net``) and Landlock: the launcher, the sandbox's first process, while it is
  still trusted (before the privilege drop and before any agent code). Under Landlock it first enters a
  new network namespace itself (``unshare(CLONE_NEWNET)`` as root; an unprivileged harness needs a user
  namespace too, ``CLONE_NEWUSER`` with the harness's own uid mapped to itself).
* Docker (``--network none``): :func:`listener_in_namespace` runs a one-shot helper that ``setns`` into
  the namespace of a placeholder container, whose namespace the agent's container then shares.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import select
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from .fds import python_command

#: the gateway's port inside the sandbox (any port is free in a namespace of its own)
GATEWAY_PORT = 8484
GATEWAY_HOST = "127.0.0.1"
BACKLOG = 128
HANDOFF_TIMEOUT = 20.0
CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
SIOCGIFFLAGS, SIOCSIFFLAGS = 0x8913, 0x8914
IFF_UP = 0x1


class GatewayNetworkError(RuntimeError):
    """The sandbox's gateway listener could not be made (the run stops before the agent starts)."""


def base_url(port: int = GATEWAY_PORT) -> str:
    """What the agent's variables name: the gateway as the sandbox sees it."""
    return f"http://{GATEWAY_HOST}:{port}"


# -- inside the sandbox's namespace --------------------------------------------------------------------
def loopback_up() -> None:
    """``ip link set lo up``: a fresh namespace's loopback is down and has no 127.0.0.1 until then."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, request))[1]
        if not flags & IFF_UP:
            fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def enter_new_network(privileged: bool) -> None:
    """Move this (single-threaded) process into a new network namespace with its loopback up.

    ``privileged`` (host root): the namespace alone. Otherwise a user namespace as well, in which this
    process's uid and gid map to themselves, so files keep their owners and nothing else changes."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNET if privileged else CLONE_NEWUSER | CLONE_NEWNET
    if libc.unshare(flags) != 0:
        err = ctypes.get_errno()
        raise GatewayNetworkError(f"cannot create the sandbox's network namespace: {os.strerror(err)}"
                                  + ("" if privileged else " (unprivileged user namespaces are disabled here)"))
    if not privileged:
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    loopback_up()


def listen(port: int = GATEWAY_PORT) -> socket.socket:
    """The gateway's listener on this namespace's loopback."""
    return socket.create_server((GATEWAY_HOST, port), backlog=BACKLOG)


def hand_over(channel_fd: int, sock: socket.socket) -> None:
    """Send the listener out over ``channel_fd`` and keep no copy of it (nor of the channel)."""
    with socket.socket(fileno=channel_fd) as channel:
        socket.send_fds(channel, [b"L"], [sock.fileno()])
    sock.close()


def open_in_sandbox(config: dict) -> None:
    """The launcher's part: make the listener (entering a new namespace first when asked) and send it."""
    if config.get("new_netns"):
        enter_new_network(privileged=os.geteuid() == 0)
    hand_over(int(config["fd"]), listen(int(config["port"])))


# -- in the harness --------------------------------------------------------------------------------------
class ListenerChannel:
    """The harness's end of the hand-off: a socketpair whose other end the sandbox's first process gets.

    Use: ``child_fd`` in the launcher's config (and ``pass_fds``), ``release_child()`` once the child
    started, ``receive(proc)`` for the listener, ``close()`` always."""

    def __init__(self) -> None:
        self._ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._theirs: socket.socket | None = theirs
        self.child_fd = theirs.fileno()
        os.set_inheritable(self.child_fd, True)

    def release_child(self) -> None:
        """Drop our copy of the child's end, so its death reads as EOF here."""
        if self._theirs is not None:
            self._theirs.close()
            self._theirs = None

    def receive(self, proc: subprocess.Popen | None = None, timeout: float = HANDOFF_TIMEOUT) -> socket.socket:
        self.release_child()
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise GatewayNetworkError(f"the sandbox did not hand over the gateway listener within {timeout:.0f} s")
            ready, _, _ = select.select([self._ours], [], [], min(left, 0.2))
            if ready:
                break
            if proc is not None and proc.poll() is not None:
                raise GatewayNetworkError(f"the sandbox ended (exit status {proc.returncode}) before it made the "
                                          "gateway listener")
        msg, fds, _, _ = socket.recv_fds(self._ours, 16, 4)
        if msg != b"L" or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise GatewayNetworkError("the sandbox ended before it made the gateway listener"
                                      + (f" (exit status {proc.poll()})" if proc is not None else ""))
        sock = socket.socket(fileno=fds[0])
        if sock.family != socket.AF_INET or sock.type != socket.SOCK_STREAM:
            sock.close()
            raise GatewayNetworkError("the sandbox handed over something other than a TCP listener")
        return sock

    def close(self) -> None:
        self.release_child()
        self._ours.close()


def setns_and_hand_over(netns_fd: int, channel_fd: int, port: int) -> None:
    """The helper process's body: join the namespace, make the listener, send it, exit."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(netns_fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        sys.exit(f"setns into the sandbox's network namespace failed: {os.strerror(err)}")
    os.close(netns_fd)
    loopback_up()
    hand_over(channel_fd, listen(port))


def listener_in_namespace(pid: int, port: int = GATEWAY_PORT, timeout: float = HANDOFF_TIMEOUT) -> socket.socket:
    """A gateway listener inside the network namespace of process ``pid`` (host root only: ``setns``
    into a namespace owned by the host's user namespace needs ``CAP_SYS_ADMIN`` there).

    A helper process does it, because ``setns`` changes a whole thread and the harness has many; the
    namespace is opened here first, so a reused pid cannot redirect the helper."""
    netns = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    channel = ListenerChannel()
    try:
        code = ("from pytest_rexmle.runtime.sandbox.gateway_net import setns_and_hand_over; "
                "setns_and_hand_over(*map(int, sys.argv[1:]))")
        done = subprocess.Popen(python_command(code, str(netns), str(channel.child_fd), str(port)),
                                pass_fds=(netns, channel.child_fd),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            return channel.receive(done, timeout)
        except GatewayNetworkError as exc:
            _, err = done.communicate(timeout=timeout)
            raise GatewayNetworkError(f"{exc}: {err.decode(errors='replace').strip()[-400:]}") from None
        finally:
            if done.poll() is None:
                done.wait(timeout=timeout)
            if done.stderr is not None:
                done.stderr.close()
    finally:
        os.close(netns)
        channel.close()


def can_create_network_namespace() -> tuple[bool, str]:
    """Whether this harness can give a Landlock agent a network namespace of its own (tried in a child)."""
    code = ("import os; from pytest_rexmle.runtime.sandbox.gateway_net import enter_new_network, listen; "
            "enter_new_network(os.geteuid() == 0); listen().close()")
    try:
        done = subprocess.run(python_command(code), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    if done.returncode == 0:
        return True, "a network namespace of its own"
    return False, (done.stderr.strip().splitlines() or ["unknown error"])[-1]

