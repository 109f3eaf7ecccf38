"""Who the agent is: an unprivileged uid with no capabilities, whatever the harness runs as — never
silently root, and never an identity another run has.

* Harness not root: the agent keeps the user's own uid (it cannot become anyone else) and has no
  capabilities; under bubblewrap it is that uid inside a new user namespace. Under Landlock (no
  namespaces) that same uid could read the harness's own ``/proc/PID/environ``, venv, cache and runs
  folder, so the local runtime refuses it unless the user asks for it by name (see ``local.py``).
* Harness root: each run gets a uid of its own from ``--rexmle-agent-uids`` (:mod:`.uids`), gid the
  same number. The run's writable folders are handed to it with ``lchown`` (:func:`hand_over`) and
  given back to the harness's owner when the run ends, before anything reads them (:func:`hand_back`).
  Under bubblewrap we deliberately do *not* use ``--unshare-user`` as root: a user namespace created by
  host root maps the agent back to host uid 0, which owns most files, is exempt from RLIMIT_NPROC and
  reads root-only files in the view (``/etc/shadow``). A real host uid is stronger. (An image run's
  bubblewrap does make one, but started by the run's uid, which it maps to itself: see :mod:`.hostdrop`.)
* If the agent's command cannot run as that uid (an interpreter under a 0700 ``/root`` that Landlock
  has no mount namespace to expose), the session stops with a usage error naming the fix; the agent
  runs as uid 0 only when the user asks for it (``--rexmle-agent-as-root``), with an empty capability
  set (bounding set included) and locked securebits (``NOROOT``, ``NO_SETUID_FIXUP``, ``KEEP_CAPS``
  off, no ambient raise), ``socket(AF_UNIX)`` refused, and ``run.json`` saying ``"agent_as_root": true``.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
# securebits: NOROOT, NO_SETUID_FIXUP, KEEP_CAPS (off), NO_CAP_AMBIENT_RAISE, each with its lock bit
SECBIT_NOROOT, SECBIT_NOROOT_LOCKED = 1 << 0, 1 << 1
SECBIT_NO_SETUID_FIXUP, SECBIT_NO_SETUID_FIXUP_LOCKED = 1 << 2, 1 << 3
SECBIT_KEEP_CAPS_LOCKED = 1 << 5
SECBIT_NO_CAP_AMBIENT_RAISE, SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED = 1 << 6, 1 << 7


@dataclass(frozen=True)
class Identity:
    """The uid/gid the agent runs as on the host; ``reason`` says why it is root (an explicit option)."""
    uid: int
    gid: int
    reason: str | None = field(default=None, compare=False)

    @property
    def is_root(self) -> bool:
        return self.uid == 0


def harness_is_root() -> bool:
    return os.geteuid() == 0


def own_identity() -> Identity:
    return Identity(os.getuid(), os.getgid())


def become(identity: Identity) -> None:
    """Switch this process (a fresh child) to ``identity`` with no supplementary groups: for asking what
    that uid may do, or to start an image run's bubblewrap (:mod:`.hostdrop`); the agent itself gets
    :func:`drop_privileges`."""
    os.setgroups([])
    os.setresgid(identity.gid, identity.gid, identity.gid)
    os.setresuid(identity.uid, identity.uid, identity.uid)


def unreachable(identity: Identity, paths: Sequence[Path | str], enter: Sequence[Path | str] = ()
                ) -> list[Path | str]:
    """Those of ``paths`` that ``identity`` cannot read (folders: read and enter) and of ``enter`` that
    it cannot pass through (a 0711 stage needs no listing), asked of a forked child that switched to the
    uid, so every DAC rule and ACL on the way counts. Forked, not exec'd: the harness's interpreter may
    be exactly what the uid cannot reach."""
    wanted = [(p, os.R_OK) for p in paths] + [(p, os.X_OK) for p in enter]
    asked = [p for p, _ in wanted]
    if identity.uid == os.geteuid() or not asked:
        return []
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only system calls from here to _exit
        code = 1
        try:
            os.close(read)
            become(identity)
            blocked = [str(i) for i, (p, mode) in enumerate(wanted)
                       if not os.access(p, mode | (os.X_OK if os.path.isdir(p) else 0))]
            os.write(write, ",".join(blocked).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        answer = fh.read().decode()
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        return asked
    return [asked[int(i)] for i in answer.split(",") if i]


def hand_over(paths: list[Path], identity: Identity) -> None:
    """Give the run's writable folders (and what the harness put in them) to the agent's uid.
    ``lchown`` never follows a link, and the folders hold only what the harness wrote so far."""
    if not harness_is_root() or identity.uid == 0:
        return
    for top in paths:
        os.lchown(top, identity.uid, identity.gid)
        for root, dirs, files in os.walk(top):
            for name in dirs + files:
                try:
                    os.lchown(os.path.join(root, name), identity.uid, identity.gid)
                except FileNotFoundError:
                    continue


def hand_back(paths: list[Path], agent: Identity, owner: tuple[int, int]) -> None:
    """Give the run's folders back to the harness's owner once the agent is gone, before anything on
    the host reads them: the agent's uid (which a later run may get) keeps nothing of this run.

    Only entries the agent's uid or gid owns change hands (a hard link to a file of someone else's
    keeps its owner); ``find`` walks any depth without following a link, ``chown -h`` never follows one."""
    if not harness_is_root() or agent.uid == 0 or agent.uid == owner[0]:
        return
    tops = [str(p) for p in paths if os.path.lexists(p)]
    if not tops:
        return
    done = subprocess.run(["find", *tops, "-xdev", "(", "-uid", str(agent.uid), "-o", "-gid", str(agent.gid), ")",
                           "-exec", "chown", "-h", f"{owner[0]}:{owner[1]}", "{}", "+"],
                          capture_output=True, check=False, timeout=600)
    if done.returncode != 0:
        left = subprocess.run(["find", *tops, "-xdev", "-uid", str(agent.uid), "-print", "-quit"],
                              capture_output=True, text=True, check=False, timeout=600).stdout.strip()
        if left:
            raise PermissionError(f"the run's folders could not be given back from uid {agent.uid}: {left} "
                                  f"({done.stderr.decode(errors='replace').strip()[-300:]})")


def last_cap() -> int:
    try:
        return int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        return 63


def drop_privileges(identity: Identity) -> None:
    """In the child, before exec: no capability left or obtainable, running as ``identity``.

    Works from host root (dedicated uid, or uid 0 with locked securebits) and from an ordinary user
    (where most steps are no-ops because nothing is held)."""
    libc = ctypes.CDLL(None, use_errno=True)
    privileged = os.geteuid() == 0 or bool(_capabilities()["CapEff"] & (1 << 8))  # CAP_SETPCAP
    if privileged:
        for cap in range(last_cap() + 1):
            libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
        bits = (SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED
                | SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED)
        if libc.prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECUREBITS) failed")
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    if os.getuid() != identity.uid or os.getgid() != identity.gid or os.geteuid() == 0:
        os.setgroups([])
    os.setresgid(identity.gid, identity.gid, identity.gid)
    os.setresuid(identity.uid, identity.uid, identity.uid)
    _clear_capabilities(libc)
    if _capabilities()["CapEff"] or _capabilities()["CapPrm"]:
        raise PermissionError("capabilities survived the privilege drop")


def _capabilities() -> dict[str, int]:
    caps = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key.startswith("Cap"):
            caps[key] = int(value.strip(), 16)
    return caps


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _clear_capabilities(libc) -> None:
    """capset() with empty sets: uid 0 with NOROOT keeps its capabilities until told otherwise."""
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")
