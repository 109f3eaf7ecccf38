"""Public fixtures: the chain task → data → run folder → agent run → submission → grade → result.

Write your own assertions on a result by requesting any link, e.g.::

    def test_my_check(rexmle_result):
        assert rexmle_result.metrics["dice"] > 0.5

* ``rexmle_settings`` (session) — :class:`pytest_rexmle.settings.Settings`.
* ``rexmle_task`` — the :class:`pytest_rexmle.task.Task` of the item (skips if it has no grader yet).
* ``rexmle_data`` — :class:`pytest_rexmle.data.taskdata.TaskData` (public/private folders); skips with the
  ``rexmle prepare`` command when prepared data is missing.
* ``rexmle_agent`` (the item's, from ``rexmle_agents``, session), ``rexmle_runtime`` (session) — the agent and
  runtime objects; ``rexmle_agent_name`` is parametrized when the session has several ``--agent``.
* ``rexmle_repeat`` — which of ``--rexmle-repeat N`` runs of its task (and agent) the item is: 1 without
  repeats; parametrized (``test_task[<task>-r2]``) when N > 1, in any module whose test uses the run.
* ``rexmle_agent_run`` — :class:`AgentRun`: run folder, runtime outcome, or the resumed result. The run
  itself is started by the session's executor (:mod:`pytest_rexmle.schedule`), possibly in another
  process; the item waits for its record.
* ``rexmle_submission`` — the submission folder the agent left.
* ``rexmle_grade`` — :class:`pytest_rexmle.scoring.grading.GradeOutcome` (status, metrics, reason).
* ``rexmle_judge`` (session) — the capability judge; each run gets ``capability.json`` and ``stages.json``.
* ``rexmle_result`` — the final :class:`pytest_rexmle.scoring.result.TaskResult` (ranked, or FAIL).
"""

from __future__ import annotations

import contextlib
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .agents import get_agent
from .agents.usage import metered_usage, run_record
from .data.missing import skip_reason
from .errors import DataNotPreparedError, RexmleError
from .gateway.record import junit_properties
from .paths import cache_home
from .report.properties import (
    AGENT_PROPERTY,
    CAPABILITY_PROPERTY,
    REPEAT_PROPERTY,
    RESULT_PROPERTY,
    RUN_PROPERTY,
    STAGES_PROPERTY,
    TASK_PROPERTY,
)
from .run.begin import task_data  # the same data the campaign launched other items' runs with
from .run.launch import RunFolder, crash_reason, killed_reason, timeout_reason
from .runtime import RUNTIMES, runtime_for
from .runtime.base import RunOutcome
from .scoring.grading import GradeOutcome, grade_submission, result_from_grade
from .scoring.result import ERROR, MISSING, TIMEOUT, TaskResult
from .scoring.seal import seal_result
from .task import Task, registry

if TYPE_CHECKING:
    from .settings import Settings

__all__ = ["rexmle_settings", "rexmle_task", "rexmle_data", "rexmle_agent", "rexmle_agents",
           "rexmle_agent_name", "rexmle_repeat", "rexmle_runtime", "rexmle_agent_run",
           "rexmle_submission", "rexmle_grade", "rexmle_judge", "rexmle_result", "AgentRun"]

#: where the plugin keeps the session's :class:`~pytest_rexmle.settings.Settings` (``config.stash``)
SETTINGS_KEY: pytest.StashKey[Settings] = pytest.StashKey()


class HarnessError(RexmleError):
    """The harness (not the agent) broke while producing this result."""


@dataclass
class AgentRun:
    folder: RunFolder
    outcome: RunOutcome | None
    resumed: TaskResult | None
    time_limit: float
    gpus: tuple[str, ...] = ()
    #: the run's key as the harness computed it (never re-read from run.json): what the result's seal binds
    key: dict | None = None


def _param(item: pytest.Item, name: str):
    """The item's value of a parameter the plugin gives (``pytest_generate_tests``), None where it has none."""
    return getattr(getattr(item, "callspec", None), "params", {}).get(name)


@pytest.fixture(scope="session")
def rexmle_settings(pytestconfig):
    return pytestconfig.stash[SETTINGS_KEY]


@pytest.fixture
def rexmle_task(request, rexmle_task_id, rexmle_settings) -> Task:
    request.node.user_properties.append((TASK_PROPERTY, rexmle_task_id))
    agent = _param(request.node, "rexmle_agent_name")
    if agent:  # several agents: the session report keeps each agent's results apart
        request.node.user_properties.append((AGENT_PROPERTY, agent))
    repeat = _param(request.node, "rexmle_repeat")
    if repeat is not None:  # --rexmle-repeat N > 1: JUnit and the session report keep each repeat apart
        request.node.user_properties.append((REPEAT_PROPERTY, repeat))
    # JUnit readers see what was graded, skipped items included: synthetic twins never pass for real data
    request.node.user_properties.append(("data", "synthetic" if rexmle_settings.data == "synthetic" else "real"))
    task = registry().get(rexmle_task_id)
    if not task.implemented:
        pytest.skip(f"{task.id}: grader not implemented yet")
    return task


@pytest.fixture
def rexmle_data(rexmle_task, rexmle_settings):
    """With --rexmle-prepare, missing data is prepared first (file-locked across xdist workers)."""
    try:
        return task_data(rexmle_settings, rexmle_task)
    except DataNotPreparedError:
        if not rexmle_settings.prepare:  # the session's note (data/missing.py) says the rest, once
            pytest.skip(skip_reason(rexmle_task, rexmle_settings.data_dir))
    from .data.prepare import ManualDownloadRequired, prepare_task  # looked up when called, where tests replace it

    try:
        return prepare_task(rexmle_task, rexmle_settings.data_dir, progress=False)
    except ManualDownloadRequired as exc:  # a gated source: the user must fetch a file by hand
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def rexmle_agents(rexmle_settings):
    """Every agent of the session by name, each built once with its own options."""
    return {name: get_agent(name, rexmle_settings.options_for(name))
            for name in rexmle_settings.agents or (rexmle_settings.agent,)}


@pytest.fixture
def rexmle_agent_name(rexmle_settings) -> str:
    """The item's agent; parametrized (``test_task[<task>-<agent>]``) when the session has several."""
    return rexmle_settings.agent


@pytest.fixture
def rexmle_repeat() -> int:
    """The item's repeat: 1, unless the session has ``--rexmle-repeat`` N > 1, where the plugin parametrizes
    it (``test_task[<task>-r2]``) and each repeat is its own item and run."""
    return 1


@pytest.fixture
def rexmle_agent(rexmle_agents, rexmle_agent_name):
    return rexmle_agents[rexmle_agent_name]


@pytest.fixture(scope="session")
def rexmle_runtime(rexmle_settings):
    runtime = runtime_for(rexmle_settings)
    try:
        yield runtime
    finally:
        runtime.close()  # also on Ctrl-C: runs still in flight are stopped (unless the runtime was told not to)


@pytest.fixture
def rexmle_agent_run(request, rexmle_task, rexmle_data, rexmle_settings, rexmle_repeat) -> AgentRun:
    """The item's run as the session's executor left it (waiting for it while it is queued or running)."""
    # start-up: keeps the schedule and the Slurm job's code (1,700 lines), ctypes out of every pytest session
    from .runtime.slurm_job import outcome_from_json
    from .schedule.board import Done, Failed, Interrupted, Resumed, Skipped, run_key
    from .schedule.session import board_for

    board = board_for(request.config)
    key = run_key(request.node.nodeid, rexmle_task.id, _param(request.node, "rexmle_agent_name"))
    record = board.wait(key, tick=_progress(request, rexmle_settings, board))
    for message in record.warnings:  # said by the run's harness process, shown in this session
        warnings.warn(message, stacklevel=1)
    match record:
        case Skipped():
            pytest.skip(record.reason)
        case Failed(usage_error=True):  # e.g. an agent that would run as root: stop, with the fix
            pytest.exit(f"rexmle: {record.message}", returncode=pytest.ExitCode.USAGE_ERROR)
        case Failed():
            raise HarnessError(f"{rexmle_task.id}: {record.message}\n{record.traceback}")
        case Interrupted():
            raise HarnessError(f"{rexmle_task.id}: {record.reason}")
        case Resumed():  # the result as its seal verified it, not re-read from the run folder
            return AgentRun(RunFolder(Path(record.run_dir)), None, TaskResult.from_json(record.result),
                            record.time_limit)
    assert isinstance(record, Done), record  # Board.wait returns final records only
    outcome = outcome_from_json(record.outcome)
    used = tuple(outcome.details.get("gpus") or ()) or tuple(record.gpus)  # a scheduler's node reports its own
    # the key as the run's harness computed it (the board is the harness's, never the agent's): what the seal binds
    return AgentRun(RunFolder(Path(record.run_dir)), outcome, None, record.time_limit, used, record.run_key)


def _progress(request, settings, board):
    """In the controller (no xdist), a progress line now and then while the item waits; None on workers."""
    if hasattr(request.config, "workerinput"):
        return None
    terminal = request.config.pluginmanager.get_plugin("terminalreporter")
    if terminal is None:
        return None
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    from .schedule.session import Progress  # start-up: as in rexmle_agent_run

    def show(line: str) -> None:  # items wait inside a fixture, where output is captured: step around it
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            terminal.write_line(line)

    return Progress(show, board, settings.runtime, RUNTIMES.load(settings.runtime).batches)


@pytest.fixture
def rexmle_submission(rexmle_agent_run) -> Path:
    return rexmle_agent_run.folder.submission


@pytest.fixture
def rexmle_grade(rexmle_task, rexmle_data, rexmle_agent_run, rexmle_submission) -> GradeOutcome:
    run = rexmle_agent_run
    if run.resumed is not None:
        r = run.resumed
        return GradeOutcome(r.status, r.metrics, r.reason, r.traceback, tuple(r.warnings))
    if reason := timeout_reason(run.outcome, run.time_limit):
        return GradeOutcome(TIMEOUT, None, reason)
    if reason := killed_reason(run.outcome):
        return GradeOutcome(MISSING, None, reason)
    outcome = grade_submission(rexmle_task, rexmle_submission, rexmle_data.private)
    if outcome.status == MISSING and (crash := crash_reason(run.outcome)):
        outcome = GradeOutcome(MISSING, None, f"{crash}; {outcome.reason}")
    return outcome


@pytest.fixture(scope="session")
def rexmle_judge(rexmle_settings):
    """The capability judge (``--rexmle-judge``), or None with ``--rexmle-judge=none``."""
    if rexmle_settings.judge == "none":
        return None
    from .capability import get_judge  # start-up: keeps 1031 lines out of every pytest session (the plugin)

    return get_judge(rexmle_settings.judge, **rexmle_settings.judge_options)


def _analyse(item: pytest.Item, judge, task: Task, run_dir: Path, public: Path) -> None:
    """Capability and stage scores of a finished run, reported next to (never inside) the percentile.

    A judge failure (an unreachable LLM endpoint, say) is recorded as a warning: it must not turn a
    graded task into an error.
    """
    # start-up: keeps 1316 lines out of every pytest session (the plugin)
    from .capability.stages import stage_scores

    try:
        capability = judge.judge_run(run_dir, task)
        stages = stage_scores(run_dir, task, public, judge)
    except Exception as exc:
        item.warn(pytest.PytestWarning(f"{task.id}: capability judge failed: {type(exc).__name__}: {exc}"))
        return
    item.user_properties.append((CAPABILITY_PROPERTY, json.dumps(capability)))
    item.user_properties.append((STAGES_PROPERTY, json.dumps(stages)))
    item.user_properties.append(("stages.total", stages.get("total")))


@pytest.fixture
def rexmle_result(request, rexmle_task, rexmle_data, rexmle_agent, rexmle_agent_run, rexmle_grade, rexmle_settings,
                  rexmle_judge, rexmle_repeat) -> TaskResult:
    run = rexmle_agent_run
    repeat = rexmle_repeat if rexmle_settings.repeat > 1 else None
    if run.resumed is not None:
        result = run.resumed
        result.repeat = repeat  # the item's own: a run of a session without repeats may stand in for its first
    else:
        extra = dict(agent=rexmle_agent.name, options_key=rexmle_agent.options_key(), run_dir=str(run.folder.root),
                     gpu=",".join(run.gpus) or None,
                     timings={"agent_seconds": run.outcome.duration})
        result = result_from_grade(rexmle_task, rexmle_grade, **extra)
        result.repeat = repeat
        if run.outcome.exit_code is not None:
            result.timings["exit_code"] = run.outcome.exit_code
        result.suspected_leak = _suspected_leak(request.node, rexmle_task, result, rexmle_data)
        result.write(run.folder.result_path)
        seal_result(run.folder.result_path, run.key)  # what --rexmle-resume will trust, and nothing else

    facts = run_facts(run.folder.root, rexmle_data.answers_id, graded=result.status == "ok")
    record_result(request.node, result, usage=metered_usage(run.folder.root), run_facts=facts)
    if rexmle_judge is not None and run.folder.root.is_dir():
        _analyse(request.node, rexmle_judge, rexmle_task, run.folder.root, rexmle_data.public)
    if run.resumed is None and run.folder.root.is_dir():
        _write_views(request.node, rexmle_task, run.folder.root)
    request.config.hook.pytest_rexmle_result(result=result, item=request.node)
    if result.status == ERROR:
        raise HarnessError(f"{rexmle_task.id}: {result.reason}\n{result.traceback or ''}")
    return result


def _write_views(item: pytest.Item, task: Task, run_dir: Path) -> None:
    """The run's ATIF trajectory and its page, once it is graded and judged. A failure here is a warning:
    reading aids must never cost the agent its result."""
    # start-up: keeps 1361 lines and markupsafe out of every pytest session (the plugin)
    from .report.atif import write_trajectory
    from .report.runpage import write_run_page

    for write in (write_trajectory, write_run_page):
        try:
            write(run_dir)
        except Exception as exc:
            item.warn(pytest.PytestWarning(f"{task.id}: {write.__name__} failed: {type(exc).__name__}: {exc}"))


def _suspected_leak(item: pytest.Item, task: Task, result: TaskResult, data) -> dict | None:
    """The leak rules of :mod:`pytest_rexmle.scoring.leaks`; the answers' own metrics are graded once per answers
    (cached). A failure there only skips that rule, with a warning: it never costs the agent its result."""
    from .scoring import leaks  # start-up: keeps 177 lines out of every pytest session (the plugin)

    if result.status != "ok":
        return None
    perfect = None
    try:
        perfect = leaks.perfect_metrics(task, data.private, cache_home(), data.answers_id)
    except Exception as exc:
        item.warn(pytest.PytestWarning(f"{task.id}: leak check without the answers' own scores: "
                                       f"{type(exc).__name__}: {exc}"))
    return leaks.check(task, result, perfect, synthetic=getattr(data, "kind", None) == "synthetic")


def run_facts(run_dir: Path, answers_id: str | None = None, graded: bool = False) -> dict | None:
    """What the session report needs of a run: its compute record and what it reached (``run.json``), and, for
    a ``graded`` (OK) result, the sha256 of each submission file with the answers it was graded against (what
    ``rexmle report --verify`` checks a downloaded report's claims with). Only a submission the grader accepted
    is hashed: its files are bounded by the grader's rules, and a FAIL claims nothing to verify."""
    from .compute import read_record  # start-up: keeps 179 lines out of every pytest session (the plugin)

    digest = _submission_digest(Path(run_dir) / "submission", answers_id) if graded else None
    meta = run_record(run_dir)
    if meta is None:
        return {"submission": digest} if digest else None
    egress = meta.get("egress")
    return {"compute": read_record(meta.get("compute")), "network": meta.get("network"), "sandbox": meta.get("sandbox"),
            "egress": egress if isinstance(egress, (list, dict)) else None, "submission": digest}


def _submission_digest(folder: Path, answers_id: str | None) -> dict | None:
    """The submission's file hashes, or None when there is no folder or it cannot be hashed (a reading aid
    for verifiers: it never costs the agent its result)."""
    # start-up: keeps ipaddress, urllib out of every pytest session (the plugin)
    from .report.verify import submission_digest

    try:
        return submission_digest(folder, answers_id)
    except (RexmleError, OSError):
        return None


def record_result(item: pytest.Item, result: TaskResult, usage: dict | None = None,
                  run_facts: dict | None = None) -> None:
    """Per-case JUnit properties (with the gateway's ``usage.*`` and the run's ``compute.*`` when given),
    plus the whole record for the controller's session report."""
    from . import compute  # start-up: keeps 179 lines out of every pytest session (the plugin)

    props = item.user_properties
    props.append(("status", result.status))
    props.append(("percentile", result.percentile))
    if result.mean_position is not None:
        props.append(("mean_position", result.mean_position))
    for key, value in (result.metrics or {}).items():
        props.append((f"metric.{key}", value))
    for key, value in (result.positions or {}).items():
        props.append((f"position.{key}", value))
    if result.reason:
        props.append(("reason", result.reason))
    if result.suspected_leak:
        from .scoring.leaks import summary  # start-up: keeps 177 lines out of every pytest session (the plugin)

        egress = result.suspected_leak.get("egress")
        props.append(("suspected_leak", summary(result.suspected_leak) + (f"; {egress}" if egress else "")))
    props.extend(junit_properties(usage))
    if run_facts:
        props.extend(compute.junit_properties(run_facts.get("compute")))
        props.append((RUN_PROPERTY, json.dumps(run_facts, sort_keys=True, default=str)))
    props.append((RESULT_PROPERTY, json.dumps(result.to_json(), sort_keys=True)))
