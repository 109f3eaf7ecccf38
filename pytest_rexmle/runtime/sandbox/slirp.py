"""The ``bridge`` network of the bubblewrap sandbox: its own network namespace, NATed by slirp4netns.

Sharing the host's network namespace hands the agent every service listening on the host's loopback
(databases, Jupyter, a cloud metadata proxy, Docker's API over TCP). An agent still needs outbound
internet for its LLM API, so ``--rexmle-network=bridge`` gives the sandbox a namespace of its own
(``bwrap --unshare-net``) whose only way out is **slirp4netns**: a user-mode TCP/IP stack on the host
side that turns the sandbox's packets into ordinary sockets of the harness. ``--disable-host-loopback``
makes it refuse the gateway address (10.0.2.2) that would otherwise lead to the host's 127.0.0.1, and
its DNS alias 10.0.2.3 forwards queries (port 53 only) to the host's own nameserver; the sandbox's
``/etc/resolv.conf`` is overlaid to name it, since the host's may name a loopback resolver (127.0.0.53)
that does not exist inside.

The hand-off uses bubblewrap's own options, so the launcher is unchanged:

1. ``--info-fd``: bubblewrap reports the sandbox's first process (its pid names the namespaces);
2. the harness waits until bubblewrap has configured the namespace's loopback — slirp4netns brings
   ``lo`` up too, and if it wins the race the kernel's automatic 127.0.0.1 makes bubblewrap's own
   address request fail and the run die;
3. slirp4netns joins the namespace (a descriptor the harness opened, ``/proc/self/fd/N``, so a
   reused pid cannot redirect it), creates and configures ``tap0`` and writes to ``--ready-fd``.
   When the harness is not root, slirp4netns needs capabilities over that namespace, i.e. to live in
   the user namespace that *owns* it. That is not simply ``/proc/PID/ns/user``: unprivileged
   bubblewrap later moves its child into a second, nested user namespace (mapping the agent's uid),
   and joining that one fails (``setns(CLONE_NEWNET): Operation not permitted``) depending on timing.
   So the harness asks the kernel for the owner (``NS_GET_USERNS`` on the network namespace) and
   starts slirp4netns *inside* it, as that namespace's root — the way rootlesskit runs it; only so
   does ``--enable-sandbox`` work unprivileged (slirp4netns's ``--userns-path`` joins it for the
   tap device only, and its sandbox then fails on ``setegid(0)`` in the host's user namespace).
   Capabilities there reach only the sandbox's own namespaces, and the sandbox drops them;
4. ``--block-fd``: only then is bubblewrap released to exec the agent, which therefore never sees a
   half-configured network.

slirp4netns does **not** exit when the namespace's last process is gone (it holds the tap device), so
it gets ``--exit-fd``: the read end of a pipe whose only write end the harness holds. The runtime's
cleanup closes it (and kills the process if it lingers); a ``kill -9`` of the harness closes it too,
through the kernel. slirp4netns also confines itself (``--enable-sandbox``: an empty root and no
capabilities but the ones it needs; ``--enable-seccomp``), since it parses the agent's packets.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path

from .fds import data_fd

SLIRP_DNS = "10.0.2.3"
RESOLV_CONF = f"# rexmle: the sandbox's DNS is slirp4netns's forwarder\nnameserver {SLIRP_DNS}\n".encode()
TAP = "tap0"
MTU = 65520  # slirp4netns's recommended maximum: fewer, larger packets through the user-mode stack
NS_GET_USERNS = 0xB701  # ioctl on a namespace descriptor: a descriptor of the user namespace that owns it
CLONE_NEWUSER = 0x10000000
START_TIMEOUT = 20.0
STOP_GRACE = 2.0
INSTALL_HINT = "apt-get install slirp4netns"


class NetworkSetupError(RuntimeError):
    """The sandbox's network could not be brought up (the run is stopped before the agent starts)."""


def slirp4netns() -> str | None:
    return shutil.which("slirp4netns")


def resolv_conf_target(path: str = "/etc/resolv.conf") -> tuple[str, list[str]]:
    """Where to lay the sandbox's resolv.conf, and the ``--dir`` options its folder needs.

    ``/etc`` is a read-only bind of the host's, so a regular ``/etc/resolv.conf`` is simply covered.
    A symlink (systemd-resolved's ``../run/systemd/resolve/stub-resolv.conf``) is followed by the
    mount, so the file is laid at its target instead, creating the folders that do not exist inside."""
    if not os.path.islink(path):
        return path, []
    target = os.path.realpath(path)
    if os.path.exists(target) and any(target.startswith(d + "/") for d in ("/etc", "/usr", "/opt")):
        return target, []
    parents = [str(p) for p in reversed(Path(target).parents[:-1])]
    return target, [arg for p in parents for arg in ("--dir", p)]


def image_resolv_conf(rootfs: Path) -> None:
    """An empty ``etc/resolv.conf`` in an image's root where it has none (images rarely do: an engine adds
    its own at start): bubblewrap lays the bridge's over it, and bubblewrap, started as the run's uid, can
    no more create it in the read-only image than the agent could. Never following a link of the image's
    (``etc`` or ``resolv.conf`` itself); where it cannot be made, bubblewrap's own error says so."""
    try:
        etc = os.open(rootfs / "etc", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.close(os.open("resolv.conf", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                         dir_fd=etc))
    except OSError:  # there already (a file, or a link bubblewrap resolves inside the image), or not ours to add
        pass
    finally:
        os.close(etc)


class SlirpNetwork:
    """One run's bridge: the pipes shared with bubblewrap, then the slirp4netns process.

    Use: ``bwrap_args()`` and ``child_fds`` when building and starting bubblewrap, ``connect(proc)``
    right after starting it, ``close()`` in the run's cleanup (always, also on errors)."""

    def __init__(self, binary: str | None, user_namespace: bool, log: Path, image_root: Path | None = None) -> None:
        if binary is None:   # what slirp4netns() finds: the runtime asks for a bridge only where it found one
            raise NetworkSetupError("slirp4netns is not installed")
        self.binary = binary
        self.user_namespace = user_namespace
        self.log = log
        self.image_root = image_root  # an image run's /etc is the image's, not the host's
        self._info_r, self._info_w = os.pipe()
        self._block_r, self._block_w = os.pipe()
        self._resolv = data_fd(RESOLV_CONF, "resolv.conf")
        self._exit_w: int | None = None
        self.process: subprocess.Popen | None = None

    @property
    def child_fds(self) -> tuple[int, ...]:
        """The descriptors bubblewrap must inherit (``pass_fds``)."""
        return self._info_w, self._block_r, self._resolv

    def bwrap_args(self) -> list[str]:
        dirs: list[str] = []
        if self.image_root is not None:
            image_resolv_conf(self.image_root)
            target = "/etc/resolv.conf"
        else:
            target, dirs = resolv_conf_target()
        return ["--unshare-net", "--info-fd", str(self._info_w), "--block-fd", str(self._block_r),
                *dirs, "--perms", "0644", "--ro-bind-data", str(self._resolv), target]

    def connect(self, bwrap: subprocess.Popen, timeout: float = START_TIMEOUT) -> None:
        """Bring the network up for the sandbox bubblewrap just started, then let the agent start."""
        for fd in self.child_fds:  # bubblewrap has its copies; ours would hide its death (no EOF)
            os.close(fd)
        self._info_w = self._block_r = self._resolv = -1
        deadline = time.monotonic() + timeout
        pid = self._child_pid(bwrap, deadline)
        self._wait_for_loopback(bwrap, pid, deadline)
        self._start(pid, deadline)
        os.write(self._block_w, b"1")
        os.close(self._block_w)
        self._block_w = -1

    def _child_pid(self, bwrap: subprocess.Popen, deadline: float) -> int:
        data = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self._info_r], [], [], 0.1)
            if ready:
                chunk = os.read(self._info_r, 4096)
                if not chunk:
                    break
                data += chunk
                try:
                    return int(json.loads(data)["child-pid"])
                except ValueError:
                    continue
            elif bwrap.poll() is not None:
                break
        raise NetworkSetupError(f"bubblewrap did not report its sandbox (exit status {bwrap.poll()})")

    @staticmethod
    def _wait_for_loopback(bwrap: subprocess.Popen, pid: int, deadline: float) -> None:
        """Until bubblewrap has given the namespace's ``lo`` its address (the race in the module doc)."""
        trie = Path(f"/proc/{pid}/net/fib_trie")
        while time.monotonic() < deadline:
            try:
                if "127.0.0.1" in trie.read_text():
                    return
            except OSError:
                if bwrap.poll() is not None:
                    break
            time.sleep(0.002)
        raise NetworkSetupError(f"bubblewrap did not set up the sandbox's loopback (exit status {bwrap.poll()})")

    def command(self, netns_fd: int, ready_fd: int, exit_fd: int) -> list[str]:
        return [self.binary, "--configure", f"--mtu={MTU}", "--disable-host-loopback", "--enable-sandbox",
                "--enable-seccomp", f"--ready-fd={ready_fd}", f"--exit-fd={exit_fd}", "--netns-type=path",
                f"/proc/self/fd/{netns_fd}", TAP]

    def _start(self, pid: int, deadline: float) -> None:
        netns = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        userns = fcntl.ioctl(netns, NS_GET_USERNS) if self.user_namespace else -1
        ready_r, ready_w = os.pipe()
        exit_r, self._exit_w = os.pipe()
        try:
            with open(self.log, "ab") as log:
                self.process = subprocess.Popen(self.command(netns, ready_w, exit_r), stdin=subprocess.DEVNULL,
                                                stdout=log, stderr=log, pass_fds=(ready_w, exit_r, netns),
                                                start_new_session=True, preexec_fn=_joiner(userns))
            os.close(ready_w)
            ready_w = -1
            left = max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([ready_r], [], [], left)
            if not ready or os.read(ready_r, 1) != b"1":
                raise NetworkSetupError(f"slirp4netns did not bring the sandbox's network up "
                                        f"(exit status {self.process.poll()}): {self._log_tail()}")
        finally:
            for fd in (ready_r, ready_w, exit_r, netns, userns):
                if fd >= 0:
                    os.close(fd)

    def _log_tail(self) -> str:
        from ...agent_output import log_tail  # the project's bounded, cleaned one-line tail of a log

        return log_tail(self.log, 600) or "no output"

    def close(self) -> None:
        """End slirp4netns (its exit-fd first, then SIGKILL) and drop every descriptor still held."""
        for name in ("_info_r", "_info_w", "_block_r", "_block_w", "_resolv", "_exit_w"):
            fd = getattr(self, name)
            if fd is not None and fd >= 0:
                os.close(fd)
            setattr(self, name, -1)
        if self.process is None:
            return
        try:
            self.process.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()


def _joiner(userns: int):
    """A preexec function moving the child into user namespace ``userns`` (none for -1)."""
    if userns < 0:
        return None

    def join() -> None:
        if ctypes.CDLL(None, use_errno=True).setns(userns, CLONE_NEWUSER) != 0:
            raise OSError(ctypes.get_errno(), "setns(CLONE_NEWUSER) into the sandbox's user namespace failed")

    return join
