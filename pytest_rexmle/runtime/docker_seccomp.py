"""The seccomp profile the Docker engine installs in every agent container (``--security-opt seccomp=<json>``).

Why the engine installs it: until now the project's filter was installed *inside* the container by the
image's own ``/bin/sh`` and ``python3``. The image is the agent's, hostile input: an image whose shell
skipped that step ran under the engine's default profile alone, and nothing said so (``socket(AF_VSOCK)``
and ``io_uring_setup`` worked). The engine applies this profile before the container's first process
(Docker's ``init``) starts, so nothing in the image runs unfiltered, and every process inherits it.

Why an allow-list with a refusing default, not ``defaultAction: SCMP_ACT_ALLOW`` plus a deny-list: the
project's filter (:mod:`.sandbox.seccomp`) answers ENOSYS to every syscall newer than the table it was
reviewed against, so a future mount-, namespace- or io_uring-like call cannot pass unexamined. A JSON
profile names syscalls and has no "number above N" test; a deny-list on ALLOW would let every such call
through. So the default here answers ENOSYS (as an older kernel does; glibc, CPython, PyTorch and CUDA
fall back on it by design), and the allowed names are not hand-picked: they are :data:`KNOWN_SYSCALLS`
(the kernel's x86_64/arm64 tables up to :data:`~.sandbox.seccomp.LAST_KNOWN`) minus what is refused.
What an agent may call is thus what the bubblewrap/Landlock filter lets through, minus what Docker's
own default profile refuses to a container without capabilities (as every agent container is).

Refused as the project's filter refuses them (:mod:`.sandbox.seccomp`'s docstring says what and why):
:data:`~.sandbox.seccomp.DENIED` with EPERM, except tracing (:data:`~.sandbox.seccomp.CONTAINED_CALLS`: the
container's PID namespace holds only the agent's own processes, and R&D-Agent runs its code under ``strace``),
plus :data:`DOCKER_REFUSED`; ``clone3`` and ``openat2`` with ENOSYS; ``clone`` with a namespace flag,
``socket``/``socketpair`` of ``AF_VSOCK`` or ``AF_ALG``, and a setuid/setgid mode bit by their arguments.
``personality`` takes only the values Docker's default allows.

How the argument rules are written, and why: each rule compares one argument once — runc turns several
comparisons of one argument into separate rules, which it ORs, so ``family > 40 and family < 64`` would
allow every family. The kernel reads ``socket``'s family as an ``int`` (the high 32 bits of the register
are dropped), so a refusal matches the low 32 bits only (``(arg & 0xffffffff) == 40``) and an allowance
is a set of aligned blocks that also require the high bits to be zero: ``socket(0x1_00000028)`` is
refused, where Docker's own ``family != 40`` lets it reach ``AF_VSOCK``. Allow and refuse rules never
overlap, so no precedence between actions is relied on.

Only native 64-bit ABIs are listed (x86_64, arm64): a syscall through another ABI (i386 ``int 0x80``,
x32) meets the engine's bad-architecture action — runc kills the process with SIGSYS (measured for x32;
Docker's default lists x86 and x32 as sub-architectures and lets them through) — as the project's filter does.
"""

from __future__ import annotations

import errno
import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

from ..jsonfile import write_text_atomic
from .sandbox.seccomp import (
    ALWAYS_REFUSED_FAMILIES,
    CLONE_NAMESPACE_FLAGS,
    CONTAINED_CALLS,
    DENIED,
    ENOSYS_CALLS,
    MODE_ARGS,
    SETID_BITS,
)

#: this profile's name and version, recorded in run.json next to its digest
PROFILE_NAME = "rexmle-docker/1"
#: every syscall of the x86_64 table (asm/unistd_64.h, Linux 6.1) and those added up to ``LAST_KNOWN``
#: (mseal, 6.10); arm64's 64-bit names are a subset. A name the engine's libseccomp does not know is skipped
#: by runc, so that call answers the default (ENOSYS), never "allowed".
KNOWN_SYSCALLS = tuple("""
read write open close stat fstat lstat poll lseek mmap mprotect munmap brk rt_sigaction rt_sigprocmask
rt_sigreturn ioctl pread64 pwrite64 readv writev access pipe select sched_yield mremap msync mincore madvise
shmget shmat shmctl dup dup2 pause nanosleep getitimer alarm setitimer getpid sendfile socket connect accept
sendto recvfrom sendmsg recvmsg shutdown bind listen getsockname getpeername socketpair setsockopt getsockopt
clone fork vfork execve exit wait4 kill uname semget semop semctl shmdt msgget msgsnd msgrcv msgctl fcntl
flock fsync fdatasync truncate ftruncate getdents getcwd chdir fchdir rename mkdir rmdir creat link unlink
symlink readlink chmod fchmod chown fchown lchown umask gettimeofday getrlimit getrusage sysinfo times ptrace
getuid syslog getgid setuid setgid geteuid getegid setpgid getppid getpgrp setsid setreuid setregid getgroups
setgroups setresuid getresuid setresgid getresgid getpgid setfsuid setfsgid getsid capget capset rt_sigpending
rt_sigtimedwait rt_sigqueueinfo rt_sigsuspend sigaltstack utime mknod uselib personality ustat statfs fstatfs
sysfs getpriority setpriority sched_setparam sched_getparam sched_setscheduler sched_getscheduler
sched_get_priority_max sched_get_priority_min sched_rr_get_interval mlock munlock mlockall munlockall vhangup
modify_ldt pivot_root _sysctl prctl arch_prctl adjtimex setrlimit chroot sync acct settimeofday mount umount2
swapon swapoff reboot sethostname setdomainname iopl ioperm create_module init_module delete_module
get_kernel_syms query_module quotactl nfsservctl getpmsg putpmsg afs_syscall tuxcall security gettid readahead
setxattr lsetxattr fsetxattr getxattr lgetxattr fgetxattr listxattr llistxattr flistxattr removexattr
lremovexattr fremovexattr tkill time futex sched_setaffinity sched_getaffinity set_thread_area io_setup
io_destroy io_getevents io_submit io_cancel get_thread_area lookup_dcookie epoll_create epoll_ctl_old
epoll_wait_old remap_file_pages getdents64 set_tid_address restart_syscall semtimedop fadvise64 timer_create
timer_settime timer_gettime timer_getoverrun timer_delete clock_settime clock_gettime clock_getres
clock_nanosleep exit_group epoll_wait epoll_ctl tgkill utimes vserver mbind set_mempolicy get_mempolicy
mq_open mq_unlink mq_timedsend mq_timedreceive mq_notify mq_getsetattr kexec_load waitid add_key request_key
keyctl ioprio_set ioprio_get inotify_init inotify_add_watch inotify_rm_watch migrate_pages openat mkdirat
mknodat fchownat futimesat newfstatat unlinkat renameat linkat symlinkat readlinkat fchmodat faccessat
pselect6 ppoll unshare set_robust_list get_robust_list splice tee sync_file_range vmsplice move_pages
utimensat epoll_pwait signalfd timerfd_create eventfd fallocate timerfd_settime timerfd_gettime accept4
signalfd4 eventfd2 epoll_create1 dup3 pipe2 inotify_init1 preadv pwritev rt_tgsigqueueinfo perf_event_open
recvmmsg fanotify_init fanotify_mark prlimit64 name_to_handle_at open_by_handle_at clock_adjtime syncfs
sendmmsg setns getcpu process_vm_readv process_vm_writev kcmp finit_module sched_setattr sched_getattr
renameat2 seccomp getrandom memfd_create kexec_file_load bpf execveat userfaultfd membarrier mlock2
copy_file_range preadv2 pwritev2 pkey_mprotect pkey_alloc pkey_free statx io_pgetevents rseq pidfd_send_signal
io_uring_setup io_uring_enter io_uring_register open_tree move_mount fsopen fsconfig fsmount fspick pidfd_open
clone3 close_range openat2 pidfd_getfd faccessat2 process_madvise epoll_pwait2 mount_setattr quotactl_fd
landlock_create_ruleset landlock_add_rule landlock_restrict_self memfd_secret process_mrelease futex_waitv
set_mempolicy_home_node
uretprobe cachestat fchmodat2 map_shadow_stack futex_wake futex_wait futex_requeue statmount listmount
lsm_get_self_attr lsm_set_self_attr lsm_list_modules mseal
""".split())
#: what Docker's default profile refuses to a container without capabilities that the project's table does
#: not already refuse: obsolete or never-implemented calls, NUMA placement (CAP_SYS_NICE), ``fanotify_init``
#: and ``quotactl_fd`` (CAP_SYS_ADMIN), ``process_madvise`` (CAP_SYS_PTRACE)
DOCKER_REFUSED = ("uselib", "ustat", "sysfs", "_sysctl", "create_module", "get_kernel_syms", "query_module",
                  "nfsservctl", "getpmsg", "putpmsg", "afs_syscall", "tuxcall", "security", "vserver",
                  "lookup_dcookie", "mbind", "set_mempolicy", "get_mempolicy", "set_mempolicy_home_node",
                  "migrate_pages", "move_pages", "fanotify_init", "quotactl_fd", "process_madvise")
#: the ``personality`` values Docker's default allows (Linux, 32-bit, UNAME26 and both, and the query)
PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
#: socket families above this are not examined one by one: they answer the default (the kernel has 46)
FAMILY_LIMIT = 64
ARCHITECTURES = ("SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64")
_ALL_BITS = (1 << 64) - 1
_LOW_BITS = (1 << 32) - 1


def _errno(names: list[str] | tuple[str, ...], code: int, args: list[dict] | None = None) -> dict[str, Any]:
    rule: dict[str, Any] = {"names": sorted(names), "action": "SCMP_ACT_ERRNO", "errnoRet": code}
    if args:
        rule["args"] = args
    return rule


def _allow(names: list[str] | tuple[str, ...], args: list[dict] | None = None) -> dict[str, Any]:
    rule: dict[str, Any] = {"names": sorted(names), "action": "SCMP_ACT_ALLOW"}
    if args:
        rule["args"] = args
    return rule


def _masked(index: int, mask: int, value: int) -> list[dict]:
    """``(arg & mask) == value``: Docker's ``value`` is libseccomp's mask, ``valueTwo`` the datum."""
    return [{"index": index, "value": mask, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ"}]


def _blocks(allowed: set[int], limit: int) -> list[tuple[int, int]]:
    """``allowed`` (a subset of ``range(limit)``) as aligned power-of-two blocks ``(start, size)``: each is one
    masked comparison, so a set with holes needs no second comparison of the same argument."""
    out, start = [], 0
    while start < limit:
        if start not in allowed:
            start += 1
            continue
        size = 1
        while (start % (size * 2) == 0 and start + size * 2 <= limit
               and all(v in allowed for v in range(start, start + size * 2))):
            size *= 2
        out.append((start, size))
        start += size
    return out


def _family_rules(name: str, refused: tuple[int, ...]) -> list[dict[str, Any]]:
    """``socket``/``socketpair``: the refused families (low 32 bits, as the kernel reads an ``int``) answer
    EAFNOSUPPORT; every other family below :data:`FAMILY_LIMIT` with clean high bits is allowed."""
    rules = [_errno([name], errno.EAFNOSUPPORT, _masked(0, _LOW_BITS, family)) for family in refused]
    allowed = set(range(FAMILY_LIMIT)) - set(refused)
    rules += [_allow([name], _masked(0, _ALL_BITS & ~(size - 1), start)) for start, size in _blocks(allowed, FAMILY_LIMIT)]
    return rules


def _clone_rules() -> list[dict[str, Any]]:
    """``clone`` without a namespace flag is allowed; with any one of them, EPERM (one rule per flag)."""
    rules = [_allow(["clone"], _masked(0, CLONE_NAMESPACE_FLAGS, 0))]
    bits = [1 << i for i in range(32) if CLONE_NAMESPACE_FLAGS & (1 << i)]
    return rules + [_errno(["clone"], errno.EPERM, _masked(0, bit, bit)) for bit in bits]


def _mode_rules() -> list[dict[str, Any]]:
    """A mode without setuid/setgid bits is allowed; either bit is EPERM (as the project's filter)."""
    rules = []
    for name, (_numbers, index) in sorted(MODE_ARGS.items()):
        rules.append(_allow([name], _masked(index, SETID_BITS, 0)))
        for bit in (0o4000, 0o2000):
            rules.append(_errno([name], errno.EPERM, _masked(index, bit, bit)))
    return rules


def refused_names() -> set[str]:
    """Every syscall refused by name (EPERM)."""
    project = {name for name in DENIED if name not in CONTAINED_CALLS}
    return project | set(DOCKER_REFUSED)


def profile() -> dict[str, Any]:
    """The profile as a JSON-ready document (Docker's seccomp profile format)."""
    refused = refused_names()
    checked = {"clone", "socket", "socketpair", "personality", *MODE_ARGS}
    allowed = [name for name in KNOWN_SYSCALLS if name not in refused and name not in checked
               and name not in ENOSYS_CALLS]
    rules = [_allow(allowed), _errno(sorted(refused), errno.EPERM), _errno(sorted(ENOSYS_CALLS), errno.ENOSYS)]
    rules += _clone_rules()
    rules += _family_rules("socket", ALWAYS_REFUSED_FAMILIES)
    rules += _family_rules("socketpair", ALWAYS_REFUSED_FAMILIES)
    rules += _mode_rules()
    rules += [_allow(["personality"], [{"index": 0, "value": value, "op": "SCMP_CMP_EQ"}]) for value in PERSONALITIES]
    return {"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": errno.ENOSYS,
            "architectures": list(ARCHITECTURES), "syscalls": rules}


@cache
def profile_json() -> str:
    """The profile as the engine receives it: compact, keys sorted, so its digest is stable."""
    return json.dumps(profile(), sort_keys=True, separators=(",", ":"))


def digest() -> str:
    """``sha256:<hex>`` of :func:`profile_json`, recorded in run.json: which profile a run had."""
    return "sha256:" + hashlib.sha256(profile_json().encode()).hexdigest()


def security_opt() -> str:
    """The ``security_opt`` entry that makes the engine install the profile."""
    return "seccomp=" + profile_json()


def profile_file(folder: Path) -> Path:
    """The profile written once to ``folder/<digest>.json`` (0644): Podman's Docker-compatible service reads
    ``seccomp=`` as a path on its own host, where Docker's API takes the JSON itself."""
    path = folder / f"rexmle-seccomp-{digest().split(':', 1)[1][:16]}.json"
    if not path.is_file() or path.read_text() != profile_json():
        write_text_atomic(path, profile_json(), 0o644)
    return path


def file_security_opt(folder: Path) -> str:
    return f"seccomp={profile_file(folder)}"
