"""A seccomp-BPF filter for agent processes, assembled here in pure Python.

Why not libseccomp: it is a system package (and its Python binding is not on PyPI), and the filter is
small enough to write by hand. The same program serves both mechanisms: bubblewrap receives it on a
file descriptor (``--seccomp FD``) and the launcher installs it with ``prctl(PR_SET_SECCOMP)`` right
before ``execve``, after ``no_new_privs`` is set.

The filter is a deny-list on top of an unprivileged uid with no capabilities. It refuses (EPERM) what
would let a process change the mount table or namespaces, load kernel code, reach other processes'
memory, or create special files: mount and the new mount API, namespaces (``unshare``, ``setns``,
namespace flags of ``clone``; ``clone3`` answers ENOSYS so libc falls back to ``clone``), ``ptrace``,
module and kexec calls, keyrings, ``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring`` (whose
operations bypass seccomp), ``mknod``, ``chroot``, swap, reboot, clock changes, file handles, and any
``chmod``/``creat``/``open``/``mkdir`` that asks for a setuid or setgid bit. With ``network="none"`` it
also refuses ``socket(AF_INET|AF_INET6|AF_PACKET)``; ``deny_unix_sockets`` refuses ``socket(AF_UNIX)``
(``socketpair`` stays) for every Landlock agent — the host's ``/run`` stays visible there and Landlock
does not filter pathname sockets, so munged's, MariaDB's or Docker's would otherwise answer — and for
an agent that keeps host uid 0 (see ``identity.py``). The architecture is checked first: a syscall from any other ABI (x32,
i386 via ``int 0x80``) kills the process.

Always refused, whatever the network (EAFNOSUPPORT, as a kernel without them answers; ``socketpair`` too):
``AF_VSOCK``, which reaches the hypervisor's host and its services past every network rule (it
works on every mechanism otherwise), and ``AF_ALG``, the kernel's crypto interface, attack surface no agent needs.

A deny-list is only as good as its table: a syscall newer than the table (a future mount, namespace or
io_uring-like call) would pass unexamined. So every syscall number above ``LAST_KNOWN`` — the newest
call this table was reviewed against, ``mseal`` (Linux 6.10) — answers ENOSYS, as an older kernel
would; glibc, CPython, PyTorch and CUDA fall back on ENOSYS for new calls by design (as they do for
``clone3`` here). On a newer kernel this withholds, for example, ``open_tree_attr`` (a mount call, 6.15)
and the ``*xattrat`` calls (6.13) until they are reviewed and ``LAST_KNOWN`` moves.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

# BPF opcodes (linux/bpf_common.h, linux/filter.h)
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_ALU_AND_K = 0x54
_RET_K = 0x06

SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

# offsets in struct seccomp_data
_NR, _ARCH = 0, 4


def _arg_low(index: int) -> int:
    return 16 + 8 * index  # low 32 bits of args[index] (little-endian on both supported arches)


AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000

# Syscall numbers of the refused calls. x86_64: asm/unistd_64.h; aarch64: asm-generic/unistd.h.
DENIED = {
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51),
    "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433),
    "move_mount": (429, 429), "open_tree": (428, 428), "mount_setattr": (442, 442),
    "unshare": (272, 97), "setns": (308, 268),
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "kcmp": (312, 272), "pidfd_getfd": (438, 438),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "init_module": (175, 105),
    "finit_module": (313, 273), "delete_module": (176, 106),
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
    "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "mknod": (133, None), "mknodat": (259, 33),
    "swapon": (167, 224), "swapoff": (168, 225), "reboot": (169, 142),
    "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264),
    "acct": (163, 89), "quotactl": (179, 60), "syslog": (103, 116), "vhangup": (153, 58),
    "settimeofday": (164, 170), "clock_settime": (227, 112), "clock_adjtime": (305, 266),
    "adjtimex": (159, 171), "sethostname": (170, 161), "setdomainname": (171, 162),
    "iopl": (172, None), "ioperm": (173, None), "uselib": (134, None),
}
ENOSYS_CALLS = {"clone3": (435, 435), "openat2": (437, 437)}  # arguments live in structs we cannot inspect
#: the newest syscall the tables above were reviewed against (mseal, Linux 6.10; the same number on both
#: architectures, whose tables share their numbers from 403 on): anything above it answers ENOSYS
LAST_KNOWN = 462
CLONE = (56, 220)
SOCKET = (41, 198)
SOCKETPAIR = (53, 199)
# (syscall, index of its mode argument): refused when the mode carries S_ISUID or S_ISGID
MODE_ARGS = {"chmod": ((90, None), 1), "fchmod": ((91, 52), 1), "fchmodat": ((268, 53), 2),
             "fchmodat2": ((452, 452), 2), "creat": ((85, None), 1), "open": ((2, None), 2),
             "openat": ((257, 56), 3), "mkdir": ((83, None), 1), "mkdirat": ((258, 34), 2)}
SETID_BITS = 0o6000
CLONE_NAMESPACE_FLAGS = 0x00000080 | 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
AF_UNIX, AF_INET, AF_INET6, AF_PACKET, AF_ALG, AF_VSOCK = 1, 2, 10, 17, 38, 40
#: socket families refused for every agent (module docstring)
ALWAYS_REFUSED_FAMILIES = (AF_VSOCK, AF_ALG)
SOCK_STREAM, SOCK_TYPE_MASK = 1, 0xF
IPPROTO_TCP = 6


def machine() -> str:
    name = platform.machine()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(name, name)


class UnsupportedArchitecture(RuntimeError):
    pass


_ENOSYS = SECCOMP_RET_ERRNO | errno.ENOSYS


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


#: what a container's own PID namespace already confines (Docker's profile allows them on kernels >= 4.8, where
#: seccomp is checked again after a tracer changes a syscall): R&D-Agent runs its code under ``strace``
CONTAINED_CALLS = ("ptrace", "process_vm_readv", "process_vm_writev")


def build_filter(network: str = "host", deny_unix_sockets: bool = False, arch: str | None = None,
                 allow_tracing: bool = False) -> bytes:
    """The BPF program (a packed array of ``struct sock_filter``) for this machine's architecture.
    ``allow_tracing``: ``ptrace`` and ``process_vm_*`` pass (:data:`CONTAINED_CALLS`), for a container whose
    PID namespace holds only the agent's processes."""
    arch = arch or machine()
    if arch not in AUDIT_ARCH:
        raise UnsupportedArchitecture(f"no seccomp syscall table for {arch}")
    col = 0 if arch == "x86_64" else 1
    eperm = SECCOMP_RET_ERRNO | errno.EPERM
    prog = _abi_checks(arch) + _refused_calls(col, allow_tracing, eperm)
    prog += _arg_check(CLONE[col], 0, [(_JSET_K, CLONE_NAMESPACE_FLAGS, eperm)])
    prog += _socket_checks(col, network, deny_unix_sockets, eperm)
    for pair, arg in MODE_ARGS.values():
        if (number := pair[col]) is not None:
            prog += _arg_check(number, arg, [(_JSET_K, SETID_BITS, eperm)])
    prog.append(_insn(_RET_K, SECCOMP_RET_ALLOW))
    if len(prog) > 4096:
        raise ValueError("seccomp program too long")
    return b"".join(prog)


def _abi_checks(arch: str) -> list[bytes]:
    """Kill a syscall of another ABI; answer ENOSYS above :data:`LAST_KNOWN`; leave nr in the accumulator."""
    prog = [_insn(_LD_W_ABS, _ARCH), _insn(_JEQ_K, AUDIT_ARCH[arch], 1, 0),
            _insn(_RET_K, SECCOMP_RET_KILL_PROCESS), _insn(_LD_W_ABS, _NR)]
    if arch == "x86_64":  # x32 ABI numbers alias the 64-bit ones with this bit set
        prog += [_insn(_JGE_K, X32_SYSCALL_BIT, 0, 1), _insn(_RET_K, SECCOMP_RET_KILL_PROCESS)]
    return prog + [_insn(_JGE_K, LAST_KNOWN + 1, 0, 1), _insn(_RET_K, _ENOSYS)]  # newer than the table: unknown


def _refused_calls(col: int, allow_tracing: bool, eperm: int) -> list[bytes]:
    """EPERM for each :data:`DENIED` call this architecture has, ENOSYS for :data:`ENOSYS_CALLS`."""
    prog: list[bytes] = []
    for name, pair in DENIED.items():
        number = pair[col]
        if number is not None and not (allow_tracing and name in CONTAINED_CALLS):
            prog += [_insn(_JEQ_K, number, 0, 1), _insn(_RET_K, eperm)]
    for numbers in ENOSYS_CALLS.values():
        prog += [_insn(_JEQ_K, numbers[col], 0, 1), _insn(_RET_K, _ENOSYS)]
    return prog


def _arg_check(number: int, arg: int, tests: list[tuple[int, int, int]]) -> list[bytes]:
    """if nr == number: load the argument; each (op, k, ret) returns ret on a match; else allow."""
    body = [_insn(_LD_W_ABS, _arg_low(arg))]
    for op, k, ret in tests:
        body += [_insn(op, k, 0, 1), _insn(_RET_K, ret)]
    body.append(_insn(_RET_K, SECCOMP_RET_ALLOW))
    # jump over the body when the number differs; the accumulator still holds nr there
    return [_insn(_JEQ_K, number, 0, len(body)), *body]


def _socket_checks(col: int, network: str, deny_unix_sockets: bool, eperm: int) -> list[bytes]:
    """The families ``socket()`` refuses for this network (``tcp-only``: also its type rules) and those
    ``socketpair()`` always refuses."""
    eafnosupport = SECCOMP_RET_ERRNO | errno.EAFNOSUPPORT
    families = []
    if network == "none":
        families += [AF_INET, AF_INET6, AF_PACKET]
    if network == "tcp-only":
        families.append(AF_PACKET)
    if deny_unix_sockets:
        families.append(AF_UNIX)
    families += ALWAYS_REFUSED_FAMILIES
    if network == "tcp-only":
        prog = _tcp_only(SOCKET[col], families, eafnosupport, eperm)
    else:
        prog = _arg_check(SOCKET[col], 0, [(_JEQ_K, family, eafnosupport) for family in families])
    return prog + _arg_check(SOCKETPAIR[col], 0,
                             [(_JEQ_K, family, eafnosupport) for family in ALWAYS_REFUSED_FAMILIES])


def _tcp_only(socket_nr: int, families: list[int], refused_family: int, eperm: int) -> list[bytes]:
    """``socket()`` when the network is one TCP port (Landlock's connect rule, see ``landlock.py``): the
    refused families, and IP sockets only of type ``SOCK_STREAM`` with protocol 0 or TCP — no UDP (DNS),
    raw, SCTP or MPTCP socket, which Landlock's TCP rules would not govern."""
    allow = _insn(_RET_K, SECCOMP_RET_ALLOW)
    checks = [_insn(_LD_W_ABS, _arg_low(1)), _insn(_ALU_AND_K, SOCK_TYPE_MASK),
              _insn(_JEQ_K, SOCK_STREAM, 1, 0), _insn(_RET_K, eperm),
              _insn(_LD_W_ABS, _arg_low(2)), _insn(_JEQ_K, 0, 2, 0), _insn(_JEQ_K, IPPROTO_TCP, 1, 0),
              _insn(_RET_K, eperm), allow]
    head = [_insn(_LD_W_ABS, _arg_low(0))]
    for family in families:
        head += [_insn(_JEQ_K, family, 0, 1), _insn(_RET_K, refused_family)]
    # AF_INET or AF_INET6: into the checks (right after the ALLOW below); any other family: allowed
    head += [_insn(_JEQ_K, AF_INET, 2, 0), _insn(_JEQ_K, AF_INET6, 1, 0), allow]
    body = head + checks
    return [_insn(_JEQ_K, socket_nr, 0, len(body)), *body]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(program: bytes) -> None:
    """Set no_new_privs and load ``program`` into this thread (and every later child)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")
