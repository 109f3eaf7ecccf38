"""Beginning one run: resume a finished result, re-attach to a run still in flight, or launch a new one.

The session's executor (:mod:`pytest_rexmle.schedule`) decides *when* a run begins and on which GPUs;
this module only knows *how*: :func:`begin` is called by :func:`pytest_rexmle.schedule.perform.perform`,
the one place where a run starts and ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..agents.base import Agent
from ..data.synthetic import ensure_synthetic
from ..data.taskdata import TaskData, prepared_data
from ..paths import cache_home
from ..runtime.base import Runtime
from ..scoring.result import TaskResult
from ..task import Task
from .launch import LaunchedRun, RunFolder, find_resumable, launch, reattach, run_key


@dataclass
class Begun:
    """A run as the executor receives it: a resumed result, or a launched run to wait for."""

    time_limit: float
    resumed: TaskResult | None = None
    launched: LaunchedRun | None = None


def hidden_paths(settings, data: TaskData) -> tuple[Path, ...]:
    return (data.private, data.root, data.root.parent, settings.data_dir, cache_home(), settings.runs_dir,
            settings.report_dir)


def begin(settings, task: Task, data: TaskData, agent: Agent, runtime: Runtime, gpus: tuple[str, ...] = (),
          identity: dict | None = None) -> Begun:
    """``gpus``: what the executor gave this run (a scheduler runtime's node hands out its own instead);
    ``identity``: the item's (:func:`.schedule.board.item_identity`), part of the resume key, so the item
    resumes or re-attaches to its own run only, never a sibling repeat's."""
    time_limit = settings.time_limit_for(task)
    key = run_key(task, agent, data, time_limit, runtime.name, settings, identity)
    if settings.resume:
        previous = find_resumable(settings.runs_dir, task, agent, key)
        if previous is not None:
            return Begun(time_limit, resumed=previous)
        attached = reattach(settings.runs_dir, task, data, agent, runtime, time_limit, key)
        if attached is not None:
            return Begun(time_limit, launched=attached)
    folder = RunFolder.create(settings.runs_dir, task, agent)
    launched = launch(task, data, agent, runtime, folder, time_limit, gpus=tuple(gpus),
                      hidden=hidden_paths(settings, data), key=key, network=settings.network,
                      runtime_reason=settings.runtime_reason, identity=identity,
                      repeats=getattr(settings, "repeat", 1))
    return Begun(time_limit, launched=launched)


def task_data(settings, task: Task) -> TaskData:
    if settings.data == "synthetic":
        return ensure_synthetic(task, seed=settings.seed)
    return prepared_data(task, settings.data_dir)
