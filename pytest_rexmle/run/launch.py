"""One agent run on one task: the run folder, the contract, the runtime call and the recorded result.

Run folders are ``<runs>/<task>/<agent>-<options key>/<stamp>/`` with ``workspace/``, ``submission/``,
``logs/``, ``instructions.md``, ``run.json`` and, once graded, ``result.json``. Nothing is ever reused
in place: a new run gets a new folder, and ``--rexmle-resume`` only reads finished ``result.json`` files.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import warnings
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..agent_output import RefusedFile, clean_text, log_tail, scrub_run_folder
from ..agents.base import Agent, AgentContext
from ..data.taskdata import TaskData
from ..gateway.record import run_json_fields
from ..paths import Entry
from ..runtime.base import RunHandle, RunOutcome, RunSpec, Runtime
from ..runtime.record import RUN_JSON, RunRecord, write_run_record
from ..scoring.result import ERROR, TaskResult
from ..scoring.seal import SealError, verify_result
from ..task import Task
from .instructions import render_instructions
from .owner import interrupted_meta, owner_record


@dataclass(frozen=True)
class RunFolder:
    root: Path
    workspace = Entry("workspace")
    submission = Entry("submission")
    logs = Entry("logs")
    instructions = Entry("instructions.md")
    result_path = Entry("result.json")

    @staticmethod
    def of_agent(runs_dir: Path, task: Task, agent: Agent) -> Path:
        """``<runs>/<task>/<agent>-<options key>/``: an agent's runs of a task, new ones and resumable ones."""
        return runs_dir / task.id / f"{agent.name}-{agent.options_key()}"

    @classmethod
    def create(cls, runs_dir: Path, task: Task, agent: Agent) -> RunFolder:
        parent = cls.of_agent(runs_dir, task, agent)
        parent.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        for attempt in range(1000):
            root = parent / (f"{stamp}-{os.getpid()}" + (f"-{attempt}" if attempt else ""))
            try:
                root.mkdir()
                break
            except FileExistsError:
                continue
        folder = cls(root)
        for sub in (folder.workspace, folder.submission, folder.logs):
            sub.mkdir()
        return folder

    def context(self, task: Task, public: Path, time_limit: float) -> AgentContext:
        return AgentContext(task, self.root, self.workspace, self.submission, self.logs, public, time_limit)


#: session settings that cannot change a run's result (everything else in ``Settings.public()`` keys it)
KEY_IGNORES = frozenset({"agent", "data", "runtime", "runtime_reason", "time_limit", "min_percentile", "resume",
                         "gpus", "judge", "parallel", "repeat"})


def run_key(task: Task, agent: Agent, data: TaskData, time_limit: float, runtime: str, settings=None,
            identity: dict | None = None) -> dict:
    """Everything that must match for a stored result to stand in for a new run.

    ``identity``: the item's own part (:func:`pytest_rexmle.schedule.board.item_identity`): its repeat
    beyond the first and, for an item of a module of your own, its id. Why: without it every repeat of a
    task had one key, so a resumed session gave all of them the newest finished run (and re-attached
    all of them to one live job). A first repeat of the benchmark's own item adds nothing, so its key is
    the key of a session without repeats, and older runs stay resumable.

    Besides task, agent and limits: which answers the data holds (a twin's seed or secret, a prepared
    manifest's hash), so a result graded against other answers is never reused, and every public
    setting that may change what the agent can do (network, sandbox, resource limits, ...); settings
    added later join the key unless listed in ``KEY_IGNORES``.
    """
    key = {"task": task.id, "task_version": task.version, "agent": agent.name, "options": agent.options_key(),
           "data": data.kind, "answers": data.answers_id, "time_limit": time_limit, "runtime": runtime}
    if settings is not None:
        key["settings"] = {k: v for k, v in sorted(settings.public().items()) if k not in KEY_IGNORES}
    key.update(identity or {})
    return key


def find_resumable(runs_dir: Path, task: Task, agent: Agent, key: dict) -> TaskResult | None:
    """The newest finished result of an identical run (harness errors are always re-run).

    Only a result whose seal verifies (:mod:`pytest_rexmle.scoring.seal`) is reused: one changed after grading
    (by an agent that reached its run folder, say) is skipped with a warning, and the task runs again.
    """
    for result_path in sorted(RunFolder.of_agent(runs_dir, task, agent).glob("*/result.json"), reverse=True):
        try:
            if RunRecord.read(result_path.parent / RUN_JSON).key != key:
                continue
            data = verify_result(result_path, key)
            result = TaskResult.from_json(json.loads(data))
        except SealError as exc:
            warnings.warn(f"rexmle: not resuming {result_path}: {exc}; the task runs again", stacklevel=2)
            continue
        except (OSError, ValueError, TypeError, AttributeError, RefusedFile):
            continue
        if result.status != ERROR:
            return result
    return None


@dataclass
class LaunchedRun:
    """A run whose agent has been started (or queued): ``finish`` waits for it and records the end."""

    folder: RunFolder
    agent: Agent
    ctx: AgentContext
    handle: RunHandle
    meta: dict


def launch(task: Task, data: TaskData, agent: Agent, runtime: Runtime, folder: RunFolder, time_limit: float,
           gpus: tuple[str, ...] = (), hidden: tuple[Path, ...] = (), key: dict | None = None,
           network: str = "bridge", runtime_reason: str | None = None,
           identity: dict | None = None, repeats: int = 1) -> LaunchedRun:
    """Prepare the run folder and contract, then hand the run to the runtime (a batch runtime queues it).
    ``runtime_reason``: why the session chose this runtime (none given), recorded beside its name;
    ``identity`` (part of ``key``) and ``repeats`` (the session's ``--rexmle-repeat``): which repeat the run is."""
    ctx = folder.context(task, data.public, time_limit)
    cwd = agent.setup(ctx)
    # the runtime may stage the run first, so that the contract names the stage, never a host path
    probe = runtime.stage(RunSpec(task.id, [], {}, data.public, folder.workspace, folder.submission, folder.logs,
                                  folder.instructions, time_limit, hidden=hidden))
    paths = runtime.contract_paths(probe)
    folder.instructions.write_text(render_instructions(task, paths, time_limit), encoding="utf-8")
    env = {
        "REXMLE_TASK": task.id,
        "REXMLE_DATA_DIR": paths["data"],
        "REXMLE_WORKSPACE": paths["workspace"],
        "REXMLE_SUBMISSION_DIR": paths["submission"],
        "REXMLE_INSTRUCTIONS": paths["instructions"],
        "REXMLE_TIME_LIMIT": str(int(time_limit)),
        "CUDA_VISIBLE_DEVICES": ",".join(gpus),
        **agent.environment(ctx),
    }
    spec = RunSpec(task.id, agent.command(ctx), env, data.public, folder.workspace, folder.submission, folder.logs,
                   folder.instructions, time_limit, cwd=cwd, gpus=gpus, hidden=hidden,
                   image=agent.image, network=network, secret_env=agent.secret_environment(), limits=task.limits,
                   stage=probe.stage, trusted=agent.trusted, software=agent.software()[0],
                   software_path=agent.software()[1])
    meta = {"task": task.id, "agent": agent.name, "agent_options": agent.public_options(), "runtime": runtime.name,
            "data": data.kind, "time_limit": time_limit, "gpus": list(gpus), "key": key,
            "started": datetime.now(UTC).isoformat(), "owner": owner_record()}
    if runtime_reason:
        meta["runtime_reason"] = runtime_reason
    own = identity or {}
    meta["repeat"] = int(own.get("repeat", 1))
    if repeats > 1:  # the session's --rexmle-repeat: "repeat 2 of 3" on the run's page
        meta["repeats"] = repeats
    if own.get("item"):
        meta["item"] = own["item"]
    write_run_record(folder.root / RUN_JSON, meta)
    handle = runtime.launch(spec)
    if handle.record():  # e.g. the job id: what a later --rexmle-resume re-attaches to
        meta.update(handle.record())
        write_run_record(folder.root / RUN_JSON, meta)
    return LaunchedRun(folder, agent, ctx, handle, meta)


def finish(run: LaunchedRun, monitor=None) -> RunOutcome:
    """Wait for the run's end, let the agent collect its files, record how it ended.

    ``monitor`` (e.g. :class:`pytest_rexmle.schedule.telemetry.Sampler`) is a context manager held while
    the run is alive; its ``summary()`` joins ``run.json`` as ``gpu_telemetry``."""
    folder, agent, ctx, meta = run.folder, run.agent, run.ctx, run.meta
    with monitor if monitor is not None else contextlib.nullcontext():
        try:
            outcome = run.handle.wait()
        except BaseException as exc:  # Ctrl-C (or an exit) while the agent runs: `rexmle status` must not say running
            write_run_record(folder.root / RUN_JSON, interrupted_meta(meta, exc))
            raise
    meta.update(run.handle.record())
    # the gateway's record of the run (metered usage, egress), when the runtime ran one
    meta.update(run_json_fields(outcome.details.pop("gateway", None)))
    # before anything on the host touches the agent's files: no devices, FIFOs, outward links, setuid bits
    meta["scrub"] = asdict(scrub_run_folder(folder.root))
    try:
        agent.finish(ctx)
    except (OSError, RecursionError, shutil.Error) as exc:  # the agent's files broke the collection
        meta["finish_error"] = clean_text(f"{type(exc).__name__}: {exc}", limit=500)
    meta.update(finished=datetime.now(UTC).isoformat(), exit_code=outcome.exit_code,
                timed_out=outcome.timed_out, duration=outcome.duration, **outcome.details)
    if monitor is not None:
        meta["gpu_telemetry"] = monitor.summary()
    from ..compute import compute_record  # start-up: keeps 179 lines out of every pytest session (the plugin)

    meta["compute"] = compute_record(meta)  # on the machine that ran it: a Slurm node describes its own GPUs
    write_run_record(folder.root / RUN_JSON, meta)
    return outcome


def reattach(runs_dir: Path, task: Task, data: TaskData, agent: Agent, runtime: Runtime, time_limit: float,
             key: dict) -> LaunchedRun | None:
    """The newest unfinished run of an identical key whose runtime still knows it (a queued or running
    job of a detached or killed session), so that ``--rexmle-resume`` waits for it instead of starting
    the same run again. Synchronous runtimes have nothing to re-attach to."""
    for meta_path in sorted(RunFolder.of_agent(runs_dir, task, agent).glob(f"*/{RUN_JSON}"), reverse=True):
        folder = RunFolder(meta_path.parent)
        if folder.result_path.exists():
            continue
        try:
            record = RunRecord.read(meta_path)
        except (OSError, ValueError, RefusedFile):
            continue
        if record.key != key or record.finished is not None:
            continue
        meta = record.model_dump(mode="json", exclude_unset=True)
        handle = runtime.attach(meta, folder.root)
        if handle is None:
            continue
        ctx = folder.context(task, data.public, time_limit)
        meta["reattached"] = datetime.now(UTC).isoformat()
        meta["owner"] = owner_record()
        meta.pop("interrupted", None)  # this session owns the run now, and it is running again
        meta.pop("interrupted_by", None)
        write_run_record(meta_path, meta)
        return LaunchedRun(folder, agent, ctx, handle, meta)
    return None


def timeout_reason(outcome: RunOutcome, time_limit: float) -> str | None:
    """A timed-out run is a FAIL whatever it left behind: the budget is part of the benchmark."""
    if outcome.timed_out and outcome.killed:
        return f"time limit exceeded: {outcome.killed}"
    if outcome.timed_out:
        return f"time limit of {time_limit:.0f} s exceeded; the agent was killed after {outcome.duration:.1f} s"
    return None


def killed_reason(outcome: RunOutcome) -> str | None:
    """A run ended from outside (a scheduler cancelled it, the node ran out of memory) is a FAIL whatever
    it left behind, with the cause in the reason."""
    if outcome.killed and not outcome.timed_out:
        return f"the run was killed: {outcome.killed}"
    return None


def crash_reason(outcome: RunOutcome) -> str | None:
    """Why a run that left no submission ended, for the FAIL message."""
    if outcome.exit_code in (0, None):
        return None
    tail = log_tail(outcome.stderr, 300)
    return f"agent exited with code {outcome.exit_code}" + (f"; stderr ends with: {tail}" if tail else "")

