"""The Landlock view: the same allow-list as the bubblewrap view, enforced by the kernel's LSM.

We use the PyPI binding ``landlockpy`` (pure Python over the three syscalls, no dependencies, typed,
kept current with new ABIs — checked against ABI 7 here). The older ``landlock`` package stopped at a
development release in 2025 and knows no network rules or scopes, so it was not chosen.

What Landlock can and cannot do, compared with bubblewrap:
* It cannot hide a path: the whole host tree stays *visible* (``ls``/``stat`` of directories works, as
  far as DAC allows) but nothing outside the allow-list can be read, executed or written. Private
  answers, caches and the runs folder are unreadable, not invisible.
* It has no PID namespace: the agent sees the host's process list in /proc (command lines included);
  it cannot signal (Landlock signal scope, uid) or trace (seccomp, Yama/uid) any of them.
* Scopes (ABI 6+): the agent cannot connect to abstract unix sockets or signal processes outside its
  own Landlock domain — including the launcher that supervises it.
* Python's import system lists every ``sys.path`` folder. An editable install puts a source checkout
  on ``sys.path``, so that folder (and only its names, below it: ``READ_DIR``) becomes listable.
* Network ``none``: TCP bind/connect are handled with no port allowed (ABI 4+), and the seccomp filter
  refuses ``socket(AF_INET/AF_INET6)``, which also covers UDP and ICMP.
* Network ``gateway`` where no network namespace can be had (``connect_ports``): TCP connect only to the
  gateway's port on the host and no bind, while seccomp allows IP sockets only as TCP streams (no UDP,
  so no DNS; no raw, SCTP or MPTCP socket, which these rules would not govern).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .bwrap import MERGED_DIRS, SYSTEM_DIRS
from .gpu_devices import gpu_nodes

if TYPE_CHECKING:
    from ..policy import SandboxPolicy

#: entries of /etc that stay out of the view: password hashes, host keys, privilege configuration
ETC_SECRETS = frozenset({"shadow", "shadow-", "gshadow", "gshadow-", "ssh", "sudoers", "sudoers.d", "security",
                         "ssl/private", "munge", "slurm", "docker", "machine-id", "krb5.keytab"})
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")


@dataclass(frozen=True)
class LandlockView:
    """Host paths by kind of access. Plain lists of strings so it crosses the launcher's JSON pipe."""
    read_exec: tuple[str, ...] = ()       # system dirs and Python roots
    read: tuple[str, ...] = ()            # public data, instructions, /proc, /sys
    read_write: tuple[str, ...] = ()      # workspace, submission, private tmp
    write_files: tuple[str, ...] = ()     # the run's own log files (reopened via /dev/stdout)
    devices: tuple[str, ...] = DEVICES    # character devices opened read-write (GPUs join here)
    list_only: tuple[str, ...] = ()       # directories whose names may be listed (an editable install's root)
    network_none: bool = False
    connect_ports: tuple[int, ...] = ()   # the only TCP ports it may connect to (the gateway without a netns)

    def to_json(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LandlockView:
        fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        return cls(**fields)


def render(policy: SandboxPolicy, *, tools: Path, tmp: Path, logs: list[str],
           connect_ports: tuple[int, ...] = ()) -> LandlockView:
    """The run's policy as Landlock rules: the system read-and-execute (/etc without its secrets), the
    policy's read-only folders readable, its writable ones and the private /tmp writable, its GPUs'
    devices openable; ``none`` refuses every TCP port, ``connect_ports`` allows only those (the gateway
    where no network namespace can be had). Hidden folders need no rule: nothing outside is reachable."""
    devices = [*DEVICES, *gpu_nodes(policy.gpus).paths]  # the run's GPUs only: CUDA skips nodes it cannot open
    read_exec = [d for d in (*SYSTEM_DIRS, *MERGED_DIRS) if d != "/etc"] + etc_entries()
    read_exec += [str(p) for p in policy.software]  # the agent's own stack (--agent-option env=)
    return LandlockView(read_exec=tuple([*read_exec, str(tools)]),
                        read=(*(str(p) for p in policy.read_only), "/proc", "/sys"),
                        read_write=(*(str(p) for p in policy.read_write), str(tmp)),
                        write_files=tuple(logs), devices=tuple(devices),
                        network_none=policy.network == "none", connect_ports=tuple(connect_ports))


def etc_entries(etc: Path = Path("/etc")) -> list[str]:
    """/etc without its secrets: Landlock grants whole hierarchies, so secrets are left out by listing
    the other entries one by one."""
    out = []
    for entry in sorted(os.listdir(etc)):
        if entry in ETC_SECRETS:
            continue
        if entry == "ssl":
            out += [str(etc / "ssl" / e) for e in sorted(os.listdir(etc / "ssl")) if f"ssl/{e}" not in ETC_SECRETS]
            continue
        out.append(str(etc / entry))
    return out


def available() -> tuple[bool, str]:
    """Whether the binding imports and the kernel offers Landlock (with the ABI), as a reason."""
    try:
        import landlockpy  # start-up: landlockpy only where this runs
    except ImportError:
        return False, "the Python package landlockpy is not installed (pip install landlockpy)"
    try:
        if not landlockpy.supported():
            return False, "the kernel does not offer Landlock (not built in, or not in the lsm= boot list)"
        return True, f"Landlock ABI {landlockpy.abi_version()}"
    except OSError as exc:
        return False, f"Landlock is unavailable: {exc}"


def abi() -> int:
    """The kernel's Landlock ABI version (0 when Landlock or its binding is missing)."""
    try:
        import landlockpy  # start-up: landlockpy only where this runs

        return int(landlockpy.abi_version()) if landlockpy.supported() else 0
    except (ImportError, OSError):
        return 0


def prepare(view: LandlockView):
    """Build the ruleset (opening every path now, while the caller still has the rights to reach it);
    ``restrict()`` on the result, after the privilege drop, enforces it."""
    from landlockpy import AccessFS, AccessNet, Ruleset, Scope  # start-up: landlockpy only where this runs

    confined = view.network_none or bool(view.connect_ports)
    handled_net = (AccessNet.BIND_TCP | AccessNet.CONNECT_TCP) if confined else AccessNet.NONE
    ruleset = Ruleset(handled_net=handled_net, scoped=Scope.ABSTRACT_UNIX_SOCKET | Scope.SIGNAL)
    for port in view.connect_ports:
        ruleset.allow_port(port, AccessNet.CONNECT_TCP)
    read = AccessFS.READ_FILE | AccessFS.READ_DIR
    read_exec = read | AccessFS.EXECUTE
    write = (read_exec | AccessFS.WRITE_FILE | AccessFS.REMOVE_DIR | AccessFS.REMOVE_FILE | AccessFS.MAKE_DIR
             | AccessFS.MAKE_REG | AccessFS.MAKE_SYM | AccessFS.MAKE_SOCK | AccessFS.REFER | AccessFS.TRUNCATE)
    device = AccessFS.READ_FILE | AccessFS.WRITE_FILE | AccessFS.IOCTL_DEV | AccessFS.TRUNCATE
    file_rights = AccessFS.READ_FILE | AccessFS.WRITE_FILE | AccessFS.EXECUTE | AccessFS.TRUNCATE | AccessFS.IOCTL_DEV
    for paths, access in ((view.read_exec, read_exec), (view.read, read), (view.read_write, write),
                          (view.write_files, AccessFS.WRITE_FILE), (view.devices, device),
                          (view.list_only, AccessFS.READ_DIR)):
        for path in paths:
            if os.path.lexists(path):  # file rules take only file rights
                ruleset.allow_path(path, access if os.path.isdir(path) else access & file_rights)
    return ruleset
