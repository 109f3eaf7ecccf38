"""The Docker runtime: one container per run, one pinned GPU per xdist worker.

Why a container when the local sandbox exists: agents bring their own software stack (CUDA, PyTorch,
nnU-Net, the agent framework itself) as an image, and a container gives hard limits (memory, CPUs,
processes, shared memory) plus a GPU that is *assigned*, not merely advertised.

What the agent sees (the same contract as the local runtime, at the same paths):

* ``/rexmle/data`` — the task's public folder, read-only;
* ``/rexmle/workspace`` (also ``$HOME`` and the working directory) and ``/rexmle/submission`` —
  the run folder's own ``workspace/`` and ``submission/``, bind-mounted read-write, so the harness
  grades ``<run>/submission`` on the host after the container is gone; nothing is copied back and
  nothing the agent left running can touch it any more;
* ``/rexmle/instructions.md`` — read-only;
* a read-only root filesystem with a private tmpfs ``/tmp``; no private answers by any path (they
  are never mounted; a hidden folder that happens to lie under a mounted one is covered by a tmpfs).

The container runs as a non-root user (a uid of the run's own for a root harness, else the run folder's
owner — the writable mounts are handed to it first), with ``init`` as PID 1, no capabilities,
``no-new-privileges``, and the project's seccomp profile (:mod:`.docker_seccomp`), which the *engine* installs
before the container's first process starts: nothing in the image decides whether it applies. ``run.json``'s
``seccomp`` records the profile's digest and the filter the kernel reports for that process, read from the
host (:func:`seccomp_in_force`). ``/proc/sys`` is read-only, as the engine always mounts it.
Every container carries labels (``rexmle.session``, ``rexmle.task``, ``rexmle.pid``/``rexmle.pid_start``/
``rexmle.host`` of the harness process, ``rexmle.run_dir``) so :meth:`DockerRuntime.sweep_orphans` can
remove what a killed harness left behind; labels, like the environment the engine records, are
host-side and never visible inside.

Limits (:meth:`DockerRuntime.container_limits`, rendered from the run's :class:`~.policy.SandboxPolicy`):
memory (swap included), processes, open files, file size, the ``/tmp`` tmpfs, shared memory and CPUs, from
``--rexmle-limit`` over the task's ``limits:``; one left unlimited gets the container default (``DEFAULT_*``
below). An OOM kill or a SIGXFSZ death is a FAIL naming the limit it broke (:meth:`DockerRuntime.exceeded_limit`).

Lifetime: the container is removed in every case — success, crash, time limit (killed), Ctrl-C,
SIGTERM to pytest (turned into an exception on the main thread while a run is in progress), and a
pytest-timeout in its default ``signal`` method (it raises in the main thread, so the ``finally``
runs). A hard kill of the harness (SIGKILL, pytest-timeout's ``thread`` method, which calls
``os._exit``) cannot stop the container from the host, so the container stops *itself*
(:meth:`DockerRuntime.command`); the exited container is removed by the next session's sweep.

What the agent can still learn: ``/proc/self/mountinfo`` names the host paths of its bind mounts. The
run's folders and the public data are bound from the run's neutral stage (``/var/tmp/rexmle-XXXX/...``,
see :mod:`.staging`), so no runs folder, cache or data root is named; the harness package's own path
shows. A path is not access, and the private answers are neither mounted nor under any mount.
Network: see :meth:`DockerRuntime.network_mode`; under ``gateway`` (the session default) the agent's only
peer is the gateway on its own ``127.0.0.1:8484`` (:meth:`DockerRuntime._network_holder`, root only).

Settings (environment, so they reach xdist workers unchanged): ``REXMLE_DOCKER_IMAGE`` (default image
for agents that name none; default ``rexmle/base:latest``), ``REXMLE_DOCKER_GRACE`` (10 s after the time
limit), ``REXMLE_DOCKER_RUNTIME`` (OCI runtime, e.g. ``nvidia`` or ``sysbox-runc``; default the
engine's), ``REXMLE_DOCKER_READ_ONLY`` (``1``), ``REXMLE_SESSION`` (session label; default one per
process). Resource limits are ``--rexmle-limit`` only: any other ``REXMLE_DOCKER_*`` variable stops the
session with that fix.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import resource
import socket
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..images.runnable import agent_of_image
from ..jsonfile import write_text_atomic
from ..limits import Limits, format_size
from ..paths import cache_home
from . import agent_tools, docker_seccomp, gateway_link, staging
from .base import RunOutcome, RunSpec, Runtime, RuntimeUnavailable, agent_logs, folder_owner, is_under, trap_sigterm
from .liveness import pid_alive, process_start
from .policy import IdentityPolicy, PolicyOptions, SandboxPolicy
from .sandbox.gateway_net import GatewayNetworkError, base_url, listener_in_namespace
from .sandbox.identity import Identity, hand_back, hand_over
from .sandbox.limits import SIGXFSZ_EXIT
from .sandbox.uids import UidRange, UidRangeError, allocate

DEFAULT_IMAGE = "rexmle/base:latest"
LABEL = "rexmle"
POLL_SECONDS = 0.25
LOG_JOIN_SECONDS = 10.0
FALLBACK_UID = 1000
#: a container's limit where the policy leaves one unlimited (a container always has each of these)
DEFAULT_MEMORY = 32 << 30      # capped by the engine's memory
DEFAULT_PIDS = 8192
DEFAULT_NOFILE = 65536
DEFAULT_FSIZE = 256 << 30      # per file: checkpoints are big, runaway logs are bigger
DEFAULT_TMP = 4 << 30
DEFAULT_SHM = 4 << 30
DEFAULT_CPUS = 4.0             # capped by the engine's CPUs
#: the engine-side settings read from the environment; limits are --rexmle-limit's
SETTINGS_ENV = ("REXMLE_DOCKER_IMAGE", "REXMLE_DOCKER_GRACE", "REXMLE_DOCKER_RUNTIME", "REXMLE_DOCKER_READ_ONLY")
#: the container kills itself this long after the time limit, so a SIGKILLed harness leaves nothing running
SELF_KILL_GRACE_SECONDS = 10.0
#: how long the container's first process may still be without its seccomp filter after the engine reports it
#: started (runc installs the filter right before it executes that process's program)
SECCOMP_SETTLE_SECONDS = 2.0
INSTALL_HINT = ("the docker runtime needs a running Docker engine and the Python SDK "
                "(`pip install docker`; start the engine with `sudo systemctl start docker` or `sudo dockerd &`)")


@dataclass(frozen=True)
class DockerSettings:
    """Engine-side settings (no limits: those are the run's policy, from ``--rexmle-limit`` and task.yaml)."""

    image: str = DEFAULT_IMAGE
    oci_runtime: str | None = None
    read_only: bool = True
    grace: float = SELF_KILL_GRACE_SECONDS

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DockerSettings:
        env = os.environ if env is None else env
        stale = sorted(k for k in env if k.startswith("REXMLE_DOCKER_") and k not in SETTINGS_ENV)
        if stale:
            raise RuntimeUnavailable(
                f"{', '.join(stale)}: Docker's limits are no longer read from the environment; use "
                "--rexmle-limit NAME=VALUE (memory, processes, open_files, file_size, tmp, shm, cpus), e.g. "
                "--rexmle-limit memory=64G --rexmle-limit cpus=8")
        return cls(image=env.get("REXMLE_DOCKER_IMAGE") or DEFAULT_IMAGE,
                   oci_runtime=env.get("REXMLE_DOCKER_RUNTIME") or None,
                   read_only=(env.get("REXMLE_DOCKER_READ_ONLY") or "1") not in ("0", "false", "no"),
                   grace=float(env.get("REXMLE_DOCKER_GRACE") or SELF_KILL_GRACE_SECONDS))


@dataclass(frozen=True)
class ContainerLimits:
    """The limits one container gets, in bytes / counts (what ``create_kwargs`` turns into engine options)."""

    memory: int
    pids: int
    nofile: int
    fsize: int
    tmp_size: int
    shm_size: int
    cpus: float
    #: seconds after which the container kills itself, whatever happened to the harness
    deadline: int

    def describe(self) -> dict[str, Any]:
        return {"memory": format_size(self.memory), "pids": self.pids, "nofile": self.nofile,
                "fsize": format_size(self.fsize), "tmp": format_size(self.tmp_size),
                "shm": format_size(self.shm_size), "cpus": self.cpus, "deadline_s": self.deadline}


class DockerRuntime(Runtime):
    name = "docker"
    #: nothing set: each limit the task leaves out gets the container default above (see container_limits)
    default_limits = Limits(memory=None, processes=None, file_size=None, disk=None, tmp=None)

    def __init__(self, image: str | None = None, settings: DockerSettings | None = None, client: Any = None,
                 session: str | None = None, agent_uids: str | None = None,
                 gateway: gateway_link.GatewayFactory | None = None, gateway_budget: str | None = None,
                 egress_allow: list[str] | tuple[str, ...] = (), limits: dict[str, str] | None = None,
                 **_: object) -> None:
        self.settings = settings or DockerSettings.from_env()
        if image:
            self.settings = dataclasses.replace(self.settings, image=image)
        self._client = client
        self._podman: bool | None = None  # asked of the engine once (_is_podman)
        self.session = session or os.environ.get("REXMLE_SESSION") or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.agent_uids = UidRange.parse(agent_uids)
        self.gateway = gateway or gateway_link.session_gateway_factory()
        # agents never run as uid 0 or as the harness's uid here: the identity exceptions do not apply
        self.policy_options = PolicyOptions(limits=dict(limits or {}), identity=IdentityPolicy(agent_uids),
                                            egress_allow=tuple(egress_allow), budget=gateway_budget)

    @classmethod
    def settings_options(cls, settings) -> dict:
        options = PolicyOptions.from_settings(settings).runtime_options()
        return {key: options[key] for key in ("limits", "agent_uids", "gateway_budget", "egress_allow")}

    @classmethod
    def from_settings(cls, settings) -> DockerRuntime:
        return cls(**cls.settings_options(settings), gateway=gateway_link.session_gateway_factory(settings))

    def network_notices(self, network: str) -> list[str]:
        """The gateway's listener is placed in the container's namespace with ``setns``, which needs root."""
        if network == "gateway" and os.geteuid() != 0:
            raise RuntimeUnavailable(
                "--rexmle-network=gateway on Docker places the gateway's listener inside the container's network "
                "namespace, which needs a root harness (setns); run the session as root, use the local runtime, "
                "or choose --rexmle-network=none")
        return []

    # -- engine ----------------------------------------------------------------------------------------
    @property
    def client(self):
        if self._client is None:
            try:
                import docker  # start-up: docker only where this runs
            except ImportError:
                raise RuntimeUnavailable(INSTALL_HINT) from None
            try:
                self._client = docker.from_env(timeout=120)
                self._client.ping()
            except Exception as exc:  # the SDK raises DockerException or requests errors
                self._client = None
                raise RuntimeUnavailable(f"{INSTALL_HINT}; the engine did not answer: {exc}") from None
        return self._client

    def check(self) -> None:
        self.client  # noqa: B018  (connects, or raises RuntimeUnavailable with the fix)

    # -- container description --------------------------------------------------------------------------
    def user_for(self, spec: RunSpec) -> tuple[int, int]:
        """The run folder's owner, unless that is root: agents never run as root (a root harness's
        run gets a uid of its own from ``--rexmle-agent-uids`` in :meth:`run` instead)."""
        st = spec.workspace.parent.stat()
        if st.st_uid == 0:
            return FALLBACK_UID, FALLBACK_UID
        return st.st_uid, st.st_gid

    def mounts(self, spec: RunSpec, policy: SandboxPolicy) -> list[tuple[Path, str, bool]]:
        """(host source, container target, read_only) for every bind mount: the policy's folders at their
        contract paths, then the agent's tools; answers are never among them."""
        inside = self.contract_paths(spec)
        binds = [(m.source, inside[m.role], not m.writable) for m in policy.mounts]
        tools = agent_tools.folder_of(spec)
        if tools.is_dir():  # the agent's tools (rexmle validate), written by run()
            binds.append((tools, str(agent_tools.INSIDE), True))
            # and where a login shell's PATH (/etc/profile resets it: Codex's `bash -lc`) still finds them
            binds += [(tools / name, f"/usr/local/bin/{name}", True) for name in agent_tools.COMMANDS
                      if (tools / name).is_file()]
        return binds

    @staticmethod
    def hidden_tmpfs(policy: SandboxPolicy, binds: list[tuple[Path, str, bool]]) -> list[str]:
        """Container paths to cover with an empty tmpfs: the policy's hidden folders that lie under a mount."""
        covers = []
        for hidden in policy.hidden:
            if not hidden.exists():
                continue
            for src, dst, _ in binds:
                if src.is_dir() and is_under(hidden, src):
                    covers.append(str(Path(dst) / hidden.resolve().relative_to(src.resolve())))
        return sorted(set(covers))

    def argv(self, spec: RunSpec) -> list[str]:
        """The host interpreter's path means nothing inside an image: the image's python3 stands in."""
        argv = list(spec.argv)
        if argv and os.path.realpath(argv[0]) in {os.path.realpath(sys.executable), sys.executable}:
            argv[0] = "python3"
        return argv

    def environment(self, spec: RunSpec, image_env: list[str] | None = None) -> dict[str, str]:
        image_path = next((e.split("=", 1)[1] for e in image_env or [] if e.startswith("PATH=")), None)
        path = f"{agent_tools.INSIDE}:{image_path or agent_tools.SYSTEM_PATH}"
        env = {"PYTHONDONTWRITEBYTECODE": "1", **self.agent_environment(spec, path)}
        # The device request exposes exactly the assigned GPUs, renumbered from 0 inside the container:
        # the host ids in the contract would hide them from CUDA.
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(spec.gpus)))
        return env

    def labels(self, spec: RunSpec, limits: ContainerLimits) -> dict[str, str]:
        """Host-side bookkeeping (the agent cannot read its own labels): who started it, for the sweep."""
        pid = os.getpid()
        return {LABEL: "1", f"{LABEL}.session": self.session, f"{LABEL}.task": spec.task_id,
                f"{LABEL}.pid": str(pid), f"{LABEL}.pid_start": process_start(pid) or "",
                f"{LABEL}.host": socket.gethostname(), f"{LABEL}.run_dir": str(spec.logs.parent),
                f"{LABEL}.gpus": ",".join(spec.gpus), f"{LABEL}.deadline_s": str(limits.deadline)}

    def container_limits(self, policy: SandboxPolicy, host_memory: int | None = None) -> ContainerLimits:
        """The policy's limits as the engine takes them; an unlimited one gets the container default.

        The default memory limit is 32 GiB or the engine's memory, whichever is smaller: without one a
        container may take the whole host (and its harness) down with it.
        """
        limits = policy.limits
        memory = limits.memory
        if memory is None:
            memory = min(DEFAULT_MEMORY, host_memory) if host_memory else DEFAULT_MEMORY
        return ContainerLimits(memory=memory, pids=limits.processes or DEFAULT_PIDS,
                               nofile=limits.open_files or _default_nofile(),
                               fsize=limits.file_size or DEFAULT_FSIZE, tmp_size=limits.tmp or DEFAULT_TMP,
                               shm_size=limits.shm or DEFAULT_SHM, cpus=limits.cpus or DEFAULT_CPUS,
                               deadline=int(math.ceil(policy.time_limit + self.settings.grace)))

    @staticmethod
    def network_mode(network: str) -> str:
        """``none`` stays offline; ``host`` shares the host's network (its loopback services included),
        only because the user asked for exactly that; ``gateway`` starts from ``none`` (the run then joins
        its network holder, see :meth:`_network_holder`); every other mode is the engine's bridge:
        outbound traffic works and the host's loopback services do not answer (the container has its own)."""
        if network == "gateway":
            return "none"
        return network if network in ("none", "host") else "bridge"

    def command(self, spec: RunSpec, limits: ContainerLimits) -> list[str]:
        """The agent's command under ``timeout -s KILL``: the container enforces its own deadline, so a
        harness killed with SIGKILL still leaves no agent running past ``time limit + grace``. Killing
        the ``timeout`` process ends the container too (``init`` exits with its only child). No filter is
        installed here: the engine installs the project's profile before ``init`` starts (:meth:`security_opt`)."""
        return ["timeout", "-s", "KILL", str(limits.deadline), *self.argv(spec)]

    @staticmethod
    def security_opt(profile_folder: Path | None = None) -> list[str]:
        """``no-new-privileges`` (setuid binaries in the image are useless) and the project's seccomp profile
        (:mod:`.docker_seccomp`), installed by the engine: nothing in the image runs before it, or without it.
        ``profile_folder``: the profile goes as a file there (Podman's service, which reads a path)."""
        seccomp = (docker_seccomp.file_security_opt(profile_folder) if profile_folder is not None
                   else docker_seccomp.security_opt())
        return ["no-new-privileges:true", seccomp]

    def _engine_security_opt(self) -> list[str]:
        return self.security_opt(_profile_folder() if self._is_podman() else None)

    def _is_podman(self) -> bool:
        """Podman's Docker-compatible service (``Podman Engine`` among the version's components)."""
        if self._podman is None:
            try:
                components = self.client.version().get("Components") or []
                self._podman = any("podman" in str(c.get("Name", "")).lower() for c in components)
            except Exception:  # an engine that does not say: Docker's API, JSON profile
                self._podman = False
        return self._podman

    def create_kwargs(self, spec: RunSpec, image: str, user: tuple[int, int], ncpu: int | None = None,
                      image_env: list[str] | None = None, host_memory: int | None = None,
                      policy: SandboxPolicy | None = None) -> dict[str, Any]:
        """Everything ``containers.create`` gets: the run's policy rendered for the engine; a pure function
        of the spec and policy, so tests can inspect it."""
        from docker.types import DeviceRequest, LogConfig, Mount, Ulimit  # start-up: docker only where this runs

        policy = policy or self.policy(spec)
        limits = self.container_limits(policy, host_memory)
        binds = self.mounts(spec, policy)
        mounts = [Mount(target=dst, source=str(src.resolve()), type="bind", read_only=ro) for src, dst, ro in binds]
        tmpfs = {"/tmp": f"rw,exec,nosuid,nodev,size={limits.tmp_size},mode=1777",
                 "/var/tmp": f"rw,nosuid,nodev,size={limits.tmp_size},mode=1777"}
        for cover in self.hidden_tmpfs(policy, binds):
            tmpfs[cover] = "ro,size=4k,mode=0555"
        cpus = limits.cpus if not ncpu else min(limits.cpus, float(ncpu))
        kwargs: dict[str, Any] = dict(
            image=image, command=self.command(spec, limits), environment=self.environment(spec, image_env),
            working_dir=str(self.workdir(spec)), user=f"{user[0]}:{user[1]}", labels=self.labels(spec, limits),
            name=f"rexmle-{spec.task_id}-{uuid.uuid4().hex[:10]}", hostname="rexmle-agent",
            mounts=mounts, tmpfs=tmpfs, read_only=self.settings.read_only, init=True,
            network_mode=self.network_mode(policy.network),
            shm_size=limits.shm_size, nano_cpus=int(cpus * 1e9), pids_limit=limits.pids,
            # no capability is left; the seccomp profile is the project's, installed by the engine
            cap_drop=["ALL"], security_opt=self._engine_security_opt(), stdin_open=False, tty=False,
            mem_limit=limits.memory, memswap_limit=limits.memory,  # no swap beyond the limit
            ulimits=[Ulimit(name="nofile", soft=limits.nofile, hard=limits.nofile),
                     Ulimit(name="nproc", soft=_nproc(limits.pids), hard=_nproc(limits.pids)),
                     Ulimit(name="fsize", soft=limits.fsize, hard=limits.fsize),
                     Ulimit(name="core", soft=0, hard=0)],
            log_config=LogConfig(type="json-file", config={"max-size": "200m", "max-file": "2"}),
            device_requests=[DeviceRequest(device_ids=list(policy.gpus), capabilities=[["gpu"]])] if policy.gpus else [],
        )
        if self.settings.oci_runtime:
            kwargs["runtime"] = self.settings.oci_runtime
        return kwargs

    # -- running -------------------------------------------------------------------------------------------
    def _image(self, spec: RunSpec):
        name = spec.image or self.settings.image
        try:
            return name, self.client.images.get(name)
        except docker_errors().ImageNotFound:
            agent = agent_of_image(name)
            build = f"`rexmle images build --agent {agent}`" if agent else (
                "`rexmle images build` (agents' images: `rexmle images build --agent NAME`)")
            raise RuntimeUnavailable(f"Docker image {name!r} is not on this machine; build it with {build} or set "
                                     "REXMLE_DOCKER_IMAGE") from None

    def run(self, spec: RunSpec) -> RunOutcome:
        spec.logs.mkdir(parents=True, exist_ok=True)
        image_name, image = self._image(spec)
        owner = self.user_for(spec)  # the run folder's owner, before its folders move to the neutral stage
        lease = None
        if os.geteuid() == 0:  # a uid of this run's own, never shared with a concurrent run
            try:
                lease = allocate(self.agent_uids)
            except (UidRangeError, OSError) as exc:
                raise RuntimeUnavailable(f"no agent uid for this run: {exc}") from None
        user = (lease.uid, lease.uid) if lease is not None else owner
        try:
            with staging.staged(spec) as view:  # bind sources the kernel names in mountinfo: the stage's
                staged = view.spec
                tools = agent_tools.write_tools(agent_tools.folder_of(staged))
                try:
                    outcome = self._run_container(staged, image_name, image, user)
                finally:
                    staging.remove_tree(tools)
                    # before anything reads them, and before the uid may serve another run
                    hand_back([staged.workspace, staged.submission], Identity(*user), folder_owner(staged.workspace))
        finally:
            if lease is not None:
                lease.release()
        outcome.details.update(view.details)
        if lease is not None:
            outcome.details["agent_uid"] = lease.uid
        return outcome

    def _run_container(self, spec: RunSpec, image_name: str, image, user: tuple[int, int]) -> RunOutcome:
        policy = self.policy(spec)  # once, on the staged folders the container binds
        if policy.network != "gateway":
            return self._run_agent_container(spec, policy, image_name, image, user)
        gateway = gateway_link.RunGateway(self.gateway, spec, policy)
        try:
            outcome = self._run_agent_container(gateway.agent_spec(spec, base_url()), policy, image_name, image, user,
                                                gateway)
        finally:
            details = gateway.close()  # the listener in the holder's namespace is shut down with it
        outcome.details.update(details)
        return outcome

    def _network_holder(self, spec: RunSpec, image_name: str, limits: ContainerLimits,
                        gateway: gateway_link.RunGateway):
        """A container with no network (``--network none``) holding the namespace the agent's container
        joins (``--network container:ID``), with the gateway's listener put into it before the agent
        starts: its connects never race the listener. It only sleeps, as nobody, without capabilities."""
        from docker.types import Ulimit  # start-up: docker only where this runs

        holder = self.client.containers.create(
            image=image_name, command=["timeout", "-s", "KILL", str(limits.deadline + 60), "sleep",
                                       str(limits.deadline + 60)],
            user="65534:65534", network_mode="none", hostname="rexmle-agent",
            labels={**self.labels(spec, limits), f"{LABEL}.role": "network"}, read_only=True, init=True,
            name=f"rexmle-{spec.task_id}-net-{uuid.uuid4().hex[:10]}", cap_drop=["ALL"],
            security_opt=self._engine_security_opt(), pids_limit=8, mem_limit="64m",
            # explicit: an engine's defaults may exceed its own limits (Podman's service, see _nproc); nproc counts
            # every process of uid 65534 on the host (all runs' holders), so it is not the holder's pids limit
            ulimits=[Ulimit(name="nofile", soft=64, hard=64),
                     Ulimit(name="nproc", soft=_nproc(DEFAULT_PIDS), hard=_nproc(DEFAULT_PIDS))])
        try:
            try:
                holder.start()
            except docker_errors().APIError as exc:
                raise RuntimeUnavailable(start_failure("the network holder", exc)) from None
            holder.reload()
            pid = int((holder.attrs.get("State") or {}).get("Pid") or 0)
            if not pid:
                raise RuntimeUnavailable("Docker started the network holder but reported no process for it")
            gateway.serve(listener_in_namespace(pid))
        except GatewayNetworkError as exc:
            self._remove(holder)
            raise RuntimeUnavailable(f"the gateway's listener could not be placed in the container's network: {exc}") from None
        except BaseException:
            self._remove(holder)
            raise
        return holder

    def _run_agent_container(self, spec: RunSpec, policy: SandboxPolicy, image_name: str, image,
                             user: tuple[int, int], gateway: gateway_link.RunGateway | None = None) -> RunOutcome:
        stdout_path, stderr_path = agent_logs(spec)
        hand_over([spec.workspace, spec.submission], Identity(*user))  # only needed, and only possible, as root
        info = self._engine_info()
        if info.get("SecurityOptions") is not None and _engine_seccomp(info) is None:
            raise RuntimeUnavailable("the Docker engine has no seccomp support (its kernel lacks it, or the daemon "
                                     "runs without it): agents' containers need the project's seccomp profile")
        host_memory = int(info.get("MemTotal") or 0) or None
        kwargs = self.create_kwargs(spec, image_name, user, ncpu=int(info.get("NCPU") or 0) or None,
                                    image_env=(image.attrs.get("Config") or {}).get("Env"),
                                    host_memory=host_memory, policy=policy)
        limits = self.container_limits(policy, host_memory)
        details: dict[str, Any] = {"sandbox": "docker", "image": image_name, "image_id": image.id,
                                   "container": kwargs["name"], "gpus": list(spec.gpus), "user": kwargs["user"],
                                   "network": kwargs["network_mode"], "limits": limits.describe()}
        container = holder = None
        threads: list[threading.Thread] = []
        restore = trap_sigterm()
        start = time.monotonic()
        timed_out = False
        try:
            if gateway is not None:
                holder = self._network_holder(spec, image_name, limits, gateway)
                kwargs["network_mode"] = f"container:{holder.id}"
                kwargs.pop("hostname", None)  # Docker refuses a hostname with a container network mode
            container = self._create(kwargs)
            self._record(spec, container, secret=set(spec.secret_env))
            try:
                container.start()
            except Exception as exc:
                raise RuntimeUnavailable(start_failure("the agent's container", exc)) from None
            start = time.monotonic()
            details["seccomp"] = self._seccomp_checked(container)
            threads = [self._stream(container, stdout_path, stdout=True),
                       self._stream(container, stderr_path, stdout=False)]
            state = self._wait(container, start + spec.time_limit)
            if state is None:
                timed_out = True
                self._kill(container)
                state = container.attrs.get("State", {})
            details["oom_killed"] = bool(state.get("OOMKilled"))
            exit_code = None if timed_out else state.get("ExitCode")
            # the container has ended: its streams end too, and are read whole before it is removed (a pump
            # that a busy host started late would otherwise find no container and leave an empty log)
            for thread in threads:
                thread.join(LOG_JOIN_SECONDS)
        finally:
            duration = time.monotonic() - start
            interrupted: KeyboardInterrupt | None = None
            for leftover in (container, holder):  # both, even when an interrupt comes during the first removal
                if leftover is not None:
                    try:
                        self._remove(leftover)
                    except KeyboardInterrupt as exc:
                        interrupted = interrupted or exc
            for thread in threads:
                thread.join(LOG_JOIN_SECONDS)
            if restore is not None:
                restore()
            if interrupted is not None:
                raise interrupted
        exceeded = self.exceeded_limit(limits, details["oom_killed"], exit_code)
        if exceeded:
            details["limit_exceeded"] = exceeded
        # a limit is a FAIL whatever the agent left
        return RunOutcome(exit_code, timed_out, duration, stdout_path, stderr_path, note=exceeded, details=details,
                          killed=exceeded)

    def _create(self, kwargs: dict[str, Any]):
        """``containers.create``, its refusal (an engine that cannot apply the seccomp profile, a bad option)
        told as the engine's sentence, not a traceback."""
        try:
            return self.client.containers.create(**kwargs)
        except docker_errors().APIError as exc:
            raise RuntimeUnavailable(f"Docker could not create the agent's container: {_api_message(exc)}") from None

    def _seccomp_checked(self, container) -> dict[str, Any]:
        """The filter in force (:func:`seccomp_in_force`); a container whose first process the kernel reports
        without a filter is stopped before the agent goes on: the engine ignored the profile.

        The engine reports a container started a moment before its first process has a filter: with
        ``no-new-privileges``, runc installs it as late as it can, right before it executes that process's
        program. So "no filter" is only the answer once it has held for :data:`SECCOMP_SETTLE_SECONDS`."""
        with contextlib.suppress(Exception):
            container.reload()
        deadline = time.monotonic() + SECCOMP_SETTLE_SECONDS
        while True:
            record = seccomp_in_force(container.attrs)
            mode = record["first_process"].get("mode")
            if mode is None or mode == "filter" or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if mode is not None and mode != "filter":
            self._kill(container)
            raise RuntimeUnavailable(f"the Docker engine started the agent's container without its seccomp filter "
                                     f"(the kernel reports seccomp mode {mode!r}); refusing to run the agent")
        return record

    @staticmethod
    def exceeded_limit(limits: ContainerLimits, oom_killed: bool, exit_code: int | None) -> str | None:
        """The limit the run broke, named for the FAIL reason (None when it broke none)."""
        if oom_killed:
            return f"memory limit of {format_size(limits.memory)} exceeded (the container was OOM-killed)"
        if exit_code == SIGXFSZ_EXIT:
            return f"file-size limit of {format_size(limits.fsize)} exceeded (the agent was killed by SIGXFSZ)"
        return None

    def _engine_info(self) -> dict:
        try:
            return self.client.info() or {}
        except Exception:
            return {}

    def _record(self, spec: RunSpec, container, secret: set[str]) -> None:
        """``logs/docker.json``: the container as the engine sees it (no environment values, ever)."""
        container.reload()
        host = container.attrs.get("HostConfig", {})
        config = container.attrs.get("Config", {})
        env_names = sorted(e.split("=", 1)[0] for e in config.get("Env") or [])
        record = {"id": container.id, "name": container.name, "image": config.get("Image"), "cmd": config.get("Cmd"),
                  "user": config.get("User"), "working_dir": config.get("WorkingDir"), "labels": config.get("Labels"),
                  "env_names": env_names, "secret_env_names": sorted(secret & set(env_names)),
                  "device_requests": host.get("DeviceRequests"), "network_mode": host.get("NetworkMode"),
                  "mounts": [{k: m.get(k) for k in ("Source", "Target", "ReadOnly")} for m in host.get("Mounts") or []],
                  "tmpfs": host.get("Tmpfs"), "read_only_rootfs": host.get("ReadonlyRootfs"), "init": host.get("Init"),
                  "shm_size": host.get("ShmSize"), "memory": host.get("Memory"), "nano_cpus": host.get("NanoCpus"),
                  "pids_limit": host.get("PidsLimit"), "runtime": host.get("Runtime"), "cap_drop": host.get("CapDrop"),
                  "security_opt": [_short_option(o) for o in host.get("SecurityOpt") or []], "ulimits": host.get("Ulimits"),
                  "memory_swap": host.get("MemorySwap")}
        write_text_atomic(spec.logs / "docker.json", json.dumps(record, indent=2, sort_keys=True))

    @staticmethod
    def _stream(container, path: Path, stdout: bool) -> threading.Thread:
        """Copy one of the container's streams into the run folder while it runs."""
        def pump() -> None:
            try:
                with open(path, "ab") as fh:
                    for chunk in container.logs(stream=True, follow=True, stdout=stdout, stderr=not stdout):
                        fh.write(chunk)
                        fh.flush()
            except Exception:  # the container vanished under us: the run is over, the log ends here
                pass

        thread = threading.Thread(target=pump, name=f"rexmle-docker-{'out' if stdout else 'err'}", daemon=True)
        thread.start()
        return thread

    def _wait(self, container, deadline: float) -> dict | None:
        """The final state, or None at the deadline. Polling keeps the main thread responsive to signals."""
        while True:
            state = self.client.api.inspect_container(container.id)["State"]
            if state.get("Status") in ("exited", "dead"):
                return state
            if time.monotonic() >= deadline:
                return None
            time.sleep(POLL_SECONDS)

    def _kill(self, container) -> None:
        with contextlib.suppress(Exception):
            container.kill()
        with contextlib.suppress(Exception):
            container.reload()

    @staticmethod
    def _remove(container) -> None:
        # A second Ctrl-C/SIGTERM while the engine removes the container must not strand it: finish the
        # removal, then let the interrupt continue.
        interrupted: KeyboardInterrupt | None = None
        for attempt in range(4):
            try:
                container.remove(force=True, v=True)
                break
            except KeyboardInterrupt as exc:
                interrupted = exc
            except Exception as exc:
                if "No such container" in str(exc) or "is already in progress" in str(exc):
                    break
                time.sleep(0.5 * (attempt + 1))
        if interrupted is not None:
            raise interrupted

    # -- leftovers -----------------------------------------------------------------------------------------
    def sweep_orphans(self) -> int:
        """Remove this host's labelled containers whose harness process is gone (or is another process)."""
        host = socket.gethostname()
        removed = 0
        # another session on this host sweeps too: a container it removes between the listing and the
        # per-container inspection is skipped (ignore_removed), not an error that stops this session's start
        for container in self.client.containers.list(all=True, filters={"label": [LABEL, f"{LABEL}.host={host}"]},
                                                     ignore_removed=True):
            labels = container.labels or {}
            try:
                pid = int(labels.get(f"{LABEL}.pid", ""))
            except ValueError:
                continue
            if pid_alive(pid, labels.get(f"{LABEL}.pid_start") or None):
                continue
            self._remove(container)
            removed += 1
        return removed


def docker_errors():
    """docker-py's error classes (imported where needed: the SDK is imported late, for start-up time)."""
    import docker.errors  # start-up: docker only where this runs

    return docker.errors


def start_failure(what: str, exc: Exception) -> str:
    """Why the engine would not start a container, with the fix where the engine's words name one."""
    message = _api_message(exc)
    if "timeout" in message:
        hint = "; the image needs `timeout` (coreutils or busybox) on its PATH"
    elif "container-init binary not found" in message or "catatonit" in message:
        hint = ("; the engine (Podman) has no init binary for --init: install catatonit "
                "(`apt-get install catatonit`) on the engine's host")
    elif "error setting rlimit" in message:
        hint = ("; the engine could not apply a resource limit above its own: lower it with --rexmle-limit "
                "(open_files=..., processes=...) or raise the engine's limits")
    else:
        hint = ""
    return f"the engine could not start {what}: {message}{hint}"


def _nproc(pids: int) -> int:
    """The run's processes limit as ``RLIMIT_NPROC`` too (the container's uid is the run's own, as in the local
    runtime), capped by this host's hard limit. An explicit value matters for Podman's Docker-compatible
    service: its default (past its own limit where it runs without CAP_SYS_RESOURCE) makes the OCI runtime
    refuse to start the container ("error setting rlimit type 6")."""
    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    return pids if hard == resource.RLIM_INFINITY else min(pids, hard)


def _default_nofile() -> int:
    """65536, or this host's hard limit when that is lower: the engine (without CAP_SYS_RESOURCE, as
    inside another container) cannot raise a container's limit above its own, and refuses to start it."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return DEFAULT_NOFILE if hard == resource.RLIM_INFINITY else min(DEFAULT_NOFILE, hard)


def _engine_seccomp(info: dict) -> str | None:
    """The engine's seccomp support (its default profile's name, ``builtin`` for Docker's), or None without it."""
    for option in info.get("SecurityOptions") or []:
        fields = dict(part.split("=", 1) for part in option.split(",") if "=" in part)
        if fields.get("name") == "seccomp":
            return fields.get("profile", "default")
    return None


def _process_seccomp(pid: int, proc: Path = Path("/proc")) -> dict[str, Any]:
    """The seccomp state of host process ``pid`` as the kernel reports it (``/proc/PID/status``): the mode
    (``filter`` when a filter is installed) and how many filters are stacked; ``unobserved`` says why not
    (a remote engine's process, or one that has already exited)."""
    fields: dict[str, str] = {}
    try:
        with open(proc / str(pid) / "status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
    except OSError as exc:
        return {"unobserved": f"the container's first process (host pid {pid}) could not be read: {exc.strerror}"}
    if "Seccomp" not in fields:
        return {"unobserved": "the kernel reports no seccomp state"}
    mode = {"0": "disabled", "1": "strict", "2": "filter"}.get(fields["Seccomp"], fields["Seccomp"])
    filters = fields.get("Seccomp_filters")
    return {"mode": mode, "filters": int(filters) if filters and filters.isdigit() else None}


def _in_container(pid: int, container_id: str, proc: Path) -> bool:
    """Whether ``pid``, as this process sees it, is in the container's cgroup: the engine's pid is its own PID
    namespace's, and a harness in another one (inside a container, a rootless engine) would read a stranger."""
    try:
        with open(proc / str(pid) / "cgroup", encoding="ascii", errors="replace") as handle:
            return bool(container_id) and container_id in handle.read()
    except OSError:
        return False


def seccomp_in_force(attrs: dict, proc: Path = Path("/proc")) -> dict[str, Any]:
    """run.json's ``seccomp``: the profile the harness asked for, whether the engine holds it for the container
    (its recorded ``SecurityOpt``), and what the kernel reports for the container's first process, which every
    process of the agent descends from: the filter in force, observed from the host, not from the image."""
    options = (attrs.get("HostConfig") or {}).get("SecurityOpt") or []
    pid = int((attrs.get("State") or {}).get("Pid") or 0)
    if not pid:
        observed = {"unobserved": "the container had already exited when the host looked (an agent of a few "
                                  "milliseconds)"}
    elif not _in_container(pid, str(attrs.get("Id") or ""), proc):
        observed = {"unobserved": f"the engine's pid {pid} is not the container's process as this harness sees it "
                                  "(another PID namespace: a harness in a container, a remote or rootless engine)"}
    else:
        observed = _process_seccomp(pid, proc)
    return {"profile": docker_seccomp.PROFILE_NAME, "digest": docker_seccomp.digest(), "installed_by": "engine",
            "engine_holds_profile": any(_is_profile(option) for option in options), "first_process": observed}


def _short_option(option: str) -> str:
    """A ``SecurityOpt`` entry for logs/docker.json: the seccomp profile by its name and digest, not its 12 kB."""
    if _is_profile(option):
        return f"seccomp={docker_seccomp.PROFILE_NAME} ({docker_seccomp.digest()})"
    return option if len(option) <= 200 else option[:200] + "..."


def _is_profile(option: str) -> bool:
    """The project's profile, as the JSON itself (Docker) or as the file holding it (Podman)."""
    if option == docker_seccomp.security_opt():
        return True
    return option.startswith("seccomp=/") and Path(option[len("seccomp="):]).name == docker_seccomp.profile_file(
        _profile_folder()).name


def _profile_folder() -> Path:
    return cache_home() / "seccomp"


def _api_message(exc: Exception) -> str:
    explanation = getattr(exc, "explanation", None)
    return str(explanation or exc)
