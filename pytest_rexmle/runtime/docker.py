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
* ``/opt/rexmle/lib/pytest_rexmle`` and ``/opt/rexmle/tasks`` — the harness's own package and task
  registry, read-only, so ``rexmle validate`` inside runs exactly the code that grades outside
  (no image rebuild when the harness changes);
* a read-only root filesystem with a private tmpfs ``/tmp``; no private answers by any path (they
  are never mounted; a hidden folder that happens to lie under a mounted one is covered by a tmpfs).

The container runs as a non-root user (the run folder's owner, or 1000:1000 when that is root — the
writable mounts are handed to that user first), with ``init`` as PID 1, no capabilities and
``no-new-privileges``. Every container carries labels (``rexmle.session``, ``rexmle.task``,
``rexmle.pid``/``rexmle.pid_start``/``rexmle.host`` of the harness process, ``rexmle.run_dir``) so
:meth:`DockerRuntime.sweep_orphans` can remove what a killed harness left behind.

Lifetime: the container is removed in every case — success, crash, time limit (killed), Ctrl-C,
SIGTERM to pytest (turned into an exception on the main thread while a run is in progress), and a
pytest-timeout in its default ``signal`` method (it raises in the main thread, so the ``finally``
runs). Only a hard kill of the harness (SIGKILL, pytest-timeout's ``thread`` method, which calls
``os._exit``) can leave a container, and the next session's sweep removes it.

Settings (environment, so they reach xdist workers unchanged): ``REXMLE_DOCKER_IMAGE`` (default image
for agents that name none; default ``rexmle/base:latest``), ``REXMLE_DOCKER_SHM_SIZE`` (``4g``),
``REXMLE_DOCKER_MEMORY`` (none), ``REXMLE_DOCKER_CPUS`` (4, capped at the engine's CPUs),
``REXMLE_DOCKER_PIDS`` (8192), ``REXMLE_DOCKER_RUNTIME`` (OCI runtime, e.g. ``nvidia`` or
``sysbox-runc``; default the engine's), ``REXMLE_DOCKER_READ_ONLY`` (``1``), ``REXMLE_SESSION``
(session label; default one per process).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base import SANDBOX_ROOT, Runtime, RunOutcome, RunSpec, RuntimeUnavailable

DEFAULT_IMAGE = "rexmle/base:latest"
HARNESS_ROOT = Path("/opt/rexmle")
LABEL = "rexmle"
POLL_SECONDS = 0.25
LOG_JOIN_SECONDS = 10.0
FALLBACK_UID = 1000
INSTALL_HINT = ("the docker runtime needs a running Docker engine and the Python SDK "
                "(`pip install docker`; on CI: .ci/docker-setup.sh)")


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived during a run: unwind like Ctrl-C so every ``finally`` (container removal) runs."""


@dataclass(frozen=True)
class DockerSettings:
    image: str = DEFAULT_IMAGE
    shm_size: str = "4g"
    memory: str | None = None
    cpus: float = 4.0
    pids: int = 8192
    oci_runtime: str | None = None
    read_only: bool = True

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "DockerSettings":
        env = os.environ if env is None else env
        return cls(image=env.get("REXMLE_DOCKER_IMAGE") or DEFAULT_IMAGE,
                   shm_size=env.get("REXMLE_DOCKER_SHM_SIZE") or "4g",
                   memory=env.get("REXMLE_DOCKER_MEMORY") or None,
                   cpus=float(env.get("REXMLE_DOCKER_CPUS") or 4.0),
                   pids=int(env.get("REXMLE_DOCKER_PIDS") or 8192),
                   oci_runtime=env.get("REXMLE_DOCKER_RUNTIME") or None,
                   read_only=(env.get("REXMLE_DOCKER_READ_ONLY") or "1") not in ("0", "false", "no"))


def _process_start(pid: int) -> str | None:
    """Start time of a process (clock ticks since boot): tells a live harness from a reused pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _pid_alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return start is None or _process_start(pid) in (None, start)


def _is_under(path: Path, parent: Path) -> bool:
    try:
        path.resolve().relative_to(parent.resolve())
        return True
    except ValueError:
        return False


class DockerRuntime(Runtime):
    name = "docker"

    def __init__(self, image: str | None = None, settings: DockerSettings | None = None, client: Any = None,
                 session: str | None = None, mount_harness: bool = True, **_: object) -> None:
        self.settings = settings or DockerSettings.from_env()
        if image:
            self.settings = DockerSettings(**{**self.settings.__dict__, "image": image})
        self._client = client
        self.session = session or os.environ.get("REXMLE_SESSION") or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.mount_harness = mount_harness

    # -- engine ----------------------------------------------------------------------------------------
    @property
    def client(self):
        if self._client is None:
            try:
                import docker
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

    def contract_paths(self, spec: RunSpec) -> dict[str, str]:
        return {"data": str(SANDBOX_ROOT / "data"), "workspace": str(SANDBOX_ROOT / "workspace"),
                "submission": str(SANDBOX_ROOT / "submission"), "instructions": str(SANDBOX_ROOT / "instructions.md")}

    # -- container description --------------------------------------------------------------------------
    def user_for(self, spec: RunSpec) -> tuple[int, int]:
        """The run folder's owner, unless that is root: agents never run as root."""
        st = spec.workspace.parent.stat()
        if st.st_uid == 0:
            return FALLBACK_UID, FALLBACK_UID
        return st.st_uid, st.st_gid

    def _harness_mounts(self) -> list[tuple[Path, str]]:
        import pytest_rexmle

        from ..task import tasks_root

        return [(Path(pytest_rexmle.__file__).resolve().parent, str(HARNESS_ROOT / "lib" / "pytest_rexmle")),
                (tasks_root().resolve(), str(HARNESS_ROOT / "tasks"))]

    def mounts(self, spec: RunSpec) -> list[tuple[Path, str, bool]]:
        """(host source, container target, read_only) for every bind mount; answers are never among them."""
        inside = self.contract_paths(spec)
        binds = [(spec.data_dir, inside["data"], True), (spec.workspace, inside["workspace"], False),
                 (spec.submission, inside["submission"], False), (spec.instructions, inside["instructions"], True)]
        if self.mount_harness:
            binds += [(src, dst, True) for src, dst in self._harness_mounts()]
        return binds

    def hidden_tmpfs(self, spec: RunSpec, binds: list[tuple[Path, str, bool]]) -> list[str]:
        """Container paths to cover with an empty tmpfs: hidden host folders that lie under a mount."""
        covers = []
        for hidden in spec.hidden:
            if not hidden.exists():
                continue
            for src, dst, _ in binds:
                if src.is_dir() and _is_under(hidden, src):
                    covers.append(str(Path(dst) / hidden.resolve().relative_to(src.resolve())))
        return sorted(set(covers))

    def argv(self, spec: RunSpec) -> list[str]:
        """The host interpreter's path means nothing inside an image: the image's python3 stands in."""
        argv = list(spec.argv)
        if argv and os.path.realpath(argv[0]) in {os.path.realpath(sys.executable), sys.executable}:
            argv[0] = "python3"
        return argv

    def environment(self, spec: RunSpec, image_env: list[str] | None = None) -> dict[str, str]:
        inside = self.contract_paths(spec)
        env = {"HOME": inside["workspace"], "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1", "TMPDIR": "/tmp",
               "PYTHONDONTWRITEBYTECODE": "1"}
        if self.mount_harness:
            image_pythonpath = next((e.split("=", 1)[1] for e in image_env or [] if e.startswith("PYTHONPATH=")), "")
            env["PYTHONPATH"] = ":".join(p for p in (str(HARNESS_ROOT / "lib"), image_pythonpath) if p)
            env["REXMLE_TASKS_DIR"] = str(HARNESS_ROOT / "tasks")
        env.update(spec.env)
        # The device request exposes exactly the assigned GPUs, renumbered from 0 inside the container:
        # the host ids in the contract would hide them from CUDA.
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(spec.gpus)))
        return env

    def labels(self, spec: RunSpec) -> dict[str, str]:
        pid = os.getpid()
        return {LABEL: "1", f"{LABEL}.session": self.session, f"{LABEL}.task": spec.task_id,
                f"{LABEL}.pid": str(pid), f"{LABEL}.pid_start": _process_start(pid) or "",
                f"{LABEL}.host": socket.gethostname(), f"{LABEL}.run_dir": str(spec.workspace.parent),
                f"{LABEL}.gpus": ",".join(spec.gpus)}

    def create_kwargs(self, spec: RunSpec, image: str, user: tuple[int, int], ncpu: int | None = None,
                      image_env: list[str] | None = None) -> dict[str, Any]:
        """Everything ``containers.create`` gets; a pure function of the spec, so tests can inspect it."""
        from docker.types import DeviceRequest, LogConfig, Mount

        binds = self.mounts(spec)
        mounts = [Mount(target=dst, source=str(src.resolve()), type="bind", read_only=ro) for src, dst, ro in binds]
        tmpfs = {"/tmp": "rw,exec,nosuid,nodev,mode=1777", "/var/tmp": "rw,nosuid,nodev,mode=1777"}
        for cover in self.hidden_tmpfs(spec, binds):
            tmpfs[cover] = "ro,size=4k,mode=0555"
        cpus = self.settings.cpus if not ncpu else min(self.settings.cpus, float(ncpu))
        cwd = Path(self.contract_paths(spec)["workspace"])
        if spec.cwd is not None:
            cwd = cwd / spec.cwd.relative_to(spec.workspace)
        kwargs: dict[str, Any] = dict(
            image=image, command=self.argv(spec), environment=self.environment(spec, image_env),
            working_dir=str(cwd), user=f"{user[0]}:{user[1]}", labels=self.labels(spec),
            name=f"rexmle-{spec.task_id}-{uuid.uuid4().hex[:10]}", hostname="rexmle-agent",
            mounts=mounts, tmpfs=tmpfs, read_only=self.settings.read_only, init=True,
            network_mode="none" if spec.network == "none" else "bridge",
            shm_size=self.settings.shm_size, nano_cpus=int(cpus * 1e9), pids_limit=self.settings.pids,
            cap_drop=["ALL"], security_opt=["no-new-privileges"], stdin_open=False, tty=False,
            log_config=LogConfig(type="json-file", config={"max-size": "200m", "max-file": "2"}),
            device_requests=[DeviceRequest(device_ids=list(spec.gpus), capabilities=[["gpu"]])] if spec.gpus else [],
        )
        if self.settings.memory:
            kwargs["mem_limit"] = self.settings.memory
            kwargs["memswap_limit"] = self.settings.memory  # no swap beyond the limit
        if self.settings.oci_runtime:
            kwargs["runtime"] = self.settings.oci_runtime
        return kwargs

    # -- running -------------------------------------------------------------------------------------------
    def _prepare_folders(self, spec: RunSpec, user: tuple[int, int]) -> None:
        """Hand the writable mounts to the container user (only needed, and only possible, as root)."""
        if os.geteuid() != 0:
            return
        for top in (spec.workspace, spec.submission):
            for root, dirs, files in os.walk(top):
                for name in [*dirs, *files]:
                    os.lchown(os.path.join(root, name), *user)
            os.chown(top, *user)

    def _image(self, spec: RunSpec):
        import docker.errors

        name = spec.image or self.settings.image
        try:
            return name, self.client.images.get(name)
        except docker.errors.ImageNotFound:
            raise RuntimeUnavailable(
                f"Docker image {name!r} is not on this machine; build it with `rexmle images build` "
                "(agents' images: `rexmle images build --agent NAME`) or set REXMLE_DOCKER_IMAGE") from None

    def run(self, spec: RunSpec) -> RunOutcome:
        spec.logs.mkdir(parents=True, exist_ok=True)
        stdout_path, stderr_path = spec.logs / "agent.stdout.log", spec.logs / "agent.stderr.log"
        image_name, image = self._image(spec)
        user = self.user_for(spec)
        self._prepare_folders(spec, user)
        kwargs = self.create_kwargs(spec, image_name, user, ncpu=self._engine_cpus(),
                                    image_env=(image.attrs.get("Config") or {}).get("Env"))
        details: dict[str, Any] = {"sandbox": "docker", "image": image_name, "image_id": image.id,
                                   "container": kwargs["name"], "gpus": list(spec.gpus), "user": kwargs["user"]}
        container = None
        threads: list[threading.Thread] = []
        restore = self._trap_sigterm()
        start = time.monotonic()
        timed_out = False
        try:
            container = self.client.containers.create(**kwargs)
            self._record(spec, container, secret=set(spec.secret_env))
            try:
                container.start()
            except Exception as exc:
                raise RuntimeUnavailable(f"Docker could not start the agent's container: {_api_message(exc)}") from None
            start = time.monotonic()
            threads = [self._stream(container, stdout_path, stdout=True),
                       self._stream(container, stderr_path, stdout=False)]
            state = self._wait(container, start + spec.time_limit)
            if state is None:
                timed_out = True
                self._kill(container)
                state = container.attrs.get("State", {})
            details["oom_killed"] = bool(state.get("OOMKilled"))
            exit_code = None if timed_out else state.get("ExitCode")
        finally:
            duration = time.monotonic() - start
            if container is not None:
                self._remove(container)
            for thread in threads:
                thread.join(LOG_JOIN_SECONDS)
            restore()
        note = "the container ran out of memory (OOM-killed)" if details.get("oom_killed") else None
        return RunOutcome(exit_code, timed_out, duration, stdout_path, stderr_path, note=note, details=details)

    def _engine_cpus(self) -> int | None:
        try:
            return int(self.client.info().get("NCPU") or 0) or None
        except Exception:
            return None

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
                  "pids_limit": host.get("PidsLimit"), "runtime": host.get("Runtime"), "cap_drop": host.get("CapDrop")}
        tmp = spec.logs / "docker.json.tmp"
        tmp.write_text(json.dumps(record, indent=2, sort_keys=True))
        tmp.replace(spec.logs / "docker.json")

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
        try:
            container.kill()
        except Exception:
            pass
        try:
            container.reload()
        except Exception:
            pass

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

    @staticmethod
    def _trap_sigterm():
        """On the main thread, SIGTERM becomes :class:`Terminated` for the duration of the run."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = signal.getsignal(signal.SIGTERM)

        def on_term(signum, frame):
            raise Terminated(f"received signal {signum}; the agent's container was removed")

        signal.signal(signal.SIGTERM, on_term)

        def restore() -> None:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)

        return restore

    # -- leftovers -----------------------------------------------------------------------------------------
    def sweep_orphans(self) -> int:
        """Remove this host's labelled containers whose harness process is gone (or is another process)."""
        host = socket.gethostname()
        removed = 0
        for container in self.client.containers.list(all=True, filters={"label": [LABEL, f"{LABEL}.host={host}"]}):
            labels = container.labels or {}
            try:
                pid = int(labels.get(f"{LABEL}.pid", ""))
            except ValueError:
                continue
            if _pid_alive(pid, labels.get(f"{LABEL}.pid_start") or None):
                continue
            self._remove(container)
            removed += 1
        return removed


def _api_message(exc: Exception) -> str:
    explanation = getattr(exc, "explanation", None)
    return str(explanation or exc)
