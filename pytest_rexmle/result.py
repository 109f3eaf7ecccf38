"""The per-challenge result record (ranking.md §9) and its on-disk form.

``result.json`` is written atomically (temp file + rename) so an interrupted session never leaves a
half-written record that ``--rexmle-resume`` would trust.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .jsonfile import write_json_atomic
from .ranking import Ranking

OK, INVALID, ERROR, MISSING, TIMEOUT = "ok", "invalid", "error", "missing", "timeout"
STATUSES = (OK, INVALID, ERROR, MISSING, TIMEOUT)
SCHEMA_VERSION = 1


def _encode(value: Any) -> Any:
    if isinstance(value, float):
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        if math.isnan(value):
            return "nan"
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    return value


def _decode_number(value: Any) -> Any:
    if value in ("inf", "-inf", "nan"):
        return float(value)
    return value


@dataclass
class ChallengeResult:
    challenge_id: str
    reference_id: str
    status: str
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
    #: :mod:`pytest_rexmle.leaks`: {"rules": [{"rule", "detail"}], "egress": str | None} when a rule fired
    suspected_leak: dict | None = None

    @property
    def passed_grading(self) -> bool:
        return self.status == OK

    @classmethod
    def failed(cls, task, status: str, reason: str, n_humans: int, **kw: Any) -> "ChallengeResult":
        return cls(task.id, task.reference_id, status, reason, None, [m.key for m in task.ranking_metrics],
                   None, None, n_humans, 0.0, **kw)

    @classmethod
    def graded(cls, task, metrics: dict[str, float], ranking: Ranking, **kw: Any) -> "ChallengeResult":
        return cls(task.id, task.reference_id, OK, None, dict(metrics), [m.key for m in task.ranking_metrics],
                   dict(ranking.positions), ranking.mean_position, ranking.n_humans, ranking.percentile,
                   medal=ranking.medal, above_median=ranking.above_median, **kw)

    def to_json(self) -> dict[str, Any]:
        return _encode(asdict(self))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ChallengeResult":
        data = dict(data)
        if data.get("metrics") is not None:
            data["metrics"] = {k: _decode_number(v) for k, v in data["metrics"].items()}
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})

    def write(self, path: Path) -> None:
        write_json_atomic(path, self.to_json())

    @classmethod
    def read(cls, path: Path) -> "ChallengeResult":
        return cls.from_json(json.loads(path.read_text(encoding="utf-8")))

