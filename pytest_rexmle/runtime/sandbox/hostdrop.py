"""Drop before exec: an image run's confinement is put in place by the harness, before bubblewrap executes
anything of the image (issue #38, item 1).

An image agent's sandbox launcher runs on the image's own ``python3`` (the image is the sandbox's system;
the host's interpreter would load the image's C library). That interpreter, or one ``.pth`` file in the
image's site-packages (``python3 -I`` still runs them), is hostile input: whatever the launcher would do
first is no protection. So, in the child that becomes bubblewrap, still on the host and in the harness's
own code, :func:`preexec` gives the run

* its own uid/gid and no supplementary groups (a root harness), so bubblewrap runs unprivileged and makes
  a user namespace mapping the run's uid to itself (``--unshare-user``): the sandbox holds no capability
  of the host's, and bubblewrap drops those of its namespace and sets ``no_new_privs`` before its exec;
* the run's rlimits, inherited by everything bubblewrap starts (a non-root harness too: a launcher that
  skips its ``setrlimit`` no longer escapes them);
* a parent-death signal, set after the uid switch (which clears it).

The seccomp filter is bubblewrap's ``--seccomp``, installed before its exec. The launcher still does the
same steps inside: for a genuine image they change nothing; for a hostile one their absence gains nothing.

An unprivileged bubblewrap opens every bind source as the run's uid, and a root harness's files (its image
store, the package, the stage) may lie under folders that uid cannot pass (``/root`` is 0700). The child
therefore first enters a mount namespace of its own, private to it, and binds each source under a fresh
0755 tmpfs (:class:`Bridge`); bubblewrap binds those. The bind's root is the source's own folder, so
the sandbox's ``/proc/self/mountinfo`` shows the same paths as before, and the host's mount table is
never touched.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .identity import Identity, become
from .limits import apply_rlimits

PR_SET_PDEATHSIG = 1
CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x1000, 0x4000, 0x40000
#: bubblewrap's own processes (its monitor and the namespace's init) count against RLIMIT_NPROC too
BWRAP_OWN_TASKS = 2


class HostDropError(OSError):
    """The run's confinement could not be set up before bubblewrap (a mount or a uid switch failed)."""


@dataclass
class Bridge:
    """A folder on the host (a mount point only inside the child's own mount namespace) under which each
    bind source appears as ``<folder>/<n>``, reachable by the run's uid."""
    folder: Path
    sources: list[Path] = field(default_factory=list)

    @classmethod
    def create(cls) -> Bridge:
        """An empty folder under the host's ``/tmp`` (sticky and world-traversable): the mount point."""
        base = "/tmp" if os.path.isdir("/tmp") else None
        return cls(Path(tempfile.mkdtemp(prefix="rexmle-binds-", dir=base)))

    def reach(self, source: str) -> str:
        """Where the run's uid finds ``source`` (for :func:`.bwrap.bwrap_args`): its number in the bridge."""
        self.sources.append(Path(source))
        return str(self.folder / str(len(self.sources) - 1))

    def plan(self) -> list[tuple[bytes, bytes, bool]]:
        """Each (source, its place, whether a folder), worked out in the harness before the fork."""
        return [(bytes(source), bytes(self.folder / str(number)), source.is_dir())
                for number, source in enumerate(self.sources)]

    def mount(self, libc: ctypes.CDLL, plan: list[tuple[bytes, bytes, bool]]) -> None:
        """In the child (root, before its uid switch): a private mount namespace, a tmpfs on the folder, each
        source bound at its place. System calls only (``libc`` and ``plan`` come from the parent: nothing is
        loaded or looked up after the fork)."""
        _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making / private")
        _check(libc.mount(b"tmpfs", bytes(self.folder), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755"),
               "a tmpfs for the bind sources")
        for source, target, is_dir in plan:
            if is_dir:
                os.mkdir(target, 0o755)
            else:
                os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            _check(libc.mount(source, target, None, MS_BIND | MS_REC, None), f"binding {source.decode()}")

    def remove(self) -> None:
        """The folder (empty on the host: its contents were only ever in the child's namespace)."""
        try:
            self.folder.rmdir()
        except OSError:
            pass


@dataclass(frozen=True)
class HostDrop:
    """What the child that becomes bubblewrap sets up before its exec. ``identity``: the run's uid to switch
    to (a root harness), or None to keep this user's; ``bridge``: the bind sources' reachable places."""
    identity: Identity | None
    rlimits: dict[int, int]
    parent: int
    bridge: Bridge | None = None

    def host_rlimits(self) -> dict[int, int]:
        """The run's rlimits, RLIMIT_NPROC raised by bubblewrap's own processes (the launcher, when it runs,
        sets the run's exact value)."""
        values = dict(self.rlimits)
        if resource.RLIMIT_NPROC in values:
            values[resource.RLIMIT_NPROC] += BWRAP_OWN_TASKS
        return values


def preexec(drop: HostDrop, join: Callable[[], None] | None = None) -> Callable[[], None]:
    """The child's last steps before it executes bubblewrap: the run's cgroups (``join``, while still
    privileged), the bridge's mounts, the uid switch, the rlimits, the parent-death signal. Everything it
    needs is prepared here, in the harness, so the child only makes system calls."""
    libc = ctypes.CDLL(None, use_errno=True)
    plan = drop.bridge.plan() if drop.bridge is not None else []
    rlimits = drop.host_rlimits()

    def steps() -> None:
        if join is not None:
            join()
        if drop.bridge is not None:
            drop.bridge.mount(libc, plan)
        if drop.identity is not None:
            become(drop.identity)
        apply_rlimits(rlimits)
        _check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
        if os.getppid() != drop.parent:  # the harness died before the signal was armed
            os._exit(137)

    def confine() -> None:
        try:
            steps()
        except (OSError, ValueError) as exc:  # subprocess reports only that the function failed: say why
            os.write(2, f"rexmle: the run's confinement failed before bubblewrap: {exc}\n".encode())
            raise

    return confine


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise HostDropError(errno, f"{what}: {os.strerror(errno)}")
