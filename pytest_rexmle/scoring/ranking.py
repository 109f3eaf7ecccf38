"""Placing a graded submission against the human leaderboard: positions, percentile, score, medals
(docs/reading-the-report.md).

Positions count only humans *strictly* better, so ties share the best position; NaN is worst.
Nothing is rounded here: rounding is a display concern.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from statistics import mean

from ..errors import RankingError
from ..leaderboard import Leaderboard
from ..task import Task


def position(agent_value: float, human_values: Iterable[float], higher_is_better: bool) -> int:
    """1 + number of humans strictly better than ``agent_value``; NaN ranks last (N + 1)."""
    humans = list(human_values)
    if math.isnan(agent_value):
        return len(humans) + 1
    if higher_is_better:
        return 1 + sum(1 for h in humans if h > agent_value)
    return 1 + sum(1 for h in humans if h < agent_value)


def percentile(mean_position: float, n_humans: int) -> float:
    return 1.0 - (mean_position - 1.0) / n_humans


@dataclass(frozen=True)
class Ranking:
    task_id: str
    positions: dict[str, int]
    mean_position: float
    percentile: float
    n_humans: int
    medal: str | None
    above_median: bool

    def to_json(self) -> dict:
        return {
            "task": self.task_id,
            "positions": dict(self.positions),
            "mean_position": self.mean_position,
            "percentile": self.percentile,
            "n_humans": self.n_humans,
        }


def medal_thresholds(board: Leaderboard) -> dict[str, float]:
    """MLE-bench-style thresholds from the stored human mean positions (reported only, never scored)."""
    order = sorted(range(board.n), key=lambda i: board.ranks[i])
    means = [board.stored_mean_positions[i] for i in order]
    return {"gold": means[0], "silver": means[min(1, board.n - 1)], "bronze": means[min(2, board.n - 1)],
            "median": means[board.n // 2]}


def rank(task: Task, metrics: Mapping[str, float], board: Leaderboard | None = None) -> Ranking:
    """Rank ``metrics`` (which must contain every ranking metric of ``task``) against its leaderboard."""
    board = board or Leaderboard.read(task.leaderboard_path)
    ranking_keys = [m.key for m in task.ranking_metrics]
    missing = [k for k in ranking_keys if k not in metrics]
    if missing:
        raise RankingError(f"{task.id}: missing ranking metric(s) {missing}; expected {ranking_keys}")
    positions: dict[str, int] = {}
    for metric in task.ranking_metrics:
        value = metrics[metric.key]
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise RankingError(f"{task.id}: metric {metric.key!r} is not a number: {value!r}") from None
        positions[metric.key] = position(value, board.values[metric.key], metric.higher_is_better)
    mean_pos = float(mean(positions.values()))
    thresholds = medal_thresholds(board)
    medal = next((name for name in ("gold", "silver", "bronze") if mean_pos <= thresholds[name]), None)
    return Ranking(task.id, positions, mean_pos, percentile(mean_pos, board.n), board.n, medal,
                   mean_pos <= thresholds["median"])


def check_metric_names(task: Task, metrics: Mapping[str, object]) -> None:
    """Reject metric names the task does not know (a typo would otherwise be silently ignored)."""
    known = {m.key for m in task.metrics}
    unknown = sorted(set(metrics) - known)
    if unknown:
        raise RankingError(f"{task.id}: unknown metric(s) {unknown}; known: {sorted(known)}")


def overall_score(percentiles: Iterable[float]) -> float:
    """Mean percentile over the selected tasks; callers pass 0.0 for every FAIL."""
    values = list(percentiles)
    return sum(values) / len(values) if values else 0.0
