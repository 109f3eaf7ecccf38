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


# -- issue 32.7: families no agent needs, and syscalls newer than the filter's table ------------------------

#: setxattrat (Linux 6.13): newer than the table, so unknown to the filter; 1000: unknown to every kernel
UNKNOWN_CALLS = (463, 1000)


def test_filter_refuses_vsock_and_alg_sockets_and_answers_enosys_above_its_table():
    import ctypes
    import errno
    import socket

    def probe(out: dict) -> None:
        for name, family, kind in (("vsock", seccomp.AF_VSOCK, socket.SOCK_STREAM),
                                   ("alg", seccomp.AF_ALG, socket.SOCK_SEQPACKET)):
            for call in ("socket", "socketpair"):
                try:
                    getattr(socket, call)(family, kind)
                    out[f"{name}_{call}"] = 0
                except OSError as exc:
                    out[f"{name}_{call}"] = exc.errno
        libc = ctypes.CDLL(None, use_errno=True)
        for number in UNKNOWN_CALLS:
            out[str(number)] = libc.syscall(number, -1, 0, 0, 0, 0) == -1 and ctypes.get_errno()
        _socketpair(out)

    for network in ("host", "none", "tcp-only"):
        out = _in_filtered_child(seccomp.build_filter(network=network), probe)
        assert out.get("error") is None, out
        assert {k: v for k, v in out.items() if k.startswith(("vsock", "alg"))} == dict.fromkeys(
            ("vsock_socket", "vsock_socketpair", "alg_socket", "alg_socketpair"), errno.EAFNOSUPPORT), (network, out)
        assert out["463"] == out["1000"] == errno.ENOSYS and out["socketpair"] == "y", (network, out)


#: a real Python in the sandbox: the refusals, and the work that depends on ENOSYS fallbacks still done
#: (threads and subprocesses: clone3 answers ENOSYS; stat: statx)
IN_SANDBOX = """
    import ctypes, json, os, socket, subprocess, sys
    out = {}
    for name, family, kind in (("vsock", 40, socket.SOCK_STREAM), ("alg", 38, socket.SOCK_SEQPACKET)):
        try:
            socket.socket(family, kind).close()
            out[name] = 0
        except OSError as exc:
            out[name] = exc.errno
    libc = ctypes.CDLL(None, use_errno=True)
    for number in (463, 1000):
        out[str(number)] = libc.syscall(number, -1, 0, 0, 0, 0) == -1 and ctypes.get_errno()
    child = subprocess.run([sys.executable, "-c", "import threading, os; t = threading.Thread(target=os.getpid); "
                            "t.start(); t.join(); print(oct(os.stat('.').st_mode))"], capture_output=True, text=True)
    out["child"] = [child.returncode, child.stdout.strip()]
    print(json.dumps(out))
"""


def test_sandboxed_python_meets_the_refusals_and_still_works(tmp_path, mechanism):
    import errno

    from .conftest import run_agent

    run = run_agent(tmp_path, mechanism, IN_SANDBOX)
    report = run.report()
    assert report["vsock"] == report["alg"] == errno.EAFNOSUPPORT, report
    assert report["463"] == report["1000"] == errno.ENOSYS, report
    assert report["child"][0] == 0 and report["child"][1].startswith("0o40"), (report, run.stderr[-2000:])
