"""Resource limits of one local run: memory, processes, file size, disk of the run folders, /tmp size.

Where the harness can create a cgroup v2 group with the ``memory`` and ``pids`` controllers enabled,
those limits are the group's ``memory.max`` / ``pids.max`` and the group's ``cgroup.kill`` ends every
process of the run at once; on a hybrid host (v2 without those controllers) a root harness uses the v1
``memory``/``pids`` hierarchies instead. Elsewhere (no writable cgroup) they are rlimits set in the agent's first process and inherited by its children:
``RLIMIT_DATA`` (private writable memory, per process — an address-space limit would break CUDA's
huge reservations), ``RLIMIT_NPROC`` (per uid, so it is exact for the dedicated uid and counts the
user's other processes otherwise; uid 0 is exempt from it), ``RLIMIT_FSIZE`` (largest file). Disk:
the harness measures the workspace, submission and private /tmp while it waits and kills the run
past the limit (``disk`` for workspace+submission, ``tmp`` for the /tmp folder).
"""

from __future__ import annotations

import os
import resource
import signal
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from ...limits import Limits

#: exit status of a process killed by SIGXFSZ (the file-size limit), which rlimits report no other way
SIGXFSZ_EXIT = 128 + signal.SIGXFSZ

# -- rlimits (applied in the agent's first process, before exec) ------------------------------------
def rlimits_for(limits: Limits, uid: int, cgroup_has: frozenset[str]) -> dict[int, int]:
    """The rlimits to set; those a cgroup enforces better are left out."""
    out: dict[int, int] = {}
    if limits.memory is not None and "memory" not in cgroup_has:
        out[resource.RLIMIT_DATA] = limits.memory
    if limits.processes is not None and "pids" not in cgroup_has:
        out[resource.RLIMIT_NPROC] = limits.processes + _processes_of(uid)
    if limits.file_size is not None:
        out[resource.RLIMIT_FSIZE] = limits.file_size
    if limits.open_files is not None:
        out[resource.RLIMIT_NOFILE] = limits.open_files
    out[resource.RLIMIT_CORE] = 0  # a core dump is a file the size of the process, outside FSIZE's reach
    return out


def apply_rlimits(values: dict[int, int]) -> None:
    for which, value in values.items():
        soft, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))


def _processes_of(uid: int) -> int:
    """How many tasks (threads count for RLIMIT_NPROC) ``uid`` already has; they share its budget."""
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry.name}/task"))
            except OSError:
                continue
    return count


# -- cgroup v2 --------------------------------------------------------------------------------------
def cgroup_v2_root() -> Path | None:
    """A writable cgroup v2 hierarchy (pure v2 at /sys/fs/cgroup, or the hybrid /sys/fs/cgroup/unified)."""
    for candidate in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if (candidate / "cgroup.procs").exists() and (candidate / "cgroup.controllers").exists() \
                and os.access(candidate, os.W_OK):
            return candidate
    return None


class RunCgroup:
    """One run's cgroup: limits where the controllers exist, and ``cgroup.kill`` for the whole tree.

    The v2 group is the run's handle (``cgroup.kill``); on a hybrid host whose v2 part has no
    ``memory``/``pids`` controller, a root harness also uses the v1 ``memory`` and ``pids``
    hierarchies when it can create groups there (``legacy``), so the totals are still enforced.
    """

    def __init__(self, path: Path, controllers: frozenset[str], legacy: dict[str, Path] | None = None) -> None:
        self.path = path
        self.controllers = controllers
        self.legacy = dict(legacy or {})

    @classmethod
    def create(cls, name: str, limits: Limits) -> RunCgroup | None:
        root = cgroup_v2_root()
        if root is None:
            return None
        parent = _own_cgroup(root)
        if parent is None:
            return None
        wanted = _delegate(parent, {"memory", "pids"})
        path = parent / name
        try:
            path.mkdir()
        except OSError:
            return None
        enabled = set(c for c in wanted if (path / f"{c}.max").exists())
        if not (path / "cgroup.kill").exists():
            cls(path, frozenset()).remove()
            return None
        if "memory" in enabled and limits.memory is not None:
            (path / "memory.max").write_text(str(limits.memory))
            if (path / "memory.swap.max").exists():
                (path / "memory.swap.max").write_text("0")
        if "pids" in enabled and limits.processes is not None:
            (path / "pids.max").write_text(str(limits.processes))
        legacy = _legacy_groups(name, {"memory", "pids"} - enabled, limits)
        return cls(path, frozenset(enabled | set(legacy)), legacy)

    def joiner(self) -> Callable[[], None]:
        """A preexec function putting the child (bwrap or the launcher) into the run's groups before its exec;
        the paths are worked out here, so the child only writes."""
        paths = [str(folder / "cgroup.procs") for folder in (self.path, *self.legacy.values())]

        def join() -> None:
            for path in paths:
                with open(path, "w") as fh:
                    fh.write("0")

        return join

    def _event(self, file: str, key: str) -> bool:
        for folder in (self.path, *self.legacy.values()):
            try:
                for line in (folder / file).read_text().splitlines():
                    name, _, value = line.partition(" ")
                    if name == key and int(value) > 0:
                        return True
            except (OSError, ValueError):
                continue
        return False

    def oom_killed(self) -> bool:
        return self._event("memory.events", "oom_kill") or self._event("memory.oom_control", "oom_kill")

    def pids_refused(self) -> bool:
        return self._event("pids.events", "max")

    def kill(self) -> None:
        with suppress(OSError):
            (self.path / "cgroup.kill").write_text("1")

    def remove(self) -> None:
        _rmdir(self.path, busy=self.kill)
        for folder in self.legacy.values():
            _rmdir(folder)


def _delegate(parent: Path, wanted: set[str]) -> set[str]:
    """Those of ``wanted`` that ``parent`` has and could enable for its children (v2 refuses when the
    parent itself holds processes)."""
    controllers = parent / "cgroup.controllers"
    available = set(controllers.read_text().split()) if controllers.exists() else set()
    wanted = available & wanted
    if wanted:
        try:
            (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in sorted(wanted)))
        except OSError:
            return set()
    return wanted


def _legacy_groups(name: str, controllers: set[str], limits: Limits) -> dict[str, Path]:
    """A v1 group per controller that v2 could not give, holding its limit; none where it cannot be set."""
    legacy = {}
    for controller in controllers:
        folder = _legacy_group(controller, name)
        if folder is None:
            continue
        try:
            if controller == "pids" and limits.processes is not None:
                (folder / "pids.max").write_text(str(limits.processes))
            elif controller == "memory" and limits.memory is not None:
                (folder / "memory.limit_in_bytes").write_text(str(limits.memory))
                if (folder / "memory.memsw.limit_in_bytes").exists():
                    (folder / "memory.memsw.limit_in_bytes").write_text(str(limits.memory))
        except OSError:
            _rmdir(folder)
            continue
        legacy[controller] = folder
    return legacy


def _rmdir(folder: Path, busy: Callable[[], None] = lambda: None) -> None:
    """Remove an empty cgroup, retrying (after ``busy()``) while its last processes are still exiting."""
    for _ in range(50):
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            busy()
            time.sleep(0.05)


def _own_groups() -> dict[str, str]:
    """This process's cgroups from ``/proc/self/cgroup``: each v1 controller's, and the v2 one under ""."""
    groups: dict[str, str] = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            hierarchy, controllers, relative = line.split(":", 2)
            for controller in [""] if hierarchy == "0" else controllers.split(","):
                groups.setdefault(controller, relative.lstrip("/"))
    except (OSError, ValueError):
        pass
    return groups


def _legacy_group(controller: str, name: str) -> Path | None:
    """A new v1 group for ``controller`` below this process's own (root only, where v1 is mounted)."""
    mount = Path("/sys/fs/cgroup") / controller
    if os.geteuid() != 0 or not (mount / "cgroup.procs").exists() or (mount / "cgroup.controllers").exists():
        return None
    relative = _own_groups().get(controller)
    if relative is None:
        return None
    try:
        (mount / relative / name).mkdir()
    except OSError:
        return None
    return mount / relative / name


def _own_cgroup(root: Path) -> Path | None:
    relative = _own_groups().get("")
    if relative is None:
        return None
    path = root / relative
    return path if os.access(path, os.W_OK) else None


# -- disk -------------------------------------------------------------------------------------------
def disk_usage(top: Path, budget: int = 200_000) -> int:
    """Bytes allocated under ``top`` (st_blocks, so sparse files count what they use), not following
    links; stops counting after ``budget`` entries (a million tiny files still show up as usage)."""
    total, seen = 0, 0
    stack = [str(top)]
    while stack and seen < budget:
        path = stack.pop()
        try:
            with os.scandir(path) as entries:
                for entry in entries:
                    seen += 1
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return total


def sweep_cgroups() -> int:
    """Remove the run cgroups of dead sessions (``rexmle-<harness pid>-...`` whose harness is gone),
    killing whatever still runs in them; returns how many were removed."""
    parents: list[Path] = []
    root = cgroup_v2_root()
    own = _own_cgroup(root) if root is not None else None
    if own is not None:
        parents.append(own)
    mine = _own_groups()
    parents += [Path("/sys/fs/cgroup") / c / mine[c] for c in ("memory", "pids") if c in mine]
    removed = 0
    for parent in parents:
        try:
            groups = [p for p in parent.iterdir() if p.is_dir() and p.name.startswith("rexmle-")]
        except OSError:
            continue
        for group in groups:
            try:
                owner = int(group.name.split("-")[1])
            except (IndexError, ValueError):
                continue
            if Path(f"/proc/{owner}").exists():
                continue
            with suppress(OSError):
                if (group / "cgroup.kill").exists():
                    (group / "cgroup.kill").write_text("1")
                for pid in (group / "cgroup.procs").read_text().split():
                    with suppress(OSError):
                        os.kill(int(pid), signal.SIGKILL)
            _rmdir(group)
            removed += not group.exists()
    return removed
