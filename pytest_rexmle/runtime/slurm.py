"""The Slurm runtime: each run is one Slurm job, submitted through submitit and watched with ``sacct``.

Why a scheduler runtime: a campaign is thousands of GPU-hours, and labs run it on the cluster they
have. The job does not re-implement isolation: on the node it runs :func:`pytest_rexmle.runtime.slurm_job.node_main`,
which hands the run to an *inner* provider (the bubblewrap sandbox by default, or Docker), so every
guarantee of those runtimes (private answers unreachable, read-only data, the agent's time limit,
nothing left running) holds on the node too. An Apptainer provider would be one more inner provider.

Shape of a session (see :mod:`pytest_rexmle.run.begin`): the runtime ``batches``, so the session
launches every selected run first (one ``sbatch`` each) and each test item then waits for its own job
and grades it on the submitting host. ``run.json`` keeps the job id; ``--rexmle-resume`` re-attaches
to jobs still queued or running instead of submitting them again.

Jobs are submitted through submitit's public API; their states come from ``sacct`` directly
(:mod:`.sacct`, one call for all jobs of the process); a job that
Slurm ends (TIMEOUT, CANCELLED, OUT_OF_MEMORY, ...) is a FAIL naming the state. NODE_FAIL and
PREEMPTED are resubmitted once by the harness (a fresh job, same run folder, empty submission).
"""

from __future__ import annotations

import atexit
import json
import math
import os
import pwd
import shlex
import shutil
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest_rexmle

from ..agent_output import log_tail
from ..gateway.upstream import PROXY_ENV
from ..images import store
from ..images.runnable import import_hint
from ..jsonfile import write_text_atomic
from ..paths import cache_home
from ..task import registry
from . import RUNTIMES
from .base import RunHandle, RunOutcome, RunSpec, Runtime, RuntimeUnavailable, agent_logs, trap_sigterm
from .record import RUN_JSON, RunRecord, write_run_record
from .sacct import ACCOUNTING
from .slurm_job import (
    HEARTBEAT_POINTER,
    OUTCOME_NAME,
    SPEC_NAME,
    node_main,
    outcome_from_json,
    read_spec,
    write_spec,
)

INNER_RUNTIMES = ("local", "docker")
#: Slurm states after which a job will not run again
FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED",
                "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT")
REQUEUE_ONCE = ("NODE_FAIL", "PREEMPTED")
SLURM_FOLDER = "slurm"
#: the job id, written by the harness the moment ``sbatch`` answers (before ``run.json`` has it)
JOB_ID_NOTE = "job_id"
INSTALL_HINT = ("the slurm runtime needs the Slurm client tools (sbatch, sacct, squeue) on PATH and a reachable "
                "cluster with accounting (slurmdbd); see docs/clusters.md (Running on a Slurm cluster)")


class SlurmJobError(Exception):
    """The job ended without running the agent to an outcome (the node could not start it): a harness error."""


@dataclass(frozen=True)
class SlurmSettings:
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    options: dict[str, str] = field(default_factory=dict)  # passed to sbatch as --KEY=VALUE
    inner: str = "local"
    inner_options: dict = field(default_factory=dict)
    detach: bool = False
    margin_seconds: float = 300.0   # Slurm --time = agent limit + this (a backstop; the inner runtime kills first)
    poll_seconds: float = 5.0       # one sacct for all jobs at most this often
    #: (what, path) the nodes must see at the same path: data, runs folder, Python environment
    shared_paths: tuple[tuple[str, Path], ...] = ()
    probe_seconds: float = 120.0    # how long the session-start probe job may wait for a node


def _state_name(raw: str) -> str:
    """``CANCELLED by 0`` -> ``CANCELLED``."""
    return (raw or "UNKNOWN").split()[0].upper()


class SlurmHandle(RunHandle):
    """A submitted job: its id and the job log submitit writes (both change when it is resubmitted)."""

    runtime: SlurmRuntime  # polls, forgets and resubmits through its runtime's job table

    def __init__(self, runtime: SlurmRuntime, spec: RunSpec, job: tuple[str, Path], folder: Path,
                 attempts: int = 1) -> None:
        super().__init__(runtime, spec)
        (self.job_id, self.stderr), self.folder, self.attempts = job, folder, attempts
        self.submitted = datetime.now(UTC).isoformat()

    def record(self) -> dict:
        return {"slurm": {"job_id": self.job_id, "folder": str(self.folder), "attempts": self.attempts,
                          "submitted": self.submitted, "detached": self.runtime.settings.detach,
                          "stderr": str(self.stderr)}}

    def info(self, mode: str = "cache") -> dict:
        return ACCOUNTING.get_info(self.job_id, mode=mode)

    def state(self, mode: str = "cache") -> str:
        return _state_name(self.info(mode).get("State", ""))

    def wait(self) -> RunOutcome:
        """Poll until the job is over; an interrupt leaves the job tracked, so ``close`` can cancel it."""
        runtime = self.runtime
        while True:
            state = runtime.poll_state(self)
            if state in FINAL_STATES:
                break
            time.sleep(min(1.0, runtime.settings.poll_seconds))
        runtime.forget(self)
        if state in REQUEUE_ONCE and self.attempts < 2:
            runtime.resubmit(self, state)
            return self.wait()
        return self._outcome(state)

    def _outcome(self, state: str) -> RunOutcome:
        outcome_path = self.folder / OUTCOME_NAME
        if state == "COMPLETED" and outcome_path.is_file():
            return outcome_from_json(json.loads(outcome_path.read_text()))
        info = self.info()
        stdout, stderr = agent_logs(self.spec)
        if state in ("COMPLETED", "FAILED") and not outcome_path.is_file():
            raise SlurmJobError(f"Slurm job {self.job_id} ended {state} without running the agent: "
                                f"{log_tail(self.stderr, 600) or '(no job log)'}")
        limit = info.get("Timelimit") or "?"
        detail = f"Slurm job {self.job_id} ended {info.get('State') or state}"
        detail += f" after {info.get('Elapsed') or '?'} (Slurm --time {limit})" if state == "TIMEOUT" else \
            f" after {info.get('Elapsed') or '?'} on {info.get('NodeList') or '?'}"
        if self.attempts > 1:
            detail += f" (attempt {self.attempts}; it was resubmitted once already)"
        duration = _seconds(info.get("Elapsed"))
        return RunOutcome(None, state in ("TIMEOUT", "DEADLINE"), duration, stdout, stderr,
                          note=detail, killed=detail,
                          details={"slurm_state": state, "node": info.get("NodeList"), "gpus": []})


def _seconds(elapsed: str | None) -> float:
    """sacct's ``Elapsed`` (``[D-]HH:MM:SS``) in seconds (0 when there is none)."""
    return round((slurm_minutes_of(elapsed or "") or 0) * 60)


class SlurmRuntime(Runtime):
    name = "slurm"
    batches = True

    def __init__(self, settings: SlurmSettings | None = None, **_: object) -> None:
        self.settings = settings or SlurmSettings()
        if self.settings.inner not in INNER_RUNTIMES:
            raise RuntimeUnavailable(f"--rexmle-slurm-inner must be one of {', '.join(INNER_RUNTIMES)}, "
                                     f"got {self.settings.inner!r}")
        self._live: dict[str, SlurmHandle] = {}
        self._inner: Runtime | None = None
        self._lock = threading.Lock()
        self._cluster_gpus: bool | None = None
        self._last_poll = 0.0
        self._restore_sigterm: Callable[[], None] | None = None  # set while SIGTERM raises Terminated (base.py): jobs are cancelled on the way out
        self._atexit = False

    @classmethod
    def from_settings(cls, settings) -> SlurmRuntime:
        # the node builds its inner runtime as this session would have (forced sandbox, limit overrides);
        # an unknown inner name is refused by __init__ with the choices
        inner_options = (RUNTIMES.load(settings.slurm_inner).settings_options(settings)
                         if settings.slurm_inner in INNER_RUNTIMES else {})
        data = ("synthetic-data cache", cache_home()) if settings.data == "synthetic" else ("data root", settings.data_dir)
        shared = (data, ("runs folder", settings.runs_dir), ("Python interpreter", job_python()),
                  ("pytest_rexmle package", Path(pytest_rexmle.__file__).parent))
        if settings.upstream_proxy:
            # the node's gateway reads it from the job's environment, which sbatch copies from this process's:
            # the value (it may hold credentials) is never written into a job script on the shared file system
            os.environ[PROXY_ENV] = settings.upstream_proxy
        return cls(SlurmSettings(shared_paths=shared,
                                 probe_seconds=float(os.environ.get("REXMLE_SLURM_PROBE_SECONDS") or 120.0),
                                 partition=settings.slurm_partition, account=settings.slurm_account,
                                 qos=settings.slurm_qos, options=dict(settings.slurm_options),
                                 inner=settings.slurm_inner, inner_options=inner_options,
                                 detach=settings.slurm_detach,
                                 poll_seconds=float(os.environ.get("REXMLE_SLURM_POLL_SECONDS") or 5.0),
                                 margin_seconds=float(os.environ.get("REXMLE_SLURM_MARGIN_SECONDS") or 300.0)))

    # -- interface ---------------------------------------------------------------------------------------
    @property
    def isolation(self) -> str:
        return self.settings.inner

    def inner(self) -> Runtime:
        """The provider that isolates the agent on the node (built once: it may probe the machine)."""
        if self._inner is None:
            self._inner = RUNTIMES.load(self.settings.inner)(**self.settings.inner_options)
        return self._inner

    def check(self) -> None:
        try:
            import submitit  # noqa: F401
        except ImportError:
            raise RuntimeUnavailable("the slurm runtime needs submitit (`pip install 'submitit>=1.5'`)") from None
        for tool in ("sbatch", "sacct", "squeue", "scancel"):
            if not shutil.which(tool):
                raise RuntimeUnavailable(f"{tool} not found. {INSTALL_HINT}")
        probe = subprocess.run(["sacct", "-n", "-X", "-j", "1", "-o", "JobID"], capture_output=True, text=True)
        if probe.returncode != 0:
            raise RuntimeUnavailable(f"sacct does not answer ({probe.stderr.strip()[:200]}); job states are "
                                     f"read from accounting. {INSTALL_HINT}")
        self.inner().check()
        if self.settings.shared_paths and not os.environ.get("PYTEST_XDIST_WORKER"):
            self.probe_shared_paths()

    def preflight(self, time_limit: float) -> list[str]:
        """What sbatch would refuse at the first submission, read from ``sinfo`` and ``sacctmgr`` at session
        start: a partition that is not there, one whose time limit is shorter than the jobs ask for, an account
        this user cannot charge. Nothing when the tools are missing (``check`` says so)."""
        table = partitions()
        if table is None:
            return []
        minutes = self.slurm_minutes(time_limit) if time_limit else None
        problems = partition_problems(table, self.settings.partition, minutes, self.settings.margin_seconds)
        if self.settings.account:
            problems += account_problems(self.settings.account, user_accounts())
        return problems

    def check_image(self, image: str) -> None:
        """An image agent on the bubblewrap inner runtime runs from the shared image cache: the image must be
        imported (checked here, the cache being shared) and a node must run bubblewrap with user
        namespaces and see the image (a probe job says what it lacks)."""
        if self.settings.inner != "local":
            return

        if store.find(image) is None:
            raise RuntimeUnavailable(f"the slurm runtime cannot run image {image!r}: it is not in the image cache "
                                     f"({store.images_home()}, which the nodes must share); {import_hint(image)}")
        if self.settings.shared_paths and not os.environ.get("PYTEST_XDIST_WORKER"):
            sandbox = str(self.settings.inner_options.get("sandbox") or "auto")
            command = [str(job_python()), "-m", "pytest_rexmle.runtime.node_check", "--sandbox", sandbox, image]
            missing = self._probe_job([shlex.join(command)])
            if missing:
                raise RuntimeUnavailable(f"the compute nodes cannot run image {image!r}: " + "; ".join(missing))

    def _sbatch_probe(self, lines: list[str], runs: Path) -> tuple[str, str, list[str] | None] | None:
        """Run ``lines`` as a tiny job whose output goes to a fresh file in the runs folder ``runs`` (removed
        afterwards): None when no node took it within ``probe_seconds`` (the job is cancelled), else (job id,
        sbatch's stderr, the job's ``missing ...`` lines, or None when its output never arrived here)."""
        runs.mkdir(parents=True, exist_ok=True)
        out = runs / f".slurm-probe-{uuid.uuid4().hex[:12]}.out"
        argv = ["sbatch", "--wait", "--parsable", "--job-name=rexmle-probe", "--time=2", "-o", str(out),
                "--wrap", "; ".join(lines)]
        argv += [f"--{k}={v}" for k in ("partition", "account", "qos") if (v := getattr(self.settings, k))]
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                stdout, stderr = proc.communicate(timeout=self.settings.probe_seconds)
            except subprocess.TimeoutExpired:
                proc.kill()
                job_id = proc.communicate()[0].strip().split(";")[0]
                if job_id:
                    subprocess.run(["scancel", job_id], capture_output=True)
                return None
            missing = [line.removeprefix("missing ") for line in out.read_text().splitlines()
                       if line.startswith("missing ")] if out.exists() else None
            return stdout.strip(), stderr.strip(), missing
        finally:
            out.unlink(missing_ok=True)

    def _probe_job(self, lines: list[str]) -> list[str] | None:
        """Run ``lines`` as a tiny job; returns its ``missing ...`` lines (None: no node within the wait)."""
        runs = dict(self.settings.shared_paths).get("runs folder")
        if runs is None:
            return None
        probe = self._sbatch_probe(lines, runs)
        if probe is None:
            warnings.warn(f"rexmle: the probe job found no free node within {self.settings.probe_seconds:.0f} s",
                          stacklevel=1)
            return None
        job_id, stderr, missing = probe
        if not job_id or missing is None:
            raise RuntimeUnavailable(f"sbatch could not run the probe job: {stderr[:300]}")
        return missing

    def probe_shared_paths(self) -> None:
        """A tiny job checks that a node sees the data, the runs folder and this Python at the same paths.

        Without it a non-shared folder shows up as twenty identical FAILs hours later. The runs folder gets
        a fresh token file, so a node-local folder that merely has the same name does not pass.
        """
        runs = dict(self.settings.shared_paths).get("runs folder")
        # a path missing here too (data not prepared yet) is not a sharing problem: the items say what to do
        checks = [(what, path) for what, path in self.settings.shared_paths if what != "runs folder" and path.exists()]
        if runs is None:
            return
        runs.mkdir(parents=True, exist_ok=True)
        token = runs / f".slurm-probe-{uuid.uuid4().hex[:12]}"
        token.write_text("rexmle")
        lines = [f"test -e {shlex.quote(str(token))} || echo {shlex.quote('missing runs folder ' + str(runs))}"]
        for what, path in checks:
            lines.append(f"test -e {shlex.quote(str(path))} || echo {shlex.quote(f'missing {what} {path}')}")
        try:
            probe = self._sbatch_probe(lines, runs)
        finally:
            token.unlink(missing_ok=True)
        if probe is None:
            warnings.warn(f"rexmle: the shared-filesystem probe job found no free node within "
                          f"{self.settings.probe_seconds:.0f} s; make sure {runs} and the data are on a filesystem "
                          f"the nodes share", stacklevel=1)
            return
        job_id, stderr, missing = probe
        if not job_id:  # no job id: sbatch itself refused (partition, account, ...)
            raise RuntimeUnavailable(f"sbatch could not run the shared-filesystem probe: {stderr[:300]}")
        if missing is None:
            raise RuntimeUnavailable(f"the runs folder {runs} is not shared with the compute nodes (the probe "
                                     f"job's output never arrived here); put it on a shared filesystem "
                                     f"(--rexmle-runs-dir)")
        if missing:
            raise RuntimeUnavailable("the compute nodes do not see these paths (they must be on a filesystem "
                                     "shared with this host, at the same path): " + "; ".join(missing))

    def contract_paths(self, spec: RunSpec) -> dict[str, str]:
        return self.inner().contract_paths(spec)

    def run(self, spec: RunSpec) -> RunOutcome:
        return self.launch(spec).wait()

    def launch(self, spec: RunSpec) -> SlurmHandle:
        folder = spec.logs.parent / SLURM_FOLDER
        write_spec(folder / SPEC_NAME, spec, self.settings.inner, self.settings.inner_options)
        job = self._submit(spec, folder)
        handle = SlurmHandle(self, spec, job, folder)
        self._track(handle)
        return handle

    def attach(self, record: dict, run_dir: Path) -> SlurmHandle | None:
        slurm = record.get("slurm") or {}
        folder = Path(slurm.get("folder") or run_dir / SLURM_FOLDER)
        job_id = slurm.get("job_id") or _noted_job_id(folder)
        if not job_id or not (folder / SPEC_NAME).is_file():
            return None
        spec = read_spec(folder / SPEC_NAME)[0]
        stderr = Path(slurm["stderr"]) if slurm.get("stderr") else _job_stderr(folder, str(job_id))
        handle = SlurmHandle(self, spec, (str(job_id), stderr), folder, attempts=int(slurm.get("attempts", 1)))
        handle.submitted = slurm.get("submitted") or handle.submitted
        known = handle.state(mode="cache") != "UNKNOWN"  # e.g. the session's watcher said how it ended
        if (not known and handle.state(mode="force") == "UNKNOWN" and not (folder / OUTCOME_NAME).is_file()
                and _controller_state(str(job_id)) is None):
            return None  # neither accounting nor the controller has heard of it: nothing to wait for
        self._track(handle)
        return handle

    def close(self) -> None:
        """Cancel this session's jobs still queued or running (all of them at once), unless detached."""
        with self._lock:
            ids = sorted(self._live)
            self._live.clear()
        if self._restore_sigterm is not None and threading.current_thread() is threading.main_thread():
            self._restore_sigterm()
            self._restore_sigterm = None
        if not self.settings.detach:
            self.cancel_jobs(ids)

    # -- submission ----------------------------------------------------------------------------------------
    def slurm_minutes(self, time_limit: float) -> int:
        return max(1, math.ceil((time_limit + self.settings.margin_seconds) / 60))

    def gpus_for(self, spec: RunSpec) -> int:
        """The task's GPU count, when the cluster has GPUs at all (a CPU-only test cluster runs CPU jobs)."""
        try:
            wanted = registry().get(spec.task_id).gpus
        except Exception:
            wanted = len(spec.gpus)
        if wanted and self._cluster_gpus is None:
            args = ["sinfo", "-h", "-o", "%G"] + (["-p", self.settings.partition] if self.settings.partition else [])
            self._cluster_gpus = "gpu" in subprocess.run(args, capture_output=True, text=True).stdout
        return wanted if self._cluster_gpus else 0

    def parameters(self, spec: RunSpec) -> dict:
        gpus = self.gpus_for(spec)
        params: dict = {"job_name": f"rexmle-{spec.task_id}", "time": self.slurm_minutes(spec.time_limit),
                        "use_srun": False, "signal_delay_s": 60, "stderr_to_stdout": False,
                        "setup": [f"export REXMLE_SLURM_GRES_GPUS={gpus}"],
                        "additional_parameters": {"no-requeue": True, **self.settings.options}}
        params.update({key: value for key in ("partition", "account", "qos") if (value := getattr(self.settings, key))})
        if gpus:
            params["gres"] = f"gpu:{gpus}"
        return params

    def _submit(self, spec: RunSpec, folder: Path) -> tuple[str, Path]:
        import submitit  # start-up: submitit only where this runs

        executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=0, python=shlex.quote(str(job_python())))
        executor.update_parameters(**self.parameters(spec))
        job = executor.submit(node_main, str(folder / SPEC_NAME))
        job_id = str(job.job_id)
        (folder / JOB_ID_NOTE).write_text(job_id)  # a session killed before run.json has it still re-attaches
        ACCOUNTING.register(job_id)
        return job_id, Path(job.paths.stderr)

    def resubmit(self, handle: SlurmHandle, state: str) -> None:
        """Preemption or node failure is not the agent's fault: run it again once, from an empty submission."""
        for child in handle.spec.submission.iterdir():
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        (handle.folder / OUTCOME_NAME).unlink(missing_ok=True)
        handle.job_id, handle.stderr = self._submit(handle.spec, handle.folder)
        handle.attempts += 1
        _append_run_record(handle.spec, {"requeued_after": state, **handle.record()})
        self._track(handle)

    # -- bookkeeping ---------------------------------------------------------------------------------------
    def _track(self, handle: SlurmHandle) -> None:
        with self._lock:
            self._live[handle.job_id] = handle
        if self._restore_sigterm is None:
            self._restore_sigterm = trap_sigterm()
        if not self._atexit:
            atexit.register(self.close)  # a session that dies on an exception still cancels its jobs
            self._atexit = True

    def forget(self, handle: SlurmHandle) -> None:
        with self._lock:
            self._live.pop(handle.job_id, None)

    def poll_state(self, handle: SlurmHandle) -> str:
        """One ``sacct`` for every job of the session at most every ``poll_seconds``."""
        now = time.monotonic()
        mode = "cache"
        if now - self._last_poll >= self.settings.poll_seconds:
            mode, self._last_poll = "force", now
        return handle.state(mode=mode)

    # -- the session's watcher (schedule/executor.py): no process per queued job ----------------------------------
    final_states = FINAL_STATES

    def hand_off(self, handle: RunHandle, heartbeat: Path | None = None) -> str | None:
        assert isinstance(handle, SlurmHandle)
        self.forget(handle)  # this process's close() must not cancel it: the session's watcher owns it now
        pointer = handle.folder / HEARTBEAT_POINTER  # the job reads it (slurm_job.watch_session)
        if heartbeat is not None and not self.settings.detach:
            write_text_atomic(pointer, str(heartbeat), 0o644)
        else:
            pointer.unlink(missing_ok=True)
        return handle.job_id

    @classmethod
    def job_states(cls, job_ids: list[str]) -> dict[str, dict[str, str]]:
        """One ``sacct`` for every job id (accounting learns of a job a moment after ``sbatch``)."""
        for job_id in job_ids:
            ACCOUNTING.register(job_id)
        ACCOUNTING.update()
        states = {}
        for job_id in job_ids:
            info = ACCOUNTING.get_info(job_id, mode="cache")
            if info.get("State"):
                states[job_id] = {**info, "state": _state_name(info["State"])}
        return states

    def known_ended(self, job_id: str, record: dict[str, str]) -> None:
        ACCOUNTING.seed(job_id, {k: v for k, v in record.items() if k != "state"})
        self._last_poll = time.monotonic()  # the first poll of the attached handle reads this row

    @classmethod
    def cancel_jobs(cls, job_ids: list[str]) -> None:
        if job_ids:
            subprocess.run(["scancel", *job_ids], capture_output=True)

    # -- rexmle status ---------------------------------------------------------------------------------------
    @classmethod
    def live_states(cls, records: list[dict]) -> dict[str, dict]:
        ids = {str((r.get("slurm") or {}).get("job_id")): r for r in records if (r.get("slurm") or {}).get("job_id")}
        if not ids:
            return {}
        states = cls.job_states(list(ids))
        out = {}
        for job_id, record in ids.items():
            if info := states.get(job_id):
                out[record["run_dir"]] = {"job_id": job_id, "state": info["state"],
                                          "reason": info.get("Reason"), "node": info.get("NodeList"),
                                          "elapsed": _seconds(info.get("Elapsed")), "limit": info.get("Timelimit")}
            elif (held := _controller_state(job_id)) is not None:  # submitted, not yet in accounting
                out[record["run_dir"]] = {"job_id": job_id, "state": _state_name(held["state"]),
                                          "reason": held["reason"] or None, "node": held["node"] or None,
                                          "elapsed": None, "limit": held["limit"] or None}
        return out


def slurm_minutes_of(text: str) -> float | None:
    """A Slurm duration (sinfo's ``%l``: ``[D-]HH:MM:SS``, ``HH:MM:SS``, ``MM:SS``, ``MM``) in minutes; None for
    no limit (``infinite``, ``UNLIMITED``, ``n/a``) or a value that is not one."""
    days, _, rest = text.strip().rpartition("-")
    parts = rest.split(":")
    if not all(p.isdigit() for p in parts) or not 1 <= len(parts) <= 3 or (days and not days.isdigit()):
        return None
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS
        hours, mins, secs = (int(p) for p in parts + ["0"] * (3 - len(parts)))
    elif len(parts) == 3:
        hours, mins, secs = (int(p) for p in parts)
    else:  # MM, MM:SS
        hours, mins, secs = 0, int(parts[0]), int(parts[1]) if len(parts) == 2 else 0
    return (int(days or 0) * 24 + hours) * 60 + mins + secs / 60


def partitions() -> dict[str, tuple[float | None, bool]] | None:
    """Each partition's time limit in minutes (None: unlimited) and whether it is the default one (sinfo marks
    it ``*``); None where ``sinfo`` is missing or does not answer."""
    if not shutil.which("sinfo"):
        return None
    proc = subprocess.run(["sinfo", "-h", "-o", "%P|%l"], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        return None
    table: dict[str, tuple[float | None, bool]] = {}
    for line in proc.stdout.splitlines():
        name, sep, limit = line.strip().partition("|")
        if sep and name:
            table[name.rstrip("*")] = (slurm_minutes_of(limit), name.endswith("*"))
    return table


def partition_problems(table: dict[str, tuple[float | None, bool]], partition: str | None, minutes: int | None,
                       margin_seconds: float) -> list[str]:
    """A missing partition, or a time limit below the jobs' ``--time`` (``minutes``), with the way out."""
    names = ", ".join(sorted(table)) or "none"
    if partition is not None and partition not in table:
        return [f"Slurm partition {partition!r} does not exist on this cluster (sinfo lists: {names}); pass "
                f"--rexmle-slurm-partition with one of them"]
    chosen = partition or next((n for n, (_, default) in table.items() if default), None)
    if chosen is None or minutes is None:
        return []
    limit = table[chosen][0]
    if limit is None or minutes <= limit:
        return []
    longer = sorted(n for n, (m, _) in table.items() if m is None or m >= minutes)
    choose = f"one with a longer limit ({', '.join(longer)})" if longer else "a partition with a longer limit"
    return [f"Slurm partition {chosen!r} allows jobs of {limit:g} min, and each job asks for {minutes} min (the run's "
            f"time limit plus a {margin_seconds:.0f} s margin): choose {choose} with --rexmle-slurm-partition, or "
            f"lower --rexmle-time-limit to at most {max(0.0, limit * 60 - margin_seconds):.0f} s"]


def user_accounts() -> list[str] | None:
    """The accounts this user may charge (sacctmgr's associations); None where that cannot be read."""
    if not shutil.which("sacctmgr"):
        return None
    user = pwd.getpwuid(os.geteuid()).pw_name
    proc = subprocess.run(["sacctmgr", "-n", "-P", "show", "assoc", "where", f"user={user}", "format=account"],
                          capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        return None
    return sorted({line.strip() for line in proc.stdout.splitlines() if line.strip()})


def account_problems(account: str, accounts: list[str] | None) -> list[str]:
    """An account this user has no association with (None or no associations at all: nothing to say)."""
    if not accounts or account in accounts:
        return []
    return [f"Slurm account {account!r} is not one this user may charge (sacctmgr lists: {', '.join(accounts)}); "
            f"pass --rexmle-slurm-account with one of them"]


def job_python() -> Path:
    """The interpreter each job starts on the node: this one, unless ``REXMLE_SLURM_PYTHON`` names another
    (same version, with this package and submitit importable) for nodes where this path is not theirs or
    the job's user cannot reach it, e.g. a pyenv under a 0700 home that only this process's namespace opens."""
    return Path(os.environ.get("REXMLE_SLURM_PYTHON") or sys.executable)


def _append_run_record(spec: RunSpec, extra: dict) -> None:
    """``extra`` added to the run's ``run.json`` (the launcher wrote it before the first submission)."""
    path = spec.logs.parent / RUN_JSON
    meta = RunRecord.read(path).model_dump(mode="json", exclude_unset=True)
    write_run_record(path, {**meta, **extra})


def _controller_state(job_id: str) -> dict[str, str] | None:
    """State, reason, node and time limit of a job slurmctld still queues or runs, else None. Accounting (sacct,
    what the runtime reads) learns of a job a moment after sbatch returns, so a job submitted just now is
    UNKNOWN there while it is pending: re-submitting it would run it twice, and progress would miss it."""
    try:
        out = subprocess.run(["squeue", "--noheader", "--jobs", job_id, "--format", "%i|%T|%r|%N|%l"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        fields = line.strip().split("|")
        if len(fields) == 5 and fields[0] == job_id:
            return dict(zip(("state", "reason", "node", "limit"), fields[1:], strict=True))
    return None


def _noted_job_id(folder: Path) -> str | None:
    """The id the harness noted right after ``sbatch`` answered: the job of a session that died before it
    could write ``run.json``."""
    try:
        return (folder / JOB_ID_NOTE).read_text().strip() or None
    except OSError:
        return None


def _job_stderr(folder: Path, job_id: str) -> Path:
    """The job's log as submitit names it (its public ``SlurmJob(...).paths``), for runs recorded before
    ``run.json`` kept the path."""
    import submitit  # start-up: submitit only where this runs

    return Path(submitit.SlurmJob(folder=folder, job_id=job_id).paths.stderr)
