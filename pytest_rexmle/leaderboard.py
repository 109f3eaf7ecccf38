"""Human leaderboards: the numbers an agent is ranked against (docs/reading-the-report.md)."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

NON_METRIC_COLUMNS = ("rank", "team", "mean_position")


def metric_columns(path: Path) -> list[str]:
    """Metric columns of a leaderboard file, in file order."""
    with path.open(newline="", encoding="utf-8") as fh:
        header = next(csv.reader(fh))
    return [c for c in header if c not in NON_METRIC_COLUMNS and not c.endswith("_position")]


@dataclass(frozen=True)
class Leaderboard:
    """Parsed ``leaderboard.csv``; stored positions are kept only for the self-check."""

    teams: tuple[str, ...]
    ranks: tuple[int, ...]
    values: dict[str, tuple[float, ...]]
    stored_positions: dict[str, tuple[float, ...]]
    stored_mean_positions: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.teams)

    @classmethod
    def read(cls, path: Path) -> Leaderboard:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        metrics = metric_columns(path)
        return cls(
            teams=tuple(r["team"] for r in rows),
            ranks=tuple(int(r["rank"]) for r in rows),
            values={m: tuple(float(r[m]) for r in rows) for m in metrics},
            stored_positions={m: tuple(float(r[f"{m}_position"]) for r in rows) for m in metrics},
            stored_mean_positions=tuple(float(r["mean_position"]) for r in rows),
        )

    def best(self, metric: str, higher_is_better: bool) -> float:
        vals = [v for v in self.values[metric] if not math.isnan(v)]
        return max(vals) if higher_is_better else min(vals)
