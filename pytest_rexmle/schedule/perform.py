"""One run, start to end, in a child harness process the executor starts: :func:`perform`.

Why a child process per run: the run must be stoppable on its own (Ctrl-C, SIGTERM, a dead session)
with the runtime's own clean-up (sandbox torn down, staging undone, container removed, Slurm job
cancelled) — which is what an interrupt of the process running it gives — and it must not depend on
which pytest process reports it. The child arms ``PR_SET_PDEATHSIG`` so a ``kill -9``'d session still
interrupts it; its record on the board says how it ended, and ``run.json`` stays without ``finished``
when it was interrupted, so ``--rexmle-resume`` runs it again.

:func:`perform` is the single place where a run starts (``begin``) and ends (``finish``): anything that
must live exactly as long as a run (telemetry here; a model gateway) belongs there.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time
import traceback
import warnings
from pathlib import Path

from pydantic import TypeAdapter

from ..agents import get_agent
from ..documents import read
from ..errors import DataNotPreparedError
from ..jsonfile import write_json_atomic
from ..run.begin import begin, task_data
from ..run.launch import LaunchedRun, RunFolder, finish
from ..runtime import runtime_for
from ..runtime.record import RUN_JSON, RunRecord
from ..runtime.slurm_job import outcome_to_json
from ..settings import Settings
from ..task import registry
from .board import FINAL, HEARTBEAT, STOP_REASON, Board, Submitted, agent_of_key, run_deadline, task_of_key
from .telemetry import Sampler

SETTINGS = "settings.json"
PR_SET_PDEATHSIG = 1


class Stopped(KeyboardInterrupt):
    """SIGTERM to a run's harness, or to its session: unwind like Ctrl-C so the runtime cleans up."""


class SessionGone(KeyboardInterrupt):
    """The session process died (``kill -9``): unwind like Ctrl-C; the run's record names the cause."""


def perform(settings, task, gpus: tuple[str, ...], board: Board, key: str, said: list, hand_off: bool = False) -> None:
    """Begin the run (resume, re-attach or launch), wait for it under telemetry, record how it ended.

    ``said``: the warnings caught so far in this process; each final record carries them, so the item
    that reports the run warns with them in its own session (e.g. a result not resumed: its seal failed).
    ``hand_off``: a batch runtime's job is left queued and recorded as :class:`~.board.Submitted` instead of waited for."""
    try:
        data = _data(settings, task)
    except DataNotPreparedError as exc:
        board.write(key, "skipped", reason=str(exc), warnings=texts(said))
        return
    name = agent_of_key(key) or settings.agent  # several agents: the item's own
    agent = get_agent(name, settings.options_for(name))
    runtime = runtime_for(settings)
    # start-up: keeps 646 lines out of a child that only finishes a batch job (:func:`finish_submitted`)
    from ..runtime.gateway_link import network_notices

    network_notices(runtime, settings.network)  # the session said them once; this run stays quiet
    try:
        begun = begin(settings, task, data, agent, runtime, gpus, identity=board.identity(key))
        if begun.resumed is not None:
            board.write(key, "resumed", run_dir=begun.resumed.run_dir, time_limit=begun.time_limit,
                        result=begun.resumed.to_json(), warnings=texts(said))
            return
        launched = begun.launched
        assert launched is not None  # a run not resumed is launched
        run_dir = str(launched.folder.root)
        if hand_off and (job_id := runtime.hand_off(launched.handle, board.folder / HEARTBEAT)) is not None:
            # a batch job: the session's watcher polls it with every other job and starts a short harness to
            # finish it when it ends (:func:`finish_submitted`), so no process waits for it meanwhile
            board.write(key, "submitted", run_dir=run_dir, job_id=job_id, gpus=list(gpus), time_limit=begun.time_limit,
                        run_key=launched.meta.get("key"), warnings=texts(said))
            return
        # a batch job may wait in the scheduler's queue, which enforces its limit itself: no deadline here
        deadline = None if runtime.batches else run_deadline(time.time(), begun.time_limit)
        board.write(key, "running", run_dir=run_dir, gpus=list(gpus), pid=os.getpid(), time_limit=begun.time_limit,
                    deadline=deadline)
        remote = "the run's GPUs are on a scheduler's node" if runtime.batches else None
        _record_end(board, key, launched, Sampler(gpus, unavailable=remote), gpus, begun.time_limit,
                    launched.meta.get("key"), texts(said))
    finally:
        runtime.close()


def finish_submitted(settings, task, board: Board, key: str, said: list, ended: dict | None = None) -> None:
    """A batch job the session's watcher saw end (``ended``: the scheduler's record of it then): attach to
    it as ``--rexmle-resume`` would, collect and record its end as :func:`perform` does, and say so on the board."""
    record = board.read(key)
    if not isinstance(record, Submitted):
        raise RuntimeError(f"{key}: the board holds no submitted job to finish ({record})")
    folder = RunFolder(Path(record.run_dir))
    name = agent_of_key(key) or settings.agent
    agent = get_agent(name, settings.options_for(name))
    runtime = runtime_for(settings)
    if ended:
        runtime.known_ended(record.job_id, ended)
    try:
        meta = RunRecord.read(folder.root / RUN_JSON).model_dump(mode="json", exclude_unset=True)
        handle = runtime.attach(meta, folder.root)
        if handle is None:
            raise RuntimeError(f"job {record.job_id} of {folder.root} is known neither to accounting nor "
                               "to the scheduler any more")
        data = task_data(settings, task)
        time_limit = record.time_limit
        launched = LaunchedRun(folder, agent, folder.context(task, data.public, time_limit), handle, meta)
        _record_end(board, key, launched, Sampler((), unavailable="the run's GPUs are on a scheduler's node"),
                    tuple(record.gpus), time_limit, record.run_key, [*record.warnings, *texts(said)])
    finally:
        runtime.close()


def _record_end(board: Board, key: str, launched, sampler, gpus: tuple[str, ...], time_limit: float,
                run_key, warnings: list[str]) -> None:
    """Wait for the run's end under ``sampler`` and say "done" on the board: one record of a run's end,
    whether its harness started it (:func:`perform`) or collected a batch job the watcher saw end."""
    outcome = finish(launched, monitor=sampler)
    board.write(key, "done", run_dir=str(launched.folder.root), gpus=list(gpus), time_limit=time_limit,
                outcome=outcome_to_json(outcome), telemetry=sampler.summary(), run_key=run_key, warnings=warnings)


def texts(caught: list) -> list[str]:
    """Caught warnings as the messages an item re-issues."""
    return [str(w.message) for w in caught]


def _data(settings, task):
    try:
        return task_data(settings, task)
    except DataNotPreparedError:
        if not settings.prepare:
            raise
    from ..data.prepare import ManualDownloadRequired, prepare_task  # looked up when called, where tests replace it

    try:
        return prepare_task(task, settings.data_dir, progress=False)
    except ManualDownloadRequired as exc:  # the item skips with the page to download from
        raise DataNotPreparedError(str(exc), f"rexmle prepare {task.id} --data-dir {settings.data_dir}") from None


def write_settings(board: Board, settings: Settings) -> None:
    """The session's settings for its run processes, as typed JSON (no pickle: the file decides no type). Each
    session writes them into its own new board, so no file of an earlier version is ever read back."""
    write_json_atomic(board.folder / SETTINGS, TypeAdapter(Settings).dump_python(settings, mode="json"))


def read_settings(board: Board) -> Settings:
    return read(Settings, board.folder / SETTINGS)


def _arm_parent_death(parent: int) -> None:
    """SIGINT when the session process dies (``kill -9``), so the run is stopped and cleaned up."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGINT, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the session died before the signal was armed
        raise KeyboardInterrupt


def _on_sigterm(signum, frame) -> None:  # noqa: ARG001
    raise Stopped("SIGTERM")


def _on_sigint(board: Board, parent: int):
    """SIGINT comes from the executor (Ctrl-C, or the session's SIGTERM: the board says which) or from the
    kernel when the session died (``PR_SET_PDEATHSIG``): the exception says which, and so does run.json."""
    def handler(signum, frame) -> None:  # noqa: ARG001
        if os.getppid() != parent:
            raise SessionGone("the session process is gone")
        if (board.folder / STOP_REASON).exists():
            raise Stopped("SIGTERM")
        raise KeyboardInterrupt
    return handler


def _final(board: Board, key: str, state: str, **fields) -> None:
    """Record how the run ended unless it already has (an interrupt after the last write changes nothing)."""
    record = board.read(key)
    if not isinstance(record, FINAL):
        board.write(key, state, **fields)


def main(argv: list[str]) -> int:
    """``python -m pytest_rexmle.schedule.perform BOARD RUN_KEY GPUS PARENT_PID [submit|finish]``: the whole
    run (no mode), a batch job submitted and handed to the session's watcher (``submit``), or such a job
    finished once it ended (``finish``)."""
    folder, key, gpus, parent, *rest = argv
    board = Board(Path(folder))
    mode, ended = (rest + ["", ""])[:2]
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        return _run(board, key, tuple(g for g in gpus.split(",") if g), int(parent), said, mode,
                    json.loads(ended) if ended else None)


def _run(board: Board, key: str, gpus: tuple[str, ...], parent: int, said: list, mode: str = "",
         ended: dict | None = None) -> int:
    """The child's whole life: every way it ends leaves a final record on the board."""
    try:
        signal.signal(signal.SIGTERM, _on_sigterm)
        signal.signal(signal.SIGINT, _on_sigint(board, parent))
        _arm_parent_death(parent)
        settings = read_settings(board)
        task = registry().get(task_of_key(key))
        if mode == "finish":
            finish_submitted(settings, task, board, key, said, ended)
        else:
            perform(settings, task, gpus, board, key, said, hand_off=mode == "submit")
    except KeyboardInterrupt as exc:
        _final(board, key, "interrupted", reason=f"the run was stopped ({type(exc).__name__})", warnings=texts(said))
        return 130
    except BaseException as exc:  # the harness broke: the item reports it as an error with this traceback
        # start-up: keeps gzip, tarfile out of a child whose runtime is not the local one
        from ..runtime.local import AgentIdentityRefused

        if isinstance(exc, AgentIdentityRefused):  # never run as root or as the harness: the session stops
            _final(board, key, "error", message=str(exc), usage_error=True, warnings=texts(said))
            return 4
        _final(board, key, "error", message=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(),
               warnings=texts(said))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
