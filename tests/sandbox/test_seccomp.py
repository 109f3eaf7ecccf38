"""The hand-assembled seccomp program: well-formed for both architectures, and what it refuses."""

from __future__ import annotations

import os
import struct

import pytest

from pytest_rexmle.runtime.sandbox import seccomp


def _decode(program: bytes) -> list[tuple[int, int, int, int]]:
    assert len(program) % 8 == 0
    return [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
@pytest.mark.parametrize("network", ["host", "none"])
def test_program_checks_the_architecture_first_and_every_jump_lands_inside(arch, network):
    insns = _decode(seccomp.build_filter(network=network, deny_unix_sockets=True, arch=arch))
    assert insns[0] == (0x20, 0, 0, 4)  # load seccomp_data.arch
    assert insns[1] == (0x15, 1, 0, seccomp.AUDIT_ARCH[arch])
    assert insns[2] == (0x06, 0, 0, seccomp.SECCOMP_RET_KILL_PROCESS)
    assert insns[-1] == (0x06, 0, 0, seccomp.SECCOMP_RET_ALLOW)
    for index, (code, jt, jf, _) in enumerate(insns):
        if code & 0x07 == 0x05:  # conditional jumps
            assert index + 1 + max(jt, jf) < len(insns)
    refused = {k for code, _, _, k in insns if code == 0x15}
    column = 0 if arch == "x86_64" else 1
    for name in ("mount", "unshare", "setns", "ptrace", "bpf", "keyctl", "init_module", "mknodat", "io_uring_setup"):
        assert seccomp.DENIED[name][column] in refused, name
    socket_nr = seccomp.SOCKET[column]
    assert socket_nr in refused
    if network == "none":  # the socket() block compares the family with AF_INET and AF_INET6
        start = next(i for i, (code, _, _, k) in enumerate(insns) if code == 0x15 and k == socket_nr)
        block = {k for code, _, _, k in insns[start + 1:start + 12] if code == 0x15}
        assert {seccomp.AF_INET, seccomp.AF_INET6, seccomp.AF_UNIX} <= block


def test_unknown_architecture_is_refused_not_guessed():
    with pytest.raises(seccomp.UnsupportedArchitecture):
        seccomp.build_filter(arch="riscv64")


def _in_filtered_child(program: bytes, probe) -> dict:
    """Fork, install ``program``, run ``probe(out)`` there and return what it recorded (or its error)."""
    import json

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(read)
        out = {}
        try:
            seccomp.install(program)
            probe(out)
        except BaseException as exc:
            out["error"] = repr(exc)
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 4096):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    return json.loads(data)


def _socketpair(out: dict) -> None:
    """A connected pair still works under every filter (multiprocessing and friends need it)."""
    import socket

    a, b = socket.socketpair()
    a.send(b"y")
    out["socketpair"] = b.recv(1).decode()


def test_installed_filter_refuses_and_allows_in_a_real_child():
    """Fork, install, try: refused calls answer EPERM/EAFNOSUPPORT, ordinary work goes on."""
    import ctypes
    import errno
    import socket

    def probe(out: dict) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        out["unshare"] = libc.unshare(0x00020000) == -1 and ctypes.get_errno()
        try:
            socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            out["inet6"] = 0
        except OSError as exc:
            out["inet6"] = exc.errno
        _socketpair(out)

    out = _in_filtered_child(seccomp.build_filter(network="none"), probe)
    assert out.get("error") is None, out
    assert out["unshare"] == errno.EPERM and out["inet6"] == errno.EAFNOSUPPORT and out["socketpair"] == "y"


def test_tcp_only_filter_allows_tcp_streams_and_nothing_else_of_ip():
    """The gateway without a network namespace: IP sockets only as TCP streams (Landlock governs those),
    so no UDP (DNS), SCTP or MPTCP; unix sockets refused; socketpair still works."""
    import errno
    import socket

    tries = {"tcp": (socket.AF_INET, socket.SOCK_STREAM, 0), "tcp6_cloexec": (socket.AF_INET6, socket.SOCK_STREAM | socket.SOCK_CLOEXEC, 6),
             "udp": (socket.AF_INET, socket.SOCK_DGRAM, 0), "udp6": (socket.AF_INET6, socket.SOCK_DGRAM, 0),
             "sctp": (socket.AF_INET, socket.SOCK_STREAM, 132), "mptcp": (socket.AF_INET, socket.SOCK_STREAM, 262),
             "unix": (socket.AF_UNIX, socket.SOCK_STREAM, 0)}

    def probe(out: dict) -> None:
        for name, args in tries.items():
            try:
                socket.socket(*args).close()
                out[name] = 0
            except OSError as exc:
                out[name] = exc.errno
        _socketpair(out)

    out = _in_filtered_child(seccomp.build_filter(network="tcp-only", deny_unix_sockets=True), probe)
    assert out.get("error") is None, out
    assert out["tcp"] == out["tcp6_cloexec"] == 0 and out["socketpair"] == "y"
    assert out["udp"] == out["udp6"] == out["sctp"] == out["mptcp"] == errno.EPERM
    assert out["unix"] == errno.EAFNOSUPPORT
