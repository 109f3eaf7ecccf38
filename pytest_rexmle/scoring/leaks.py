"""Suspected leaks: a graded result too good to have been earned, flagged for a reviewer.

Blocking the task's data hosts is not enough (a release can be mirrored anywhere, a sandbox can have a
hole), so every graded result is also checked for two symptoms of an agent that saw the answers:
``answers-reproduced`` (every ranking metric within ``ANSWERS_TOLERANCE`` of the value the private answers
themselves score, relative to ``max(1, |perfect|)``) and ``beats-humans`` (on more than ``MIN_METRIC_SHARE``
of the ranking metrics, better than the best human by more than ``HUMAN_MARGIN`` of the leaderboard's spread,
the spread at least ``MIN_SPREAD_FRACTION`` of ``|best|``; never on synthetic twins, whose values are not
comparable with the humans'). A flag never changes the percentile: it asks for a look, it is not a verdict.

The rules, why their thresholds are what they are, and what they cannot see (answers copied and then
degraded, answers used only to choose between honest models) are explained once, in
docs/security/host-side.md, "Suspected leaks" (:data:`DOCS`), which every flag points to.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from ..agent_output import RefusedFile, read_json
from ..documents import json_numbers
from ..graders.base import load_grader
from ..jsonfile import write_json_atomic
from ..leaderboard import Leaderboard
from ..task import Task
from .grading import grade_submission
from .result import OK, TaskResult

ANSWERS_TOLERANCE = 1e-3
HUMAN_MARGIN = 0.5
MIN_SPREAD_FRACTION = 0.05
MIN_METRIC_SHARE = 0.5
ANSWERS_REPRODUCED, BEATS_HUMANS = "answers-reproduced", "beats-humans"
#: where the flags are explained (a page and anchor of the user's guide; mkdocs --strict checks the anchor)
DOCS = "docs/security/host-side.md#suspected-leaks"
REFERENCE_DIR = "leak-reference"
#: run.json is a few kB (an egress log of many hosts a few hundred more)
MAX_RUN_JSON = 4 * 1024 * 1024


def perfect_metrics(task: Task, answers_dir: Path, cache_dir: Path, answers_id: str | None) -> dict[str, float]:
    """The metrics of the private answers submitted as they are (cached: a real 3D task grades in minutes).

    The answers are converted and graded in a temporary folder of the cache, which no sandbox mounts.
    """
    key = f"{task.id}-v{task.version}-{answers_id or 'unnamed'}"
    cached = Path(cache_dir) / REFERENCE_DIR / f"{key}.json"
    try:
        data = json.loads(cached.read_text(encoding="utf-8"))
        if isinstance(data, dict) and data:
            return {str(k): float(v) for k, v in data.items()}  # float() reads back "inf" / "-inf"
    except (OSError, ValueError, TypeError):
        pass
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="leak-reference-", dir=cache_dir) as tmp:
        load_grader(task).write_perfect(Path(answers_dir), Path(tmp) / "submission")
        outcome = grade_submission(task, Path(tmp) / "submission", Path(answers_dir))
    if outcome.status != OK or outcome.metrics is None:
        raise ValueError(f"{task.id}: the answers do not grade as a submission ({outcome.reason})")
    if answers_id is not None:  # only a named set of answers can be cached without mixing two up
        write_json_atomic(cached, json_numbers(outcome.metrics))
    return dict(outcome.metrics)


def answers_reproduced(task: Task, metrics: dict[str, float], perfect: dict[str, float]) -> str | None:
    """Why the result sits at the answers' own value on every ranking metric, or None."""
    shown = []
    for metric in task.ranking_metrics:
        value, best = metrics.get(metric.key), perfect.get(metric.key)
        if value is None or best is None:
            return None
        value, best = float(value), float(best)
        if math.isinf(best) or math.isinf(value):
            if value != best:
                return None
        elif math.isnan(value) or abs(value - best) > ANSWERS_TOLERANCE * max(1.0, abs(best)):
            return None
        shown.append(f"{metric.key}={value:.4g} (answers: {best:.4g})")
    if not shown:
        return None
    return (f"every ranking metric within {ANSWERS_TOLERANCE:g} of the value the private answers score: "
            + ", ".join(shown))


def beats_humans(task: Task, metrics: dict[str, float], board: Leaderboard) -> str | None:
    """Why the result beats the best human by more than half the leaderboard's spread on more than half
    of the ranking metrics, or None."""
    found, judged = [], 0
    for metric in task.ranking_metrics:
        value = metrics.get(metric.key)
        humans = [v for v in board.values.get(metric.key, ()) if not math.isnan(v)]
        if value is None or math.isnan(value) or not humans:
            continue
        judged += 1
        best = max(humans) if metric.higher_is_better else min(humans)
        worst = min(humans) if metric.higher_is_better else max(humans)
        spread = max(abs(best - worst), MIN_SPREAD_FRACTION * abs(best))
        gain = (value - best) if metric.higher_is_better else (best - value)
        if spread > 0 and gain > HUMAN_MARGIN * spread:
            found.append(f"{metric.key}={value:.4g} beats the best human ({best:.4g}) by {gain:.4g}, more than "
                         f"{HUMAN_MARGIN:g} x the leaderboard's spread ({spread:.4g})")
    if not found or len(found) <= MIN_METRIC_SHARE * judged:
        return None
    return "; ".join(found)


def egress_note(run_dir: Path | None) -> str | None:
    """Where the run's egress log is, with a one-line summary, when the gateway wrote one."""
    if run_dir is None:
        return None
    try:
        meta = read_json(Path(run_dir) / "run.json", MAX_RUN_JSON, "run.json", max_depth=16)
    except RefusedFile:
        return None
    egress = meta.get("egress") if isinstance(meta, dict) else None
    if not isinstance(egress, list):
        return None
    hosts = [e for e in egress if isinstance(e, dict)]
    allowed = sorted({str(e.get("host")) for e in hosts if e.get("allowed") is True})
    return (f"run.json egress: {len(hosts)} request(s), allowed hosts: "
            + (", ".join(allowed[:10]) + (" ..." if len(allowed) > 10 else "") if allowed else "none"))


def check(task: Task, result: TaskResult, perfect: dict[str, float] | None, *,
          synthetic: bool = False) -> dict | None:
    """The ``suspected_leak`` record of a graded result, or None when no rule fires. ``synthetic``: graded
    on a synthetic twin, where ``beats-humans`` does not apply (the humans were never measured on such data).

    ``{"rules": [{"rule": "answers-reproduced" | "beats-humans", "detail": str}], "egress": str | None}``
    """
    if result.status != OK or not result.metrics:
        return None
    rules = []
    if perfect is not None and (detail := answers_reproduced(task, result.metrics, perfect)):
        rules.append({"rule": ANSWERS_REPRODUCED, "detail": detail})
    if not synthetic and (detail := beats_humans(task, result.metrics, Leaderboard.read(task.leaderboard_path))):
        rules.append({"rule": BEATS_HUMANS, "detail": detail})
    if not rules:
        return None
    return {"rules": rules, "egress": egress_note(Path(result.run_dir) if result.run_dir else None)}


def summary(leak: dict | None) -> str:
    """``answers-reproduced, beats-humans`` (empty when nothing fired): the marker reports show."""
    return ", ".join(r["rule"] for r in (leak or {}).get("rules", []))
