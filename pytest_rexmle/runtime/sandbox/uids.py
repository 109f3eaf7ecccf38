"""One host uid per run: no two runs, of one session or of concurrent ones, ever share an identity.

Why: a uid is what the kernel checks for every file, signal and ``/proc`` entry. Runs that share one
(``nobody`` for everybody) can read and overwrite each other's stages and submissions, signal each
other's processes and share one ``RLIMIT_NPROC`` budget. So a root harness gives each run its own uid
from a configurable range (``--rexmle-agent-uids=START-END``).

Allocation: a lock file per uid under a root-owned folder (``/run/rexmle/uids``, 0700; ``REXMLE_UID_LOCK_DIR``
moves it), taken with ``flock`` so that concurrent sessions and xdist workers on this host never hand
out the same uid; the kernel drops a lock when its holder dies, so a ``kill -9``ed session frees its
uids. Every process of a run's uid is killed when the run ends (:func:`kill_all_of`), a backstop behind
the sandbox's own clean-up.

Harnesses in different containers on one kernel share the uid space but not the lock folder (nor,
from inside a container, the view of each other's processes). So uids are tried in a random order
from a wide range, and a uid that already has processes is skipped, never cleaned: they may be
another container's running agent, which this harness must not kill (a dead session's leftovers are
already ended by the sandbox: bubblewrap's ``--die-with-parent``, the Landlock supervisor's
parent-death signal, Docker's ``timeout``).
"""

from __future__ import annotations

import fcntl
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

#: far above any distribution's allocations (system users, regular users, subordinate-uid ranges); wide,
#: so that harnesses in separate containers on one kernel, picking at random, practically never meet
DEFAULT_RANGE = "2000000000-2000065535"
LOCK_DIR_ENV = "REXMLE_UID_LOCK_DIR"
DEFAULT_LOCK_DIR = Path("/run/rexmle/uids")


class UidRangeError(ValueError):
    """A malformed or unusable ``--rexmle-agent-uids`` value."""


@dataclass(frozen=True)
class UidRange:
    start: int
    end: int  # inclusive

    @classmethod
    def parse(cls, text: str | None) -> UidRange:
        text = (text or DEFAULT_RANGE).strip()
        first, sep, last = text.partition("-")
        try:
            start, end = int(first), int(last if sep else first)
        except ValueError:
            raise UidRangeError(f"expected START-END (e.g. {DEFAULT_RANGE}), got {text!r}") from None
        if start <= 0 or end < start or end >= 2**32 - 1:
            raise UidRangeError(f"the range {text!r} must be ascending, above 0 and below 4294967295 (uid 0 is "
                                "root, whom agents never share)")
        if start <= 65534 <= end:
            raise UidRangeError(f"the range {text!r} contains 65534 (nobody), which other programs use")
        return cls(start, end)

    def __len__(self) -> int:
        return self.end - self.start + 1


@dataclass
class Lease:
    """A uid held for one run; :meth:`release` (or the holder's death) gives it back."""

    uid: int
    fd: int

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing drops the flock
            self.fd = -1


def lock_dir() -> Path:
    """The root-owned folder of uid locks, created 0700 on first use and refused if anyone else owns it."""
    folder = Path(os.environ.get(LOCK_DIR_ENV) or DEFAULT_LOCK_DIR)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = folder.lstat()
    if st.st_uid != os.geteuid() or st.st_mode & 0o077 or not folder.is_dir() or folder.is_symlink():
        raise UidRangeError(f"{folder} must be a folder of this user's, mode 0700 (it holds the agent uid locks)")
    return folder


def allocate(uids: UidRange, folder: Path | None = None) -> Lease:
    """A uid of ``uids`` no other run holds, locked until released. Tried in a random order; a uid that
    has processes (another container's run on this kernel, or leftovers) is skipped, not cleaned.
    Raises :class:`UidRangeError` when every uid is taken (more concurrent runs than the range holds)."""
    folder = folder or lock_dir()
    first = random.SystemRandom().randrange(len(uids))  # a random start, then around the range once
    busy = 0
    for offset in range(len(uids)):
        uid = uids.start + (first + offset) % len(uids)
        fd = os.open(folder / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if processes_of(uid):
            busy += 1
            os.close(fd)
            continue
        return Lease(uid, fd)
    extra = f" ({busy} of them by processes this harness did not start)" if busy else ""
    raise UidRangeError(f"all {len(uids)} agent uids of {uids.start}-{uids.end} are in use by concurrent runs{extra}; "
                        "widen --rexmle-agent-uids")


def processes_of(uid: int) -> list[int]:
    """Every process with ``uid`` among its real, effective, saved or filesystem uids. From
    ``/proc/PID/status``, not the directory's owner: a process that made itself non-dumpable shows a
    root-owned directory."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as fh:
                status = fh.read(4096)
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith(b"State:") and b"Z" in line.split()[1:2]:
                break  # a zombie holds nothing and cannot be killed again: its parent reaps it
            if line.startswith(b"Uid:"):
                if str(uid).encode() in line.split()[1:]:
                    found.append(int(entry.name))
                break
    return found


def kill_all_of(uid: int, deadline: float = 5.0) -> int:
    """SIGKILL every process of ``uid`` until none is left. Never for the harness's own uid or root.
    Returns how many were killed."""
    if uid in (0, os.geteuid(), os.getuid()):
        return 0
    return kill_until_gone(lambda: processes_of(uid), deadline)


def kill_until_gone(find: Callable[[], list[int]], deadline: float,
                    reap: Callable[[], None] = lambda: None) -> int:
    """SIGKILL the processes ``find()`` names, pass after pass (a forking tree is caught within passes),
    until it names none or ``deadline`` seconds passed; ``reap`` after each pass. How many were killed."""
    killed: set[int] = set()
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        victims = find()
        if not victims:
            break
        for pid in victims:
            with suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        reap()
        time.sleep(0.01)
    return len(killed)


def cancel_jobs_of(uid: int, timeout: float = 20.0) -> list[str]:
    """Cancel every Slurm job of ``uid`` (a run's own uid: nothing else ever owns one), returning their ids.

    Submitting from inside a run is refused at the socket (no unix socket reaches munge), so this finds
    nothing unless that protection failed: a backstop, whose finding the run records. Quiet where Slurm's
    client tools are absent or the controller does not answer."""
    import shutil  # start-up: keeps its imports out of the sandbox launcher

    if uid in (0, os.geteuid(), os.getuid()) or shutil.which("squeue") is None or shutil.which("scancel") is None:
        return []
    try:
        listed = subprocess.run(["squeue", "-h", "-u", str(uid), "-o", "%i"], capture_output=True, text=True,
                                timeout=timeout)
        jobs = [j for j in listed.stdout.split() if j.strip()] if listed.returncode == 0 else []
        if jobs:
            subprocess.run(["scancel", *jobs], capture_output=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return jobs
