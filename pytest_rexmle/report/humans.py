"""Where a value stands among a challenge's human teams, in words a reader takes in at once.

Reports show each metric value with its position ("4th of 11": where it would place among the N human
teams plus itself, ties sharing the better place, as docs/reading-the-report.md counts) and the human best and median,
so a reader sees the distance to the humans without opening the leaderboard.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ..leaderboard import Leaderboard
from ..scoring.ranking import medal_thresholds, percentile, position
from ..task import registry


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st, ..."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def place(pos: int | float | None, n_humans: int | None) -> str:
    """``4th of 11`` (N humans plus the agent); ``-`` when unknown."""
    if pos is None or n_humans is None:
        return "-"
    return f"{ordinal(int(pos))} of {int(n_humans) + 1}"


@dataclass(frozen=True)
class MetricHumans:
    key: str
    higher_is_better: bool
    values: tuple[float, ...]

    @property
    def best(self) -> float:
        vals = [v for v in self.values if not math.isnan(v)]
        return max(vals) if self.higher_is_better else min(vals)

    @property
    def median(self) -> float:
        return float(statistics.median(v for v in self.values if not math.isnan(v)))

    def position(self, value: float) -> int:
        return position(value, self.values, self.higher_is_better)


@dataclass(frozen=True)
class TaskHumans:
    n: int
    metrics: tuple[MetricHumans, ...]
    top_percentile: float      # the winning team's percentile
    median_percentile: float   # the median team's percentile (the median threshold of the medals)


def humans_of(task_id: str) -> TaskHumans | None:
    """The human side of a challenge from its packaged leaderboard; None for an unknown id."""
    try:
        task = registry().get(task_id)
        board = Leaderboard.read(task.leaderboard_path)
    except Exception:  # a merged report may name a challenge this version does not know
        return None
    metrics = tuple(MetricHumans(m.key, m.higher_is_better, board.values[m.key]) for m in task.ranking_metrics)
    return TaskHumans(board.n, metrics, percentile(min(board.stored_mean_positions), board.n),
                           percentile(medal_thresholds(board)["median"], board.n))
