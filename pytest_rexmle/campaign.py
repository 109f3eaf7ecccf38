"""Starting runs: one at a time (a local sandbox), or every selected run at once (a batch runtime).

Why: with a scheduler runtime a 20-task session must not take 20 × 24 h. When the runtime ``batches``,
the first benchmark item asks the :class:`Campaign` to launch the runs of *every* item this process
will run (one job each), and each item then only waits for its own run and grades it. Under xdist a
worker does not know which items it will get, so there each item launches its own run (``-n`` still
works, with one run in flight per worker).

Both paths share :func:`begin`: resume a finished result, re-attach to a run an earlier session left
in flight, or launch a new one.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

from .agents.base import Agent
from .data.store import TaskData
from .gpus import GpuPool
from .result import ChallengeResult
from .run import LaunchedRun, RunFolder, find_resumable, launch, reattach, run_key
from .runtime.base import Runtime
from .task import Task, registry


@dataclass
class Begun:
    """A run as an item receives it: a resumed result, or a launched run to wait for."""

    time_limit: float
    resumed: ChallengeResult | None = None
    launched: LaunchedRun | None = None
    gpus: tuple[str, ...] = ()
    hold: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    @property
    def folder(self) -> RunFolder:
        if self.launched is not None:
            return self.launched.folder
        return RunFolder(Path(self.resumed.run_dir))


def hidden_paths(settings, data: TaskData) -> tuple[Path, ...]:
    from .paths import cache_home

    return tuple(p for p in (data.private, data.root, data.root.parent, settings.data_dir, cache_home(),
                             settings.runs_dir, settings.report_dir))


def begin(settings, task: Task, data: TaskData, agent: Agent, runtime: Runtime) -> Begun:
    time_limit = settings.time_limit or task.time_limit_seconds
    key = run_key(task, agent, data, time_limit, runtime.name, settings)
    if settings.resume:
        previous = find_resumable(settings.runs_dir, task, agent, key)
        if previous is not None:
            return Begun(time_limit, resumed=previous)
        attached = reattach(settings.runs_dir, task, data, agent, runtime, time_limit, key)
        if attached is not None:
            return Begun(time_limit, launched=attached)
    begun = Begun(time_limit)
    gpus: list[str] = []
    if not runtime.batches:  # a scheduler hands out its own GPUs on the node; the local pool is for this host
        pool = GpuPool(settings.runs_dir / ".gpu-locks", list(settings.all_gpus))
        gpus = begun.hold.enter_context(pool.hold(list(settings.gpus), task.gpus if settings.all_gpus else 0))
    try:
        folder = RunFolder.create(settings.runs_dir, task, agent)
        begun.gpus = tuple(gpus)
        begun.launched = launch(task, data, agent, runtime, folder, time_limit, gpus=tuple(gpus),
                                hidden=hidden_paths(settings, data), key=key, network=settings.network)
    except BaseException:
        begun.hold.close()
        raise
    return begun


def task_data(settings, task: Task) -> TaskData:
    from .data.store import prepared_data, synthetic_data

    if settings.data == "synthetic":
        return synthetic_data(task, seed=settings.seed)
    return prepared_data(task, settings.data_dir)


class Campaign:
    """The runs this process launched ahead of their items (batch runtimes, no xdist)."""

    def __init__(self, settings, agents: dict[str, Agent], runtime: Runtime, items: list, enabled: bool) -> None:
        self.settings, self.agents, self.runtime = settings, agents, runtime
        self.items = items
        self.enabled = enabled and runtime.batches
        self.launched: dict[str, Begun] = {}
        self.started = False

    def take(self, nodeid: str) -> Begun | None:
        """The item's run if the campaign launched it (launching all of them on the first call)."""
        if not self.enabled:
            return None
        if not self.started:
            self.started = True
            self.launch_all()
        return self.launched.pop(nodeid, None)

    def launch_all(self) -> None:
        for nodeid, task, agent in self._selected():
            try:
                data = task_data(self.settings, task)
                self.launched[nodeid] = begin(self.settings, task, data, self.agents[agent], self.runtime)
            except Exception:
                # missing data skips, a broken setup errors: the item meets it again on its own, so the
                # failure is reported against that challenge and not against whichever item came first
                continue

    def _selected(self) -> list[tuple[str, Task, str]]:
        """(node id, task, agent name) of every benchmark item of this process."""
        out = []
        reg = registry()
        for item in self.items:
            callspec = getattr(item, "callspec", None)
            task_id = callspec.params.get("rexmle_task_id") if callspec is not None else None
            agent = callspec.params.get("rexmle_agent_name", self.settings.agent) if callspec is not None else None
            if task_id is not None and reg.get(task_id).implemented and agent in self.agents:
                out.append((item.nodeid, reg.get(task_id), agent))
        return out
