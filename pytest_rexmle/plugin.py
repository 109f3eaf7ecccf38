"""The pytest entry point (``pytest11: rexmle``): options, markers, collection and reporting.

Benchmark items exist only when ``--agent`` is given, so ``pytest tests/`` never launches an agent.
Every process (controller and xdist workers alike) collects the same sorted list of
``test_task[<task-id>]`` items (``[<task-id>-<agent>]`` with several agents, ``[<task-id>-r<k>]`` with
``--rexmle-repeat``); only the controller builds the session report, from test reports,
so it is the same with or without xdist.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from . import hooks
from .agents.usage import junit_properties, record_comparison
from .errors import RexmleError
from .fixtures import *  # noqa: F401,F403  (fixtures must live in the plugin's namespace)
from .fixtures import SETTINGS_KEY
from .gpus import parse_gpus
from .paths import BENCHMARK_MODULE
from .runtime import runtime_for
from .runtime.base import RuntimeUnavailable
from .settings import add_options, read_settings
from .task import registry

if TYPE_CHECKING:
    from .scoring.result import TaskResult


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hooks)


def _register_task_markers(config: pytest.Config) -> None:
    """The task types and modalities the tasks use, as markers (``-m segmentation``, ``-m ct``): read from
    the tasks, so a new one is a new task.yaml value. A broken task folder is reported by the benchmark's
    collection, with its file and field, not here (the project's own tests must still start)."""
    try:
        tasks = registry()
    except RexmleError:
        return
    for marker in tasks.task_types:
        config.addinivalue_line("markers", f"{marker}: ReX-MLE tasks of this task type")
    for marker in tasks.modalities:
        config.addinivalue_line("markers", f"{marker}: ReX-MLE tasks of this modality")


def pytest_configure(config: pytest.Config) -> None:
    _register_task_markers(config)
    config.addinivalue_line("markers", "rexmle: a ReX-MLE benchmark item")
    settings = read_settings(config)
    config.stash[SETTINGS_KEY] = settings
    if not settings.agent:
        return
    _refuse_reruns(config)
    from .preflight import selected_tasks  # start-up: keeps 242 lines out of every pytest session (the plugin)

    settings, notices = _check_agent_and_runtime(settings, controller=not hasattr(config, "workerinput"),
                                                 tasks=selected_tasks(config, settings))
    config.stash[SETTINGS_KEY] = settings  # with the runtime the session chose
    bench = str(BENCHMARK_MODULE)
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        config.args = [bench]  # `pytest --agent=X` alone runs the benchmark, not the project's tests
    elif bench not in config.args:
        config.args.append(bench)
    if hasattr(config, "workerinput"):
        # start-up: keeps ctypes out of every pytest session (the plugin)
        from .schedule.session import WorkerPlan

        config.pluginmanager.register(WorkerPlan(config), "rexmle-worker-plan")
    else:
        # start-up: keeps html, ipaddress, urllib, ctypes out of every pytest session (the plugin)
        from .report.session import JUnitDisclosure, SessionReporter
        from .schedule.session import PLUGIN_NAME, SessionSchedule

        reporter = SessionReporter(config, settings)
        config.pluginmanager.register(reporter, "rexmle-session-reporter")
        config.pluginmanager.register(JUnitDisclosure(reporter), "rexmle-junit-disclosure")
        from .report.html_table import ResultColumns  # pytest-html's table, when it is installed

        config.pluginmanager.register(ResultColumns(), "rexmle-html-columns")
        _sweep_orphans(settings)
        config.pluginmanager.register(SessionSchedule(config, settings), PLUGIN_NAME)
        for notice in notices:  # the network's warnings once per session, by the controller only
            warnings.warn(notice, stacklevel=1)


def _refuse_reruns(config: pytest.Config) -> None:
    """pytest-rerunfailures' ``--reruns N`` reruns an item's test, which would grade the very same run again (the
    run belongs to the session's schedule, not to the item's call): refused, naming what repeats a run."""
    reruns = getattr(config.option, "reruns", None)
    if reruns:
        raise pytest.UsageError(
            f"--reruns {reruns} would grade the same agent run again, not run the agent again: a benchmark item's "
            "run is started once by the session. Use --rexmle-repeat N for N runs of each task (each graded "
            "and reported), or --rexmle-resume to run again only what did not finish")


def private_folder(folder: Path) -> None:
    """Create ``folder`` readable by its owner only (0700), or make it so when this user owns it."""
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if folder.stat().st_uid == os.geteuid():
            folder.chmod(0o700)
    except OSError:  # e.g. a file in its place: each item then reports it, with the path, as its error
        return


def _sweep_orphans(settings) -> None:
    """Controller only, once: remove what a dead earlier session left behind (e.g. labelled containers)
    and move the folders of its staged runs back into their run folders."""
    # start-up: keeps 349 lines out of every pytest session (the plugin)
    from .runtime.staging import recover_all

    for folder in (settings.runs_dir, settings.report_dir):  # no agent's uid reads another run's folders
        private_folder(folder)
    removed = runtime_for(settings).sweep_orphans() + recover_all(settings.runs_dir)
    if removed:
        warnings.warn(f"rexmle: removed {removed} leftover run(s) of a dead session", stacklevel=1)


def _check_agent_and_runtime(settings, controller: bool = True, tasks=None):
    """Usage errors surface before any item runs, once, all of them together, each with its fix
    (:mod:`.preflight`); returns the settings with the session's runtime (chosen where none was given:
    :mod:`.runtime.choice`) and the session's network warnings (runs themselves stay quiet about them).
    ``tasks``: the selected tasks (default: all), whose data and time limits are checked."""
    # start-up: keeps 242 lines out of every pytest session (the plugin)
    from .preflight import session_problems, usage_message

    found = session_problems(settings, list(registry()) if tasks is None else tasks)
    if found.problems or found.runtime is None:
        raise pytest.UsageError(usage_message(found.problems or ["rexmle: no runtime could be made"]))
    settings, runtime = found.settings, found.runtime
    if controller:  # once per session: an xdist worker finds the images the controller made sure of
        # start-up: keeps 380 lines out of every pytest session (the plugin)
        from .agents.image_ready import ensure_images

        try:
            ensure_images(found.agents, runtime)
        except (RexmleError, RuntimeUnavailable) as exc:
            raise pytest.UsageError(str(exc)) from None
    _identity_notice(settings)
    return settings, found.notices


def _identity_notice(settings) -> None:
    """Agents as root or as the harness's own uid only by explicit option, and then said out loud."""
    if settings.agent_as_root:
        print("rexmle: WARNING --rexmle-agent-as-root: agents run as uid 0 (no capabilities); run.json records "
              "agent_as_root", file=sys.stderr)
    if settings.unsafe_same_uid:
        print("rexmle: WARNING --rexmle-unsafe-same-uid: Landlock agents run as your own uid and can reach this "
              "harness's environment, venv, cache and runs folder; run.json records unsafe_same_uid", file=sys.stderr)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One item per task, per agent when the session has several (``test_task[isles22-codex]``) and
    per repeat with ``--rexmle-repeat N`` > 1 (``test_task[isles22-r2]``, ``[isles22-codex-r2]``): each its
    own run. A single repeat keeps the plain ids, so a session's ids, ``-k`` and JUnit stay as they were."""
    if "rexmle_task_id" not in metafunc.fixturenames:
        return
    settings = metafunc.config.stash.get(SETTINGS_KEY, None)
    agents = (settings.agents if settings is not None else ()) or (None,)
    by_agent = "rexmle_agent_name" in metafunc.fixturenames and len(agents) > 1
    repeats = settings.repeat if settings is not None and "rexmle_repeat" in metafunc.fixturenames else 1
    names = ["rexmle_task_id"] + (["rexmle_agent_name"] if by_agent else []) + (["rexmle_repeat"] if repeats > 1 else [])
    params = []
    for task in registry():
        marks = [getattr(pytest.mark, m) for m in task.markers] + [pytest.mark.rexmle]
        for agent in agents if by_agent else (None,):
            for repeat in range(1, repeats + 1) if repeats > 1 else (None,):
                values = [task.id] + ([agent] if by_agent else []) + ([repeat] if repeat is not None else [])
                label = "-".join([task.id] + ([agent] if by_agent else []) + ([f"r{repeat}"] if repeat else []))
                params.append(pytest.param(*values, id=label, marks=marks))
    metafunc.parametrize(names if len(names) > 1 else names[0], params)


@pytest.hookimpl(optionalhook=True)
def pytest_rexmle_result(result: TaskResult, item: pytest.Item) -> None:
    """An agent that reports its own usage (the coding CLIs): that report beside the gateway's, and a
    mismatch between the two, in the run's logs and the item's JUnit properties."""
    if result.run_dir and result.agent and Path(result.run_dir).is_dir():
        item.user_properties.extend(junit_properties(record_comparison(Path(result.run_dir), result.agent)))


#: the fixture every item that waits for an agent's run requests (the benchmark item, a user's own checks)
RUN_FIXTURE = "rexmle_agent_run"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Let ``-k`` match a task's reference id and aliases as well as its project id, and keep a
    test-suite time-out off the items that wait for a run (:func:`_no_suite_timeout`)."""
    for item in items:
        if RUN_FIXTURE in getattr(item, "fixturenames", ()):
            _no_suite_timeout(item)
        callspec = getattr(item, "callspec", None)
        if callspec is None or "rexmle_task_id" not in callspec.params:
            continue
        task = registry().get(callspec.params["rexmle_task_id"])
        item.extra_keyword_matches.update({task.reference_id, *task.aliases})


def _no_suite_timeout(item: pytest.Item) -> None:
    """A pytest-timeout meant for tests (the ini's ``timeout``, ``-o timeout=``, ``--timeout``) never cuts a run.

    Why not "time limit plus margins" as the item's pytest-timeout: the item's clock starts when it begins
    to wait, and with fewer GPUs than workers its run may sit in the session's queue for days before it
    starts. The session owns the schedule, so the run is bounded where it runs: the runtime stops the agent
    at its time limit, and the item's wait ends with an ERROR when the run's harness outlives that limit
    by more than :data:`~pytest_rexmle.schedule.board.RUN_MARGIN_SECONDS` (or when the executor dies).
    The marker overrides every other source of pytest-timeout's setting; it is a no-op without the plugin."""
    item.add_marker(pytest.mark.timeout(0))


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None or not settings.agent:
        return None
    seed = "secret-keyed" if settings.seed is None else f"seed {settings.seed}, answers reproducible"
    data = f"synthetic ({seed})" if settings.data == "synthetic" else f"prepared in {settings.data_dir}"
    limit = f"{settings.time_limit:.0f} s" if settings.time_limit else "task budget"
    agents = ",".join(settings.agents) or settings.agent
    chosen = [f"rexmle: runtime {settings.runtime} chosen: {settings.runtime_reason}"] \
        if settings.runtime_reason and settings.runtime != "local" else []
    # start-up: keeps 242 lines out of every pytest session (the plugin)
    from .preflight import campaign_line, selected_tasks

    return [f"rexmle: agent={agents} runtime={settings.runtime} data={data} time-limit={limit}", *chosen,
            campaign_line(settings, selected_tasks(config, settings)),
            f"rexmle: runs in {settings.runs_dir}, reports in {settings.report_dir}"]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` with an agent starts one worker per GPU (runs before pytest_configure, so read options here);
    the runs themselves are scheduled by the session's executor whatever the number of workers."""
    if not (config.getoption("rexmle_agent") or config.getini("rexmle_agent")):
        return None
    gpus = parse_gpus(config.getoption("rexmle_gpus") or config.getini("rexmle_gpus") or None)
    return len(gpus) or None
