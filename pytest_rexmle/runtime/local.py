"""The local runtime: the agent runs on this machine in a sandbox built from an allow-list.

The agent sees the system and Python installation read-only, the task's public data read-only, its
workspace and submission folders read-write, a private /tmp on disk, and nothing else; no data root,
cache or runs folder is reachable. That view, the limits and the network are the run's
:class:`~.policy.SandboxPolicy`, which one of two mechanisms renders (``sandbox/probe.py`` picks the first
that works by running a tiny sandboxed command; ``--rexmle-sandbox`` forces one):

* **bwrap** — bubblewrap builds a fresh root in new mount/PID/IPC/UTS (and, unprivileged, user)
  namespaces; hidden folders are simply absent. Its PID namespace ends every agent process with it.
* **landlock** — the kernel's Landlock LSM restricts the agent to the same paths without any
  namespace (works unprivileged and in ordinary containers). Paths stay visible but inaccessible;
  a subreaper launcher ends every agent process. Contract paths are real paths, those of the run's
  stage (:mod:`.staging`) — a neutral folder naming no run, cache or data root.

Network (``--rexmle-network``, :meth:`LocalRuntime.network`): ``gateway`` (the session default) is a network
namespace of the sandbox's own whose only peer is the session's gateway (:mod:`.sandbox.gateway_net`; under
Landlock, :func:`_landlock_gateway_mode`); ``none`` is a lone loopback (bwrap) or seccomp and Landlock refusing
IP sockets; ``host`` is the host's network; ``bridge`` is slirp4netns's NAT (:mod:`.sandbox.slirp`) where it can
be had, else the host's network. The run's details record the network that actually ran.

In both, the agent's first process is :mod:`.sandbox.launcher`: an unprivileged uid (one of its own
per run when the harness is root, see :mod:`.sandbox.identity` and :mod:`.sandbox.uids`), no
capabilities, ``no_new_privs``, a seccomp filter, rlimits; the harness adds a cgroup v2 group when it
can and watches disk use. The agent's ``PATH`` is its tools (:mod:`.agent_tools`: ``rexmle validate``)
and the system's folders: nothing it runs needs the harness's interpreter. An image agent's launcher runs
on the image's own ``python3``, which is the image's and so untrusted: the harness starts bubblewrap
already as the run's uid, with its rlimits, in a user namespace of its own (:mod:`.sandbox.hostdrop`).

Without any sandbox the agent would see everything this user can read, so the runtime refuses to start
unless the user opts into ``unsafe=True`` (``--rexmle-unsafe-local``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import select
import shlex
import shutil
import signal
import stat
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest_rexmle

from ..images import store
from ..images.runnable import image_python, local_image_refusal
from ..limits import Limits, exceeded_message
from . import agent_tools, gateway_link, staging
from . import policy as run_policy
from .base import RunOutcome, RunSpec, Runtime, RuntimeUnavailable, agent_logs, folder_owner
from .sandbox import identity as ident
from .sandbox.bwrap import DRIVER_INSIDE, HARNESS_INSIDE, ImageView, args_blob, python_roots
from .sandbox.bwrap import render as render_bwrap
from .sandbox.fds import data_fd
from .sandbox.gateway_net import (
    GATEWAY_PORT,
    GatewayNetworkError,
    ListenerChannel,
    base_url,
    can_create_network_namespace,
)
from .sandbox.gpu_devices import visible_inside
from .sandbox.hostdrop import Bridge, HostDrop, preexec
from .sandbox.landlock import render as render_landlock
from .sandbox.limits import SIGXFSZ_EXIT, RunCgroup, disk_usage, rlimits_for, sweep_cgroups
from .sandbox.probe import launcher_command, launcher_env, pick, unprivileged_bwrap
from .sandbox.seccomp import build_filter
from .sandbox.slirp import INSTALL_HINT, NetworkSetupError, SlirpNetwork, slirp4netns
from .sandbox.uids import Lease, UidRange, UidRangeError, allocate, cancel_jobs_of, kill_all_of, lock_dir

if TYPE_CHECKING:
    from ..images.store import StoredImage

#: uid 0 owns root's files, and chmod, chown, times and extended attributes are no Landlock rights
AS_ROOT_LANDLOCK_REFUSAL = (
    "--rexmle-agent-as-root is refused under Landlock: an agent with uid 0 could change the owner, mode, times and "
    "extended attributes of every root-owned file outside its run (the system's, the cache's data for the next "
    "run), which Landlock's rules do not cover; use bubblewrap (--rexmle-sandbox=bwrap), where uid 0 has no "
    "capabilities and the system is read-only, or drop the option (each run then gets a uid of its own)")
KILL_GRACE_SECONDS = 3.0
POLL_SECONDS = 0.25
DISK_POLL_SECONDS = 1.0
SANDBOX_CHOICES = ("auto", "bwrap", "landlock")
_fallbacks_warned: set[str] = set()  # one warning per session (process) and reason
_own_netns: tuple[bool, str] | None = None  # whether this harness can give a Landlock agent a network namespace
# what an agent's stderr says when an rlimit refused it (rlimits kill nothing, so the reason is read back)
LIMIT_MARKERS = {"memory": ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory"),
                 "processes": ("Resource temporarily unavailable", "BlockingIOError", "fork: retry"),
                 "file_size": ("File too large", "[Errno 27]")}


class AgentIdentityRefused(RuntimeUnavailable):
    """The agent cannot run under an identity that keeps it apart from the harness and from other runs:
    the session stops at once (a usage error) with the fix, rather than run it as root or as the harness."""


SAME_UID_REFUSAL = (
    "the Landlock sandbox would run the agent as your own uid {uid}, which reads this harness's environment "
    "(/proc/<pid>/environ of the same uid), venv, cache, secrets and runs folder and can rewrite them. Use "
    "bubblewrap (`apt-get install bubblewrap`, --rexmle-sandbox=bwrap: the agent gets a user namespace of "
    "its own), or run the harness as root (each run then gets a uid of its own); "
    "--rexmle-unsafe-same-uid runs it anyway, recorded in run.json")


class LocalRuntime(Runtime):
    name = "local"

    def __init__(self, unsafe: bool = False, bwrap: str | None = None, sandbox: str = "auto",
                 limits: dict[str, str] | None = None, agent_uids: str | None = None, agent_as_root: bool = False,
                 unsafe_same_uid: bool = False, gateway: gateway_link.GatewayFactory | None = None,
                 gateway_budget: str | None = None, egress_allow: list[str] | tuple[str, ...] = (),
                 **_: object) -> None:
        if sandbox not in SANDBOX_CHOICES:
            raise ValueError(f"sandbox must be one of {', '.join(SANDBOX_CHOICES)}, got {sandbox!r}")
        self.unsafe = unsafe
        self.bwrap = bwrap or shutil.which("bwrap")
        self.sandbox = sandbox
        self.agent_uids = UidRange.parse(agent_uids)
        self.policy_options = run_policy.PolicyOptions(
            limits=dict(limits or {}), identity=run_policy.IdentityPolicy(agent_uids, agent_as_root, unsafe_same_uid),
            egress_allow=tuple(egress_allow), budget=gateway_budget)
        self._mechanism: str | None = None
        self.gateway = gateway or gateway_link.session_gateway_factory()

    @classmethod
    def from_settings(cls, settings) -> LocalRuntime:
        return cls(**cls.settings_options(settings), gateway=gateway_link.session_gateway_factory(settings))

    @classmethod
    def settings_options(cls, settings) -> dict:
        return {"unsafe": settings.unsafe_local, "sandbox": settings.sandbox,
                **run_policy.PolicyOptions.from_settings(settings).runtime_options()}

    # -- availability ----------------------------------------------------------------------------------
    def check(self) -> None:
        self.check_identity()

    def check_identity(self, trusted: bool = False) -> None:
        """Refuse, before any run, an identity that would not keep the agent apart: Landlock as the
        harness's own uid (unless asked for by name, or the agent is the harness's own: ``trusted``), or
        a root harness without a usable uid lock folder."""
        mechanism = self.mechanism()
        if mechanism == "none":
            return
        if not ident.harness_is_root():
            same_uid_allowed = self.policy_options.identity.same_uid or trusted or self.trusted_agents
            if mechanism == "landlock" and not same_uid_allowed:
                raise AgentIdentityRefused(SAME_UID_REFUSAL.format(uid=os.geteuid()))
            return
        if self.policy_options.identity.as_root:
            if mechanism == "landlock":
                raise AgentIdentityRefused(AS_ROOT_LANDLOCK_REFUSAL)
            return
        try:
            lock_dir()
        except (UidRangeError, OSError) as exc:
            raise AgentIdentityRefused(f"the agents' uids cannot be allocated: {exc}") from None

    def mechanism(self) -> str:
        """The sandbox that runs the agents here: ``bwrap``, ``landlock`` or ``none`` (unsafe only)."""
        if self._mechanism is not None:
            return self._mechanism
        if self.unsafe:  # the user asked for no isolation at all
            self._mechanism = "none"
            return "none"
        chosen, tried = pick(self.sandbox, self.bwrap)
        if chosen is None:
            why = "; ".join(f"{p.mechanism}: {p.reason}" for p in tried)
            wanted = "the sandbox" if self.sandbox == "auto" else f"--rexmle-sandbox={self.sandbox}"
            raise RuntimeUnavailable(
                f"the local runtime cannot isolate the agent here ({wanted} does not work: {why}). Install "
                "bubblewrap (`apt-get install bubblewrap`) where user namespaces are allowed, or use a kernel "
                "with Landlock and `pip install landlockpy`; --rexmle-sandbox=auto|bwrap|landlock picks one; "
                "pass --rexmle-unsafe-local to run without isolation at your own risk")
        self._mechanism = chosen
        return chosen

    def facts(self) -> dict:
        return {"sandbox": self.mechanism()}

    def check_image(self, image: str) -> None:
        if (why := self.image_refusal(image)) is not None:
            raise RuntimeUnavailable(f"the local runtime cannot run image {image!r} here: {why}")

    def image_refusal(self, image: str) -> str | None:
        """Why ``image`` cannot run here (None: it can). An image agent runs from its unpacked image (``rexmle
        images import``) under bubblewrap, or not at all: never on this machine's own Python."""
        why = local_image_refusal(image, self.mechanism())
        if why is None and ident.harness_is_root() and not self.policy_options.identity.as_root:
            why = self.image_drop_refusal()
        return why

    def image_drop_refusal(self) -> str | None:
        """A root harness starts an image run's bubblewrap as the run's uid (nothing of the image may run as
        root, :mod:`.sandbox.hostdrop`): None when an ordinary uid can run bubblewrap here, else why not."""
        probe = unprivileged_bwrap(self.bwrap)
        if probe.works:
            return None
        return (f"{probe.reason}. A root harness starts an image agent's sandbox as the run's own uid, which must "
                "be allowed to create a user namespace (sysctl user.max_user_namespaces > 0, "
                "kernel.unprivileged_userns_clone=1, no AppArmor userns restriction for bwrap); or use "
                "--rexmle-runtime=docker")

    def _stored_image(self, spec: RunSpec) -> StoredImage | None:
        """The run's unpacked image (None for an agent without one, which runs on the system's folders)."""
        if not spec.image:
            return None

        self.check_image(spec.image)
        return store.find(spec.image)

    def sweep_orphans(self) -> int:
        """Run cgroups a killed session left behind (their processes are killed with them)."""
        return sweep_cgroups()

    def stage(self, spec: RunSpec) -> RunSpec:
        """Landlock's agent sees real paths: they must be the stage's before the contract names them."""
        if self.mechanism() != "landlock" or spec.stage is not None:
            return spec
        return dataclasses.replace(spec, stage=staging.plan(spec))

    def contract_paths(self, spec: RunSpec) -> dict[str, str]:
        if self.mechanism() == "bwrap":
            return super().contract_paths(spec)
        # Landlock (and unsafe) see real paths: the stage's, when there is one
        if spec.stage is not None:
            stage = spec.stage
            return {"data": str(stage / staging.DATA), "workspace": str(stage / "workspace"),
                    "submission": str(stage / "submission"), "instructions": str(stage / staging.INSTRUCTIONS)}
        return {"data": str(spec.data_dir), "workspace": str(spec.workspace),
                "submission": str(spec.submission), "instructions": str(spec.instructions)}

    # -- sandbox construction ------------------------------------------------------------------------
    def identity(self, spec: RunSpec) -> tuple[ident.Identity, Lease | None]:
        """The host uid the agent runs as and the lease holding it (see sandbox/identity.py): a root
        harness's run gets a uid of its own from the range (or uid 0 when asked for by name); otherwise
        the user's own uid."""
        if not ident.harness_is_root():
            return ident.own_identity(), None
        if self.policy_options.identity.as_root:
            if self.mechanism() == "landlock":  # also where a caller skipped check(): never uid 0 under Landlock
                raise AgentIdentityRefused(AS_ROOT_LANDLOCK_REFUSAL)
            return ident.Identity(0, 0, "--rexmle-agent-as-root"), None
        try:
            lease = allocate(self.agent_uids)
        except (UidRangeError, OSError) as exc:
            raise AgentIdentityRefused(f"no agent uid for this run: {exc}") from None
        return ident.Identity(lease.uid, lease.uid), lease

    def check_reach(self, spec: RunSpec, who: ident.Identity, tmp: Path, tools: Path) -> None:
        """Landlock has no mount namespace: the agent's uid must itself reach its folders and its
        command. If not, stop with the fix rather than fall back to root. Its ``env=`` may hold nothing every
        user can write: times and extended attributes are no Landlock rights, so the agent could mark them."""
        if self.mechanism() != "landlock":
            return
        if spec.software and (open_to_all := world_writable(spec.software)):
            raise AgentIdentityRefused(
                f"the agent's environment holds {open_to_all}, which every user can write: under Landlock the agent "
                "could change its times and extended attributes for the next run; `chmod -R o-w` the environment, "
                "or use bubblewrap (--rexmle-sandbox=bwrap), which shows it read-only")
        if who.uid == os.geteuid():
            return
        handed = dict.fromkeys(p.parent for p in (spec.workspace, spec.submission, tmp))
        blocked = ident.unreachable(who, [spec.data_dir, spec.instructions, tools], enter=list(handed))
        if blocked:
            raise AgentIdentityRefused(
                f"the agent's uid {who.uid} cannot reach its run folder ({blocked[0]}) under Landlock: set "
                f"{staging.STAGE_ENV} to a folder on the runs folder's filesystem that every user can traverse, or use "
                "bubblewrap (--rexmle-sandbox=bwrap)")
        if spec.software and (blocked := ident.unreachable(who, list(spec.software))):
            raise AgentIdentityRefused(
                f"the agent's environment cannot be read by its uid {who.uid} under Landlock (it cannot reach "
                f"{blocked[0]}): make the environment and the interpreter it links to readable by every user (e.g. "
                "a venv made from /usr/bin/python3 in a folder every user can enter), or use bubblewrap "
                "(--rexmle-sandbox=bwrap)")
        path = self.agent_environment(spec, agent_tools.agent_path(tools))["PATH"]  # the agent's own stack too
        commands = [c for c in (_resolve(word, path) for word in _programs(spec.argv)) if c is not None]
        if commands and (blocked := ident.unreachable(who, commands)):
            raise AgentIdentityRefused(
                f"the agent's command {' '.join(spec.argv)[:200]!r} cannot run as its uid {who.uid} under Landlock "
                f"(it cannot reach {blocked[0]}): start it with an interpreter every user can run (the system's "
                "python3, e.g. `python3 agent.py`), or use bubblewrap (--rexmle-sandbox=bwrap)")

    def _launcher_config(self, spec: RunSpec, who: ident.Identity, limits: Limits, cgroup: RunCgroup | None,
                         tmp: Path, tools: Path, mode: str, network: str, channel: ListenerChannel | None,
                         image: StoredImage | None = None) -> dict:
        path = agent_tools.agent_path(agent_tools.INSIDE if mode == "exec" else tools)
        env = self.agent_environment(spec, path, "/tmp" if mode == "exec" else str(tmp))
        if image is not None:  # the image's variables (its PATH first of all), the contract's on top
            image_env = image.env()
            env = {**image_env, **self.agent_environment(spec, f"{agent_tools.INSIDE}:{image_env['PATH']}")}
            if spec.gpus and _driver_libs():
                env["LD_LIBRARY_PATH"] = ":".join(filter(None, [DRIVER_INSIDE, env.get("LD_LIBRARY_PATH")]))
        if spec.gpus:  # the sandbox opens only the run's GPU nodes: CUDA numbers them from 0 (gpu_devices)
            env["CUDA_VISIBLE_DEVICES"] = visible_inside(spec.gpus)
        gateway = None
        if channel is not None:  # the launcher makes the listener; under Landlock in a namespace it creates first
            gateway = {"fd": channel.child_fd, "port": GATEWAY_PORT, "new_netns": mode == "supervise"}
        return {"mode": mode, "argv": list(spec.argv), "env": env,
                "cwd": str(self.workdir(spec)), "uid": who.uid, "gid": who.gid,
                "rlimits": {str(k): v for k, v in rlimits_for(limits, who.uid, cgroup.controllers if cgroup else frozenset()).items()},
                "network": network, "gateway": gateway, "pdeathsig": True,
                # Landlock leaves the host's /run (munge, databases, Docker) visible and does not filter
                # pathname unix sockets: no socket(AF_UNIX) there (socketpair stays); nor for a uid-0 agent
                "deny_unix_sockets": who.is_root or mode == "supervise",
                # the launcher's own parent: it compares against this, not against pid 1, because the
                # harness may itself be pid 1 (``docker run image pytest ...``)
                "parent": os.getpid()}

    def network(self, spec: RunSpec) -> str:
        """The network the agent actually gets: ``gateway`` wherever the agent can have a network namespace
        (else the session stops: nothing would keep it from the host's services); ``bridge`` only where
        the sandbox can hide the host's loopback (bubblewrap with slirp4netns), else the host's network,
        said once per session."""
        network = spec.network or gateway_link.DEFAULT_NETWORK
        if network not in gateway_link.NETWORKS:
            raise RuntimeUnavailable(f"the local runtime supports --rexmle-network {', '.join(gateway_link.NETWORKS)}, "
                                     f"not {network!r}")
        if network == "gateway" and self.mechanism() == "landlock":
            _landlock_gateway_mode()
        if network != "bridge":
            return network
        why = self._bridge_fallback()
        if why is None:
            return "bridge"
        if why not in _fallbacks_warned and SESSION_WARNED not in _fallbacks_warned:
            _fallbacks_warned.add(why)
            warnings.warn(_fallback_message(why), stacklevel=2)
        return "host"

    def _bridge_fallback(self) -> str | None:
        """Why ``bridge`` cannot be had here (the agent then gets the host's network), or None."""
        mechanism = self.mechanism()
        if mechanism == "bwrap" and slirp4netns():
            return None
        if mechanism == "bwrap":
            return f"slirp4netns is not installed ({INSTALL_HINT})"
        return (f"the {mechanism} sandbox has no network namespace (Landlock's network rules know ports, not "
                f"addresses); use bubblewrap (apt-get install bubblewrap) with slirp4netns ({INSTALL_HINT})")

    def network_notices(self, network: str) -> list[str]:
        """Checked once per process at session start (raises when ``gateway`` cannot confine the agent);
        the fallback of ``bridge`` to the host's network is said here, once per session."""
        notices = []
        if network == "gateway" and self.mechanism() == "landlock" and _landlock_gateway_mode() == "port":
            notices.append(f"rexmle: {PORT_MODE_NOTE}")
        why = self._bridge_fallback() if network == "bridge" and self.mechanism() != "none" else None
        return notices + ([_fallback_message(why)] if why else [])

    def _bwrap_command(self, spec: RunSpec, policy: run_policy.SandboxPolicy, config: dict, tmp: Path, tools: Path,
                       fds: list[int], bridge: SlirpNetwork | None, image: StoredImage | None = None,
                       drop: HostDrop | None = None) -> list[str]:
        """bubblewrap's command. With ``drop`` (an image run), bubblewrap itself runs unprivileged as the run's
        uid in a user namespace of its own, its bind sources reached through ``drop.bridge``."""
        config_fd = data_fd(json.dumps(config).encode(), "launcher-config")
        seccomp_fd = data_fd(build_filter(network=config["network"], deny_unix_sockets=config["deny_unix_sockets"]),
                             "seccomp")
        view, launcher, env = None, launcher_command(config_fd), launcher_env()
        if image is not None:  # the image is the system; the launcher runs on the image's Python, already dropped
            view = ImageView(image.rootfs, Path(pytest_rexmle.__file__).resolve().parent,
                             _driver_libs() if policy.gpus else ())
            env = {"PATH": image.env()["PATH"], "LANG": "C.UTF-8"}
            code = (f"import sys; sys.path.insert(0, {HARNESS_INSIDE!r}); "
                    "from pytest_rexmle.runtime.sandbox.launcher import main; main(sys.argv)")
            python = image_python(image)
            assert python is not None, image   # check_image refused an image without one
            launcher = [python, "-I", "-B", "-c", code, str(config_fd)]
        args = render_bwrap(policy, targets=self.contract_paths(spec), tools=tools, tools_target=str(agent_tools.INSIDE),
                            tmp=tmp, python_roots=python_roots(), env=env,
                            user_namespace=not ident.harness_is_root() or (drop is not None and drop.identity is not None),
                            seccomp_fd=seccomp_fd, bridge_args=bridge.bwrap_args() if bridge is not None else None,
                            image=view, reach=drop.bridge.reach if drop is not None and drop.bridge else None)
        args_fd = data_fd(args_blob(args), "bwrap-args")
        fds += [config_fd, seccomp_fd, args_fd]
        assert self.bwrap is not None   # mechanism() picks bubblewrap only where it found it
        return [self.bwrap, "--args", str(args_fd), "--", *launcher]

    @staticmethod
    def _host_drop(config: dict, who: ident.Identity, image: StoredImage | None) -> HostDrop | None:
        """An image run's confinement before bubblewrap executes the image's interpreter (see
        :mod:`.sandbox.hostdrop`): a root harness switches to the run's uid (its bind sources bridged), any
        harness sets the rlimits. None for an agent without an image (the launcher is the harness's own
        Python) and for ``--rexmle-agent-as-root`` (uid 0 by the user's choice)."""
        if image is None or who.is_root:
            return None
        switch = ident.harness_is_root() and who.uid != os.geteuid()
        return HostDrop(who if switch else None, {int(k): v for k, v in config["rlimits"].items()}, os.getpid(),
                        Bridge.create() if switch else None)

    def _landlock_command(self, policy: run_policy.SandboxPolicy, config: dict, tmp: Path, tools: Path,
                          fds: list[int], logs: list[str]) -> list[str]:
        """The launcher under Landlock. The agent's view holds the system, its tools and its folders: not
        the harness's interpreter or venv (the launcher runs it outside the agent's domain)."""
        view = render_landlock(policy, tools=tools, tmp=tmp, logs=logs,
                               connect_ports=tuple(config.get("connect_ports", ())))
        config = {**config, "landlock": view.to_json()}
        config_fd = data_fd(json.dumps(config).encode(), "launcher-config")
        fds.append(config_fd)
        return launcher_command(config_fd)

    # -- running ---------------------------------------------------------------------------------------
    def run(self, spec: RunSpec) -> RunOutcome:
        mechanism = self.mechanism()
        stdout_path, stderr_path = agent_logs(spec)
        for path in (stdout_path, stderr_path):
            path.touch()
        image = self._stored_image(spec)  # refused unless bubblewrap can enter the unpacked image
        if mechanism == "none":
            return self._run_unsafe(spec, stdout_path, stderr_path)
        self.check_identity(spec.trusted)  # also for callers that never asked check(): no run as the harness under Landlock
        # Landlock's contract named the stage already (or the host paths, when it could not): never re-plan it
        # a Landlock agent of the harness's own uid could chmod hard links to the cache's inodes: it gets a copy
        same_uid = mechanism == "landlock" and not ident.harness_is_root()
        with staging.staged(spec, plan_now=mechanism == "bwrap", logs=(stdout_path, stderr_path),
                            copy_data=same_uid) as view:
            staged_stdout, staged_stderr = view.logs
            outcome = self._run_sandboxed(view.spec, mechanism, staged_stdout, staged_stderr, image=image)
        outcome.stdout, outcome.stderr = stdout_path, stderr_path
        outcome.details.update(view.details)
        return outcome

    def _run_sandboxed(self, spec: RunSpec, mechanism: str, stdout_path: Path, stderr_path: Path,
                       image: StoredImage | None = None) -> RunOutcome:
        policy = self.policy(spec)  # once, on the staged folders the sandbox exposes
        limits = policy.limits
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=spec.workspace.parent))
        tools = agent_tools.write_tools(agent_tools.folder_of(spec), python=not spec.software_path)
        who, lease = self.identity(spec)
        owner = folder_owner(spec.workspace)
        cgroup: RunCgroup | None = None
        ended: dict = {}  # what the releases found: leftover processes, stray Slurm jobs, the gateway's record
        gateway: gateway_link.RunGateway | None = None
        config: dict = {}
        # One exit per resource, released in the reverse of their order here: the network first, then the
        # gateway, the descriptors and the cgroup, and last the run's identity (see _identity_released).
        with contextlib.ExitStack() as stack:
            stack.enter_context(_identity_released(spec, who, owner, lease, tmp, tools, ended))
            ident.hand_over([spec.workspace, spec.submission, tmp], who)
            if spec.stage is not None and mechanism == "landlock" and lease is not None:
                os.chown(spec.stage, who.uid, who.gid)  # 0700: this run's uid alone enters its stage
            self.check_reach(spec, who, tmp, tools)
            cgroup = RunCgroup.create(f"rexmle-{os.getpid()}-{tmp.name.lstrip('.')}", limits)
            if cgroup is not None:
                stack.callback(cgroup.remove)
                stack.callback(cgroup.kill)  # first
            if who.is_root and limits.processes is not None and (cgroup is None or "pids" not in cgroup.controllers):
                raise AgentIdentityRefused(
                    "the processes limit cannot hold for an agent running as uid 0 (RLIMIT_NPROC does not apply "
                    "to root) without a cgroup pids controller here: drop --rexmle-agent-as-root, or lift the "
                    "limit with --rexmle-limit=processes=none")
            fds: list[int] = []
            stack.callback(lambda: list(map(os.close, fds)))  # the launcher's, filled in by its command
            mode = "exec" if mechanism == "bwrap" else "supervise"
            network = self.network(spec)
            port_mode = False
            channel: ListenerChannel | None = None
            if network == "gateway":
                gateway = link = gateway_link.RunGateway(self.gateway, spec, policy)
                # its listener goes with it; the record is the run's usage and egress
                stack.callback(lambda: ended.update(gateway=link.close()))
                port_mode = mechanism == "landlock" and _landlock_gateway_mode() == "port"
                if port_mode:  # no namespace: a listener on the host's loopback, the only port it may reach
                    host_port = gateway.run.host_address()[1]
                    url = f"http://127.0.0.1:{host_port}"
                else:
                    channel, url = ListenerChannel(), base_url()
                    stack.callback(channel.close)
                spec = gateway.agent_spec(spec, url)
            config = self._launcher_config(spec, who, limits, cgroup, tmp, tools, mode, network, channel, image)
            if port_mode:
                config.update(seccomp_network="tcp-only", connect_ports=[host_port])
            bridge: SlirpNetwork | None = None
            if network == "bridge":
                bridge = SlirpNetwork(slirp4netns(), user_namespace=not ident.harness_is_root(),
                                      log=spec.logs / "slirp4netns.log", image_root=image.rootfs if image else None)
                stack.callback(bridge.close)
            drop: HostDrop | None = None
            if mechanism == "bwrap":
                drop = self._host_drop(config, who, image)
                if drop is not None and drop.bridge is not None:
                    stack.callback(drop.bridge.remove)
                argv = self._bwrap_command(spec, policy, config, tmp, tools, fds, bridge, image, drop)
            else:
                argv = self._landlock_command(policy, config, tmp, tools, fds, [str(stdout_path), str(stderr_path)])
            pass_fds = (*fds, *(bridge.child_fds if bridge else ()), *((channel.child_fd,) if channel else ()))
            outcome = self._supervise(policy, argv, pass_fds, cgroup, tmp, stdout_path, stderr_path,
                                      lambda proc: self._connect(proc, bridge, channel, gateway), drop)
        self._describe(outcome, spec, mechanism, who, limits, cgroup, network, config, image, ended)
        return outcome

    def _describe(self, outcome: RunOutcome, spec: RunSpec, mechanism: str, who: ident.Identity, limits: Limits,
                  cgroup: RunCgroup | None, network: str, config: dict, image: StoredImage | None, ended: dict) -> None:
        """What the run's record says of its sandbox: the mechanism, identity, limits, network and image, and
        what the releases found (leftover processes, stray Slurm jobs, the gateway's usage and egress)."""
        leftovers, stray_jobs, gateway_details = ended.get("leftovers"), ended.get("stray_jobs"), ended.get("gateway")
        outcome.details.update(sandbox=mechanism, agent_uid=who.uid, limits=limits.to_json(),
                               cgroup=sorted(cgroup.controllers) if cgroup else None,
                               network=network, seccomp=_seccomp_record(config) if config else None)
        if image is not None:  # what ran: the unpacked image (no engine), by its digest
            outcome.details.update(image=spec.image, image_id=image.digest, image_runner="bwrap-rootfs",
                                   image_source=image.manifest.get("source"))
        if leftovers:
            outcome.details["leftover_processes_killed"] = leftovers
        if stray_jobs:  # a Slurm job of the run's uid: only an escape could have submitted it
            outcome.details["slurm_jobs_cancelled"] = stray_jobs
        if who.is_root:  # only ever by the user's explicit option
            outcome.details["agent_as_root"] = True
        if mechanism == "landlock" and who.uid == os.geteuid():
            outcome.details["unsafe_same_uid"] = True
            # allowed only because nothing under test ran
            if spec.trusted and not self.policy_options.identity.same_uid:
                outcome.details["same_uid_reason"] = "the harness's own sample agent (a copy of its baseline)"
        if gateway_details is not None:
            outcome.details.update(gateway_details)
            outcome.details["gateway_confinement"] = ("tcp-port" if config.get("connect_ports") else
                                                      "network-namespace")

    def _supervise(self, policy: run_policy.SandboxPolicy, argv: list[str], pass_fds: tuple[int, ...],
                   cgroup: RunCgroup | None, tmp: Path, stdout_path: Path, stderr_path: Path,
                   connect: Callable[[subprocess.Popen], None], drop: HostDrop | None = None) -> RunOutcome:
        join = cgroup.joiner() if cgroup is not None else None
        if drop is not None:
            join = preexec(drop, join)
        start = time.monotonic()
        exceeded: tuple[str, str] | None = None
        timed_out = False
        with open(stdout_path, "ab") as out, open(stderr_path, "ab") as err:
            try:
                proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=launcher_env(),
                                        cwd="/", pass_fds=pass_fds, start_new_session=True, preexec_fn=join)
            except subprocess.SubprocessError:  # the preexec function failed in the child, which said why
                why = _last_line(stderr_path)
                raise RuntimeUnavailable(f"the local runtime could not start the sandbox: {why}") from None
            try:
                connect(proc)  # the agent starts only once its network is up
                next_disk = start
                while not wait_exit(proc, POLL_SECONDS):
                    now = time.monotonic()
                    if now - start >= policy.time_limit:
                        timed_out = True
                        break
                    if now >= next_disk:
                        if exceeded := _disk_exceeded(policy, tmp):
                            break
                        next_disk = now + DISK_POLL_SECONDS
            finally:
                # On a time or disk limit, an interrupt or any error: the whole run goes.
                self._stop(proc, cgroup)
        duration = time.monotonic() - start
        exit_code = None if (timed_out or exceeded) else proc.returncode
        if exceeded is None and not timed_out:
            exceeded = _limit_hit(exit_code, stderr_path, cgroup, policy.limits)
        outcome = RunOutcome(exit_code, timed_out, duration, stdout_path, stderr_path)
        if exceeded:  # a FAIL naming the limit, whatever the agent left (see run.killed_reason)
            name, message = exceeded
            outcome.note = outcome.killed = message
            outcome.details["limit_exceeded"] = name
        return outcome

    @staticmethod
    def _connect(proc: subprocess.Popen, bridge: SlirpNetwork | None, channel: ListenerChannel | None,
                 gateway: gateway_link.RunGateway | None) -> None:
        """Give the started sandbox its network: slirp4netns for ``bridge``; for ``gateway``, the listener its
        first process made goes to the gateway (it is already listening: the agent's connects queue)."""
        if bridge is not None:
            try:
                bridge.connect(proc)
            except NetworkSetupError as exc:
                raise RuntimeUnavailable(f"the local runtime could not give the agent its bridge network: "
                                         f"{exc}; --rexmle-network=host or none avoid slirp4netns") from None
        if channel is not None:  # made only for a gateway run
            try:
                listener = channel.receive(proc)
            except GatewayNetworkError as exc:
                raise RuntimeUnavailable(f"the local runtime could not connect the agent to the gateway: "
                                         f"{exc}") from None
            assert gateway is not None   # the channel exists only for a gateway run
            gateway.serve(listener)

    def _run_unsafe(self, spec: RunSpec, stdout_path: Path, stderr_path: Path) -> RunOutcome:
        argv, cwd = spec.argv, str(spec.cwd or spec.workspace)
        tools = agent_tools.folder_of(spec)
        staging.remove_tree(tools)
        path = agent_tools.agent_path(agent_tools.write_tools(tools, python=not spec.software_path))
        env = {**os.environ, **self.agent_environment(spec, path, os.environ.get("TMPDIR", "/tmp")),
               "HOME": str(spec.workspace)}
        # unsandboxed, the agent is the harness's own user: its name stays the host's
        env.update({key: os.environ[key] for key in ("USER", "LOGNAME") if key in os.environ})
        start = time.monotonic()
        with open(stdout_path, "ab") as out, open(stderr_path, "ab") as err:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                                    start_new_session=True)
            timed_out = False
            try:
                proc.wait(timeout=spec.time_limit)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                self._stop(proc, None)
        return RunOutcome(None if timed_out else proc.returncode, timed_out, time.monotonic() - start, stdout_path,
                          stderr_path, details={"sandbox": "none", "host_paths_hidden": False,
                                                # no isolation at all: whatever was asked, the host's network
                                                "network": "host"})

    @staticmethod
    def _stop(proc: subprocess.Popen, cgroup: RunCgroup | None) -> None:
        """End the run: SIGTERM lets the Landlock supervisor kill its whole tree; then the process group,
        the cgroup, and SIGKILL for whatever is left."""
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=KILL_GRACE_SECONDS)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if cgroup is not None:
            cgroup.kill()
        try:
            proc.wait(timeout=KILL_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


#: set once the session has said its network warnings (the controller, see plugin.py): runs stay quiet
SESSION_WARNED = "<session>"


def silence_network_warnings() -> None:
    _fallbacks_warned.add(SESSION_WARNED)


def _fallback_message(why: str) -> str:
    return (f"rexmle: --rexmle-network=bridge runs the local agents on the host's network, where they reach "
            f"services listening on the host's loopback: {why}; --rexmle-network=gateway (the default) or none "
            "keep them off it")


PORT_MODE_NOTE = ("--rexmle-network=gateway under Landlock without a network namespace (none can be created "
                  "here): each agent may open TCP connections to one port only, the gateway's on the host's "
                  "loopback, and no UDP, raw or unix socket (Landlock + seccomp); a host elsewhere listening on "
                  "that same port number would answer too. Bubblewrap, or a harness that may create namespaces "
                  "(root with CAP_SYS_ADMIN, or unprivileged user namespaces), gives the agent a network namespace "
                  "of its own instead")
MIN_PORT_ABI = 4  # Landlock's TCP connect/bind rules


def _landlock_gateway_mode() -> str:
    """How Landlock's agent gets the gateway: ``netns`` (a network namespace of its own, the launcher's),
    else ``port`` (Landlock's TCP connect rule for the gateway's host port, seccomp allowing only TCP
    streams); where neither can confine it, the session stops rather than run it unprotected."""
    global _own_netns
    if _own_netns is None:
        _own_netns = can_create_network_namespace()
    works, why = _own_netns
    if works:
        return "netns"
    from .sandbox.landlock import abi  # looked up when called, where tests replace it

    if abi() >= MIN_PORT_ABI:
        return "port"
    raise RuntimeUnavailable(
        f"--rexmle-network=gateway under Landlock needs a network namespace for the agent or Landlock's TCP "
        f"rules (ABI {MIN_PORT_ABI}+, this kernel has {abi()}), and this harness has neither (no namespace: "
        f"{why}); run the harness as root, allow unprivileged user namespaces (sysctl "
        "kernel.unprivileged_userns_clone=1 / user.max_user_namespaces), use bubblewrap, or choose "
        "--rexmle-network=none")


def _driver_libs() -> tuple[tuple[Path, str], ...]:
    from ..images.runnable import driver_libraries  # looked up when called, where tests replace it

    return driver_libraries()


def _programs(argv: list[str]) -> list[str]:
    """The programs an agent's command starts first: ``argv[0]``, and for ``sh -c 'VAR=x prog ...'`` the
    first program of the script (the usual form of ``--agent=command``), as far as a plain split tells."""
    if not argv:
        return []
    programs = [argv[0]]
    if os.path.basename(argv[0]) in ("sh", "bash", "dash") and len(argv) > 2 and argv[1] == "-c":
        try:
            words = shlex.split(argv[2])
        except ValueError:
            return programs
        words = list(itertools.dropwhile(lambda w: "=" in w and not w.startswith(("/", "=")), words))
        if words and not any(ch in words[0] for ch in "$`;|&<>()"):
            programs.append(words[0])
    return programs


def _resolve(command: str, path: str) -> str | None:
    """``command`` as ``execvpe`` finds it on the agent's ``path`` (None: not found; the agent's own
    exit status will say so)."""
    if "/" in command:
        return command
    return shutil.which(command, path=path)


def wait_exit(proc: subprocess.Popen, timeout: float) -> bool:
    """Whether ``proc`` has ended within ``timeout`` seconds, noticed the moment it exits.

    ``Popen.wait(timeout)`` polls with sleeps growing to 50 ms, which added 25 ms on average to every
    run; a pidfd (Linux 5.3+) becomes readable exactly when the child exits. Falls back to that
    polling where pidfds are missing."""
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd here, or the child is already reaped
        try:
            proc.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.poll(timeout * 1000)
    finally:
        os.close(fd)
    return proc.poll() is not None


@contextlib.contextmanager
def _identity_released(spec: RunSpec, who, owner: tuple[int, int], lease: Lease | None, tmp: Path, tools: Path,
                       ended: dict):
    """The run's identity, given back in one unbroken order once everything else of the run is released:
    every process and Slurm job of its uid killed (a backstop, whatever escaped), its scratch and tools
    removed, the run's folders handed back (before anything reads them), and only then the uid released
    for another run. A step that fails stops the ones after it, so a uid whose files were not handed
    back is never leased again."""
    try:
        yield
    finally:
        if lease is not None:
            ended["leftovers"] = kill_all_of(lease.uid)
            ended["stray_jobs"] = cancel_jobs_of(lease.uid)
        staging.remove_tree(tmp)  # any depth: the agent wrote it
        staging.remove_tree(tools)
        ident.hand_back([spec.workspace, spec.submission], who, owner)
        if spec.stage is not None:
            os.chown(spec.stage, *owner)
        if lease is not None:
            lease.release()


def _seccomp_record(config: dict) -> dict:
    """What ``run.json`` says of the run's seccomp filter: what a process inside observes (``Seccomp: 2`` in
    its status; IP sockets refused for ``none`` under Landlock or TCP streams only; ``socket(AF_UNIX)``)."""
    return {"mode": "filter", "network": config.get("seccomp_network") or config["network"],
            "unix_sockets": not config["deny_unix_sockets"]}


def _last_line(path: Path) -> str:
    """The last line a failed child wrote to the run's stderr log (the reason it gives)."""
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no reason given"
    return lines[-1][-500:] if lines else "no reason given"


def _disk_exceeded(policy: run_policy.SandboxPolicy, tmp: Path) -> tuple[str, str] | None:
    limits = policy.limits
    if limits.disk is not None:
        used = sum(disk_usage(path) for path in policy.read_write)  # workspace and submission
        if used > limits.disk:
            return "disk", exceeded_message(limits, "disk", f"workspace and submission use {used / 2**20:.0f} MiB")
    if limits.tmp is not None:
        used = disk_usage(tmp)
        if used > limits.tmp:
            return "tmp", exceeded_message(limits, "tmp", f"/tmp uses {used / 2**20:.0f} MiB")
    return None


def _limit_hit(exit_code: int | None, stderr_path: Path, cgroup: RunCgroup | None,
               limits: Limits) -> tuple[str, str] | None:
    """Which limit ended a failed run, from the cgroup's counters, the exit signal or the agent's last words."""
    if exit_code in (0, None):
        return None
    if cgroup is not None and cgroup.oom_killed():
        return "memory", exceeded_message(limits, "memory", "killed by the kernel's OOM killer")
    if exit_code == SIGXFSZ_EXIT:
        return "file_size", exceeded_message(limits, "file_size", "killed by SIGXFSZ")
    try:
        with open(stderr_path, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - 8192))
            tail = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    for name, markers in LIMIT_MARKERS.items():
        if getattr(limits, name) is not None and any(marker in tail for marker in markers):
            return name, exceeded_message(limits, name, "the agent's stderr reports the refusal")
    if cgroup is not None and cgroup.pids_refused():
        return "processes", exceeded_message(limits, "processes", "the cgroup refused a fork")
    return None


def world_writable(roots: tuple[Path, ...] | list[Path], limit: int = 200_000) -> str | None:
    """The first entry under ``roots`` that every user may write (a file or folder with o+w, links not
    followed), or None; the walk stops after ``limit`` entries (a venv has tens of thousands)."""
    seen = 0
    for root in roots:
        try:
            if os.lstat(root).st_mode & 0o002:
                return str(root)
        except OSError:
            continue
        for folder, dirs, files in os.walk(root):
            for name in (*dirs, *files):
                seen += 1
                path = os.path.join(folder, name)
                try:
                    mode = os.lstat(path).st_mode
                except OSError:
                    continue
                if mode & 0o002 and not stat.S_ISLNK(mode):
                    return path
                if seen >= limit:
                    return None
    return None


def refusal_here(image: str, sandbox: str = "auto") -> str | None:
    """``local_image_refusal`` for this machine: the sandbox ``--rexmle-sandbox=sandbox`` would pick here (probed
    once per process), or why none works; as root, also whether the run's uids can start bubblewrap (an image
    run's drop before exec). None: ``--rexmle-runtime=local`` runs ``image`` here. The Slurm runtime's probe
    job asks it on each node (:mod:`pytest_rexmle.runtime.node_check`)."""
    try:
        return LocalRuntime(sandbox=sandbox).image_refusal(image)
    except RuntimeUnavailable as exc:
        return str(exc)
