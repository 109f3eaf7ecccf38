"""The pytest side of the schedule: the controller starts the executor once collection is done, and an
item waits for its own run's record on the board.

Without xdist the controller collects the items itself (``pytest_collection_finish``); with xdist it
learns the selection from the first worker's collection (``pytest_xdist_node_collection_finished``,
before any item is handed out) and hands every worker the board's folder through ``workerinput``.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from ..data.missing import missing, missing_note, skip_reason
from ..jsonfile import write_json_atomic
from ..paths import BENCHMARK_MODULE
from ..runtime import RUNTIMES
from ..task import registry
from .board import BENCHMARK_ITEM, FIGURES, STOP_REASON, Board, item_identity, run_key, task_of_key
from .executor import Executor
from .figures import campaign_figures

PLUGIN_NAME = "rexmle-schedule"
WORKER_KEY = "rexmle_board"


class Terminated(KeyboardInterrupt):
    """SIGTERM to the session: unwind like Ctrl-C, so every run in flight is stopped and cleaned up."""


def _on_sigterm(board: Board):
    def handler(signum, frame) -> None:  # noqa: ARG001
        try:
            (board.folder / STOP_REASON).write_text("SIGTERM")
        except OSError:
            pass
        raise Terminated("SIGTERM")
    return handler


def identities(items) -> dict[str, dict]:
    """Each planned run's board key and its item's identity (:func:`.board.item_identity`), in collection
    order: what the run's harness adds to the resume key, so an item resumes only its own run."""
    out: dict[str, dict] = {}
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None:
            continue
        task_id = callspec.params.get("rexmle_task_id")
        if task_id is not None and "rexmle_agent_run" in getattr(item, "fixturenames", ()):
            key = run_key(item.nodeid, task_id, callspec.params.get("rexmle_agent_name"))
            out[key] = item_identity(item.nodeid, callspec.params.get("rexmle_repeat"), _is_benchmark(item))
    return out


def _is_benchmark(item) -> bool:
    return getattr(item, "path", None) == BENCHMARK_MODULE and item.name.startswith(BENCHMARK_ITEM)


def _param(nodeid: str) -> str:
    """What an item id says between its brackets (``isles22-r2`` of ``...::test_task[isles22-r2]``), else ""."""
    return nodeid[nodeid.rindex("[") + 1:-1] if nodeid.endswith("]") and "[" in nodeid else ""


def repeat_of(nodeid: str) -> int | None:
    """The repeat an item id names (``test_task[isles22-r2]``), for a worker that sent no plan."""
    tail = _param(nodeid).rsplit("-", 1)[-1]
    return int(tail[1:]) if tail[:1] == "r" and tail[1:].isdigit() else None


def plan_path(board: Board, worker: str) -> Path:
    return board.folder / f"plan-{worker}.json"


class WorkerPlan:
    """xdist worker: tells the controller which of its collected items ask for a run (the controller
    itself collects nothing and sees only item ids); written before the worker reports its collection."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        board = board_for(self.config)
        worker = self.config.workerinput["workerid"]  # type: ignore[attr-defined]  # set by pytest-xdist on workers
        write_json_atomic(plan_path(board, worker), identities(session.items))


def task_of(nodeid: str, known: set[str]) -> str | None:
    """The task an item id names (``...::test_task[isles22]``), or None for other items."""
    param = _param(nodeid)
    if param in known:
        return param
    matches = [t for t in known if param.startswith(t + "-") or param.endswith("-" + t) or f"-{t}-" in param]
    return max(matches, key=len) if matches else None


class SessionSchedule:
    """Controller-only plugin: owns the board and the executor of the session."""

    def __init__(self, config: pytest.Config, settings) -> None:
        self.config, self.settings = config, settings
        self.board = Board.create(settings.runs_dir)
        self.executor: Executor | None = None
        self.figures: dict | None = None
        self._session: pytest.Session | None = None
        self._previous_sigterm: Callable[[int, FrameType | None], Any] | int | None = None

    def begin(self, plan: dict[str, dict]) -> None:
        """``plan``: each planned run's board key and its item's identity, in collection order."""
        if self.executor is not None:
            return

        runs = self._without_data(list(plan))
        batches = RUNTIMES.load(self.settings.runtime).batches
        self.executor = Executor(self.settings, self.board, runs, batches, identities=plan)
        if threading.current_thread() is threading.main_thread():
            self._previous_sigterm = signal.signal(signal.SIGTERM, _on_sigterm(self.board))
        self.executor.start()

    def _without_data(self, runs: list[str]) -> list[str]:
        """Runs whose prepared data is missing never start: the session says so once, grouped by release
        (:mod:`..data.missing`), and their board records say "skipped" for any item that waits on one."""
        if self.settings.data != "prepared" or self.settings.prepare or not runs:
            return runs

        tasks = registry()
        absent = {t.id: t for t in missing([tasks.get(task_of_key(k)) for k in runs], self.settings.data_dir)}
        if not absent:
            return runs
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        for line in missing_note(list(absent.values()), self.settings.data_dir):
            if terminal is not None:
                terminal.write_line(line)
        for key in runs:
            if task_of_key(key) in absent:
                self.board.write(key, "skipped", reason=skip_reason(absent[task_of_key(key)], self.settings.data_dir))
        return [k for k in runs if task_of_key(k) not in absent]

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if session.config.option.collectonly:
            return
        self.begin(identities(session.items))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        """Every worker collects the same items; the first one's plan is the session's."""
        if self.executor is not None:
            return
        try:
            plan = json.loads(plan_path(self.board, node.workerinput["workerid"]).read_text())
        except (OSError, ValueError):  # a worker without this plugin's plan: every task item asks for a run
            known = set(registry().ids)
            plan = {run_key(i, t): item_identity(i, repeat_of(i)) for i in ids if (t := task_of(i, known)) is not None}
        self.begin(plan if isinstance(plan, dict) else {key: {} for key in plan})

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """After pytest's own bookkeeping (``--maxfail`` counts the failure first): once it decided to stop,
        the executor starts no new run and skips the queued ones (they would cost GPU time for items that
        never report)."""
        session = self._session
        if self.executor is None or session is None or not (session.shouldstop or session.shouldfail):
            return
        self.executor.cancel(stop_reason(self.config, session.shouldstop or session.shouldfail))

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self._session = session

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        node.workerinput[WORKER_KEY] = str(self.board.folder)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Stop what is still in flight (``-x``, an interrupt), then compute the campaign's figures."""
        if self.executor is None:
            return
        try:
            self.executor.close()
        finally:
            if self._previous_sigterm is not None:
                signal.signal(signal.SIGTERM, self._previous_sigterm)
                self._previous_sigterm = None

        records = {r.run: r for r in self.board.records()}
        self.figures = campaign_figures(self.executor, records)
        write_json_atomic(self.board.folder / FIGURES, self.figures)


def stop_reason(config: pytest.Config, why: object) -> str:
    """``the session stopped (-x): stopping after 1 failures``: the option that stopped it, and pytest's words."""
    maxfail = config.getoption("maxfail", 0) or 0
    if config.getoption("stepwise", False):
        flag = "--sw"
    elif maxfail == 1:
        flag = "-x"
    elif maxfail:
        flag = f"--maxfail={maxfail}"
    else:
        flag = "pytest stopped"
    text = why if isinstance(why, str) else ""
    return f"the session stopped ({flag})" + (f": {text}" if text else "")


def board_for(config: pytest.Config) -> Board:
    """The session's board, in the controller or on a worker."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return Board(workerinput[WORKER_KEY])
    plugin = config.pluginmanager.get_plugin(PLUGIN_NAME)
    assert plugin is not None  # the controller registers it at configure time
    return plugin.board


class Progress:
    """One line now and then while an item waits in the controller: runs queued and running, or for a
    scheduler runtime the scheduler's own states (``slurm: 2 pending, 1 running``)."""

    def __init__(self, show: Callable[[str], None], board: Board, runtime: str, batches: bool,
                 every: float = 2.0) -> None:
        self.show, self.board, self.runtime, self.batches, self.every = show, board, runtime, batches, every
        self._checked = time.monotonic()  # a run that ends within `every` seconds prints nothing
        self._shown = (0.0, "")

    def __call__(self) -> None:
        now = time.monotonic()
        if now - self._checked < self.every:
            return
        self._checked = now
        line = self.line()
        if line and (line != self._shown[1] or now - self._shown[0] > 60):
            self._shown = (now, line)
            self.show(line)

    def line(self) -> str:
        """From the executor's one status file (:data:`.board.STATUS`): a read of a few bytes, whatever the
        campaign's size (reading every run's record every 2 s cost N² over a session)."""
        status = self.board.status() or {}
        if self.batches:
            counts = {s: n for s, n in (status.get("scheduler") or {}).items() if n and s != "completed"}
            return f"{self.runtime}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) if counts else ""
        return "rexmle: " + ", ".join(f"{status[s]} {s}" for s in ("running", "queued", "finished") if status.get(s))
