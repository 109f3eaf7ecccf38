"""Build realistic session reports without running agents: metrics derived from the human leaderboards
and ranked by the real ranker, so the reports exercise every view with true positions and percentiles."""

from __future__ import annotations

import random

from pytest_rexmle.leaderboard import Leaderboard
from pytest_rexmle.report.model import build_report
from pytest_rexmle.scoring.ranking import rank
from pytest_rexmle.scoring.result import INVALID, TaskResult
from pytest_rexmle.task import registry


def graded(task_id: str, quantile: float, agent: str) -> TaskResult:
    """An OK result whose every ranking metric sits at ``quantile`` of the human range (0 = best human)."""
    task = registry().get(task_id)
    board = Leaderboard.read(task.leaderboard_path)
    metrics = {}
    for m in task.ranking_metrics:
        values = sorted(board.values[m.key], reverse=m.higher_is_better)
        lo, hi = values[0], values[-1]
        metrics[m.key] = float(lo + (hi - lo) * quantile)
    return TaskResult.graded(task, metrics, rank(task, metrics), agent=agent)


def failed(task_id: str, agent: str) -> TaskResult:
    task = registry().get(task_id)
    return TaskResult.failed(task, INVALID, "case 'x': wrong shape", Leaderboard.read(task.leaderboard_path).n,
                                  agent=agent)


def session(agent: str, run_id: str, *, seed: int, ids: list[str] | None = None, fail_every: int = 4,
            options: dict | None = None) -> dict:
    rng = random.Random(seed)
    ids = ids if ids is not None else registry().ids
    results = []
    for i, task_id in enumerate(ids):
        if fail_every and (i + seed) % fail_every == 0:
            results.append(failed(task_id, agent))
        else:
            results.append(graded(task_id, rng.uniform(0.0, 1.6), agent))
    return build_report(results, agent=agent, agent_options=options or {}, settings={"data": "synthetic"},
                        run_id=run_id)
