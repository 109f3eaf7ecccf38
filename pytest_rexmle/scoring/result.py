"""The per-task result record (docs/reading-the-report.md) and its on-disk form.

``result.json`` is written atomically (temp file + rename) so an interrupted session never leaves a
half-written record that ``--rexmle-resume`` would trust.
"""

from __future__ import annotations

from dataclasses import asdict, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, model_validator
from pydantic.dataclasses import dataclass

from ..documents import json_numbers, parse, read, upgrade
from ..jsonfile import write_json_atomic
from .ranking import Ranking

OK, INVALID, ERROR, MISSING, TIMEOUT = "ok", "invalid", "error", "missing", "timeout"
STATUSES = (OK, INVALID, ERROR, MISSING, TIMEOUT)


@dataclass(config=ConfigDict(extra="ignore"))
class TaskResult:
    task_id: str
    reference_id: str
    status: Literal[STATUSES]  # type: ignore[valid-type]
    reason: str | None
    metrics: dict[str, float] | None
    ranking_metrics: list[str]
    positions: dict[str, int] | None
    mean_position: float | None
    n_humans: int
    percentile: float
    agent: str = ""
    options_key: str = ""
    run_dir: str | None = None
    medal: str | None = None
    above_median: bool = False
    gpu: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    traceback: str | None = None
    #: :mod:`pytest_rexmle.scoring.leaks`: {"rules": [{"rule", "detail"}], "egress": str | None} when a rule fired
    suspected_leak: dict | None = None
    #: differences that did not stop grading (a prediction header unlike the ground truth's, scored on
    #: the ground truth's grid), one sentence each
    warnings: list[str] = field(default_factory=list)
    #: which of ``--rexmle-repeat N`` runs of its (task, agent) this is; None (left out of the JSON)
    #: in a session without repeats, so its records stay as they were
    repeat: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _earlier_words(cls, data: Any) -> Any:
        """A record written before the rename (``challenge_id``) still reads, from a file or inside a report."""
        return upgrade(data) if isinstance(data, dict) and "challenge_id" in data else data

    @classmethod
    def failed(cls, task, status: str, reason: str, n_humans: int, **kw: Any) -> TaskResult:
        return cls(task.id, task.reference_id, status, reason, None, [m.key for m in task.ranking_metrics],
                   None, None, n_humans, 0.0, **kw)

    @classmethod
    def graded(cls, task, metrics: dict[str, float], ranking: Ranking, **kw: Any) -> TaskResult:
        return cls(task.id, task.reference_id, OK, None, dict(metrics), [m.key for m in task.ranking_metrics],
                   dict(ranking.positions), ranking.mean_position, ranking.n_humans, ranking.percentile,
                   medal=ranking.medal, above_median=ranking.above_median, **kw)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if data["repeat"] is None:
            del data["repeat"]
        return json_numbers(data)

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "result") -> TaskResult:
        """Unknown keys (from a newer harness) are ignored; "inf"/"nan" strings are numbers again."""
        return parse(cls, data, where)

    def write(self, path: Path) -> None:
        write_json_atomic(path, self.to_json())

    @classmethod
    def read(cls, path: Path) -> TaskResult:
        return read(cls, path)


__all__ = ["TaskResult", "STATUSES", "OK", "INVALID", "ERROR", "MISSING", "TIMEOUT"]
