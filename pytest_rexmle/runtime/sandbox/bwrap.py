"""The bubblewrap view: a fresh root with only what the agent needs, and its arguments kept off argv.

Every bubblewrap option is written NUL-separated to a memory file read with ``--args FD``, so the host
paths of the data root, cache and runs folder never appear in any process's command line. What still
names host paths inside the sandbox is ``/proc/self/mountinfo``: the kernel prints each bind mount's
source *within its filesystem* and the mount points of the empty tmpfs laid over hidden folders. No
bubblewrap option changes that, so the run's folders are bound from its neutral stage
(``/var/tmp/rexmle-XXXX/workspace  /rexmle/workspace``, see ``runtime/staging.py``); the Python
installation's folders show under their own names. The private folders are not mounted at all.
"""

from __future__ import annotations

import os
import site
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..base import is_under
from .gpu_devices import gpu_nodes

if TYPE_CHECKING:
    from ..policy import SandboxPolicy

SYSTEM_DIRS = ("/usr", "/etc", "/opt")
MERGED_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: the run's /dev/shm when its limits name none (what Docker gives a container with the runtime's defaults)
DEFAULT_SHM = 4 << 30
NO_NETWORK = ["--unshare-net"]  # a namespace of its own with only a loopback: nothing outside is reachable
#: inside an image: where the harness's package shows (the launcher runs on the image's own Python) and where
#: the host driver's user-space libraries are bound for a GPU run (as the NVIDIA container toolkit does)
HARNESS_INSIDE = "/.rexmle-harness"
DRIVER_INSIDE = "/.rexmle-driver"
#: an image's top-level folders the sandbox makes itself
IMAGE_OWN_TOP = frozenset({"proc", "dev", "sys", "tmp", "rexmle", HARNESS_INSIDE[1:], DRIVER_INSIDE[1:]})


def _exists(path: Path) -> bool:
    """Exists and is reachable by this user (a HOME under a 0700 folder is neither)."""
    try:
        return path.exists()
    except OSError:
        return False


def python_roots() -> list[Path]:
    """Folders the launcher's Python (the harness's, which bubblewrap must show for the launcher to
    start in the sandbox before it executes the agent) needs, outermost first."""
    candidates = [Path(sys.base_prefix), Path(sys.prefix), Path(sys.exec_prefix), *map(Path, site.getsitepackages())]
    user_site = site.getusersitepackages()
    if user_site:
        candidates.append(Path(user_site))
    candidates.append(Path(__file__).resolve().parents[2])
    roots: list[Path] = []
    for path in sorted({c.resolve() for c in candidates if _exists(c)}, key=lambda p: len(p.parts)):
        if not any(is_under(path, r) for r in roots) and not any(is_under(path, Path(s)) for s in SYSTEM_DIRS):
            roots.append(path)
    return roots


@dataclass(frozen=True)
class ImageView:
    """An unpacked image the agent runs in: its root folder replaces the host's system folders, the
    harness's package is bound at :data:`HARNESS_INSIDE`, and a GPU run gets ``driver_libs`` (host path,
    name inside :data:`DRIVER_INSIDE`)."""

    rootfs: Path
    package: Path
    driver_libs: tuple[tuple[Path, str], ...] = ()


@dataclass(frozen=True)
class Bind:
    source: Path
    target: str
    writable: bool = False


def bwrap_args(*, python_roots: list[Path], binds: list[Bind], tmp: Path, hidden: tuple[Path, ...],
               env: dict[str, str], gpus: tuple[str, ...], network: list[str], user_namespace: bool,
               seccomp_fd: int | None, image: ImageView | None = None, shm_size: int | None = None,
               reach: Callable[[str], str] | None = None) -> list[str]:
    """bubblewrap's options, for ``bwrap --args FD -- COMMAND`` (bubblewrap reads the command itself only
    from its real argv, so the command — the launcher, which names no run path — stays there).

    ``network``: nothing for the host's network, :data:`NO_NETWORK`, or the bridge's options
    (:meth:`.slirp.SlirpNetwork.bwrap_args`, which lay a file over ``/etc`` and so go after it).
    ``reach``: where bubblewrap finds each bind source's folder or file (an unprivileged bubblewrap, started
    as the run's uid, binds them from :class:`.hostdrop.Bridge`); by default their own paths."""
    src = reach or str
    args = ["--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--hostname", "rexmle-agent", "--clearenv"]
    if user_namespace:
        args += ["--unshare-user"]
    # fresh /proc (its sys/ read-only), /dev, and the run's private /tmp on disk
    args += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev", "--bind", src(str(tmp)), "/tmp"]
    # POSIX shared memory and semaphores (Python's multiprocessing, PyTorch's DataLoader) need a /dev/shm the
    # agent's uid can write; bubblewrap's own is root's 0755 folder. Its pages count against the run's memory.
    args += ["--perms", "01777", "--size", str(shm_size or DEFAULT_SHM), "--tmpfs", "/dev/shm"]
    bound: list[Path] = []
    if image is not None:
        args += _image_args(image, tmp, src)
    else:
        args += ["--dir", "/var", "--symlink", "../tmp", "/var/tmp"]
        for d in SYSTEM_DIRS:
            if os.path.isdir(d):
                args += ["--ro-bind", src(d), d]
                bound.append(Path(d))
        for d in MERGED_DIRS:
            if os.path.islink(d):
                args += ["--symlink", os.readlink(d), d]
            elif os.path.isdir(d):
                args += ["--ro-bind", src(d), d]
        made: set[str] = set()
        for root in python_roots:
            args += _parents(root, made)  # bubblewrap would make them 0700, unreachable for the agent's uid
            args += ["--ro-bind", src(str(root)), str(root)]
            bound.append(root)
    for path in hidden:
        if path.exists() and any(is_under(path, b) for b in bound):
            args += ["--tmpfs", str(path.resolve())]
    for source, target in gpu_nodes(gpus).binds():  # the run's GPUs and the driver's control nodes only
        args += ["--dev-bind-try", source, target]
    args += ["--dir", "/rexmle"]
    for bind in binds:
        args += ["--bind" if bind.writable else "--ro-bind", src(str(bind.source)), bind.target]
    args += network
    args += ["--remount-ro", "/", "--chdir", "/"]  # the launcher changes to the agent's folder
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    for key, value in env.items():
        args += ["--setenv", key, value]
    return args


def render(policy: SandboxPolicy, *, targets: Mapping[str, str], tools: Path, tools_target: str, tmp: Path,
           python_roots: list[Path], env: dict[str, str], user_namespace: bool, seccomp_fd: int | None,
           bridge_args: list[str] | None = None, image: ImageView | None = None,
           reach: Callable[[str], str] | None = None) -> list[str]:
    """The run's policy as bubblewrap's options: its folders bound at their contract ``targets`` (read-only
    unless the policy makes them writable), its hidden folders covered, its network (a lone loopback for
    ``none`` and ``gateway``, whose listener the launcher makes inside; the bridge's options for
    ``bridge``; the host's for ``host``), its GPUs' devices."""
    binds = [Bind(m.source, targets[m.role], m.writable) for m in policy.mounts] + [Bind(tools, tools_target)]
    if policy.network in ("none", "gateway"):
        network = NO_NETWORK
    else:
        network = list(bridge_args or []) if policy.network == "bridge" else []
    roots = [*python_roots, *(p for p in policy.software if p not in python_roots)]  # read-only at their own paths
    return bwrap_args(python_roots=roots, binds=binds, tmp=tmp, hidden=policy.hidden, env=env,
                      gpus=policy.gpus, network=network, user_namespace=user_namespace,
                      seccomp_fd=seccomp_fd, image=image, shm_size=policy.limits.shm, reach=reach)


def _image_args(image: ImageView, tmp: Path, src: Callable[[str], str] = str) -> list[str]:
    """The image's root as the sandbox's system: each top-level entry bound read-only (links kept as links,
    resolved by the kernel inside the sandbox, where ``/`` is the image's), ``/var/tmp`` the run's /tmp,
    the harness's package for the launcher, the driver's libraries for a GPU run."""
    args: list[str] = []
    for entry in sorted(os.scandir(image.rootfs), key=lambda e: e.name):
        if entry.name in IMAGE_OWN_TOP:
            continue
        if entry.is_symlink():
            args += ["--symlink", os.readlink(entry.path), f"/{entry.name}"]
        elif entry.is_dir() or entry.is_file():
            args += ["--ro-bind", src(entry.path), f"/{entry.name}"]
    var_tmp = image.rootfs / "var" / "tmp"
    if var_tmp.is_dir() and not var_tmp.is_symlink() and not (image.rootfs / "var").is_symlink():
        args += ["--bind", src(str(tmp)), "/var/tmp"]
    args += ["--perms", "0755", "--dir", HARNESS_INSIDE,
             "--ro-bind", src(str(image.package)), f"{HARNESS_INSIDE}/{image.package.name}"]
    if image.driver_libs:
        args += ["--perms", "0755", "--dir", DRIVER_INSIDE]
        for source, name in image.driver_libs:
            args += ["--ro-bind", src(str(source)), f"{DRIVER_INSIDE}/{name}"]
    return args


def _parents(target: Path, made: set[str]) -> list[str]:
    """``--perms 0755 --dir`` for each missing ancestor of a bind target, outermost first."""
    out = []
    for parent in reversed(target.parents[:-1]):
        name = str(parent)
        if name not in made and not any(name == d or name.startswith(d + "/") for d in (*SYSTEM_DIRS, *MERGED_DIRS)):
            made.add(name)
            out += ["--perms", "0755", "--dir", name]
    return out


def args_blob(args: list[str]) -> bytes:
    """``--args`` wants NUL-terminated arguments; none may contain a NUL itself."""
    if any("\0" in a for a in args):
        raise ValueError("a sandbox argument contains a NUL byte")
    return b"".join(a.encode() + b"\0" for a in args)
