"""The session report document (``rexmle-report.json``), schema ``rexmle-report/2``.

Top level::

    {
      "schema": "rexmle-report/2",
      "created": ISO-8601 UTC time,
      "run_id": str,                      unique per session
      "agent": str, "agent_options": {..}, "settings": {data, runtime, time_limit, min_percentile, resume, seed},
      "selected": [project ids],          every task the session selected (ran, failed or skipped)
      "partial": bool,                    false only when all 20 tasks were selected
      "score": float,                     mean percentile over "selected", FAILs, ERRORs (and not-run) as 0;
                                          with repeats each task (and agent) counts once, as the mean
                                          over its repeats
      "n_fail": int,                      agent FAILs: invalid, missing (also not run), timeout (every run)
      "n_error": int,                     harness ERRORs (status "error"): our fault, not the agent's (every run)
      "n_below_min_percentile": int,      only when some are: ok records below --rexmle-min-percentile (each
                                          marked "below_min_percentile"; failed items in pytest, their
                                          percentile still in the score)
      "skipped": [project ids],           selected but skipped by pytest (data not prepared): 0 in the score,
                                          counted apart from FAILs, as pytest's summary counts them
      "data_kind": "synthetic" | "real",  what was graded (settings.data "synthetic" or "prepared")
      "tasks": [result records + agent, run_dir, timings, medal, above_median; every run, each with
                     its "repeat" under --rexmle-repeat N > 1],
      "repeats": int, "n_runs": int,      only with --rexmle-repeat N > 1: N, and the runs in "tasks"
      "aggregate": [...]                  only then: per agent, the score of each repeat, their mean, SEM and
                                          interval, and per task the mean percentile over its repeats,
                                          its SEM and interval and each repeat's status (see :func:`with_aggregate`)
      "note": str,                        what the numbers mean (agents on our split, humans on theirs)
      "submissions": {task id (or task@agent): {"files": {path: sha256}, "answers_id": str | null}}
                                          each graded run's submission, what `rexmle report --verify` checks
    }

Numbers are unrounded; +inf/-inf are the strings "inf"/"-inf".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import Field, Strict, StrictBool, StrictInt, StrictStr, field_validator

from ..compute import hardware, hardware_text
from ..documents import Document
from ..leaderboard import Leaderboard
from ..scoring.ranking import overall_score
from ..scoring.result import ERROR, MISSING, OK, TaskResult
from ..task import registry

SCHEMA = "rexmle-report/2"
NOTE = ("Human numbers were measured by the challenge organisers on their own test sets; agents are graded "
        "on the project's split of the public training data (LDCT-IQA excepted: organisers' test set).")
SYNTHETIC_NOTE = ("Graded on synthetic twins: data the harness generated in each challenge's layout, not the "
                  "challenge's images. The percentiles check the pipeline end to end; they say nothing about how "
                  "the agent compares with the human teams, whose numbers come from the organisers' test sets.")
MIXED_NOTE = "Some sessions were graded on synthetic twins, some on real data: see the data column. " + NOTE
SYNTHETIC, REAL = "synthetic", "real"


def data_kind(doc: dict) -> str:
    """``synthetic`` or ``real`` for a session report (older reports carry only ``settings.data``)."""
    kind = doc.get("data_kind") or ((doc.get("settings") or {}).get("data"))
    return SYNTHETIC if kind == SYNTHETIC else REAL


def note_for(kinds: Iterable[str]) -> str:
    """The footer: what was graded, never the real-data sentence for synthetic twins."""
    kinds = set(kinds)
    if kinds == {SYNTHETIC}:
        return SYNTHETIC_NOTE
    return MIXED_NOTE if SYNTHETIC in kinds else NOTE


def not_run(task_id: str, reason: str) -> TaskResult:
    """A selected task that produced no result counts as FAIL (docs/reading-the-report.md)."""
    return _failed(task_id, MISSING, f"not run: {reason}")


def harness_error(task_id: str, message: str, traceback: str | None) -> TaskResult:
    """A selected task the harness broke on before grading (runtime unavailable, image missing, a
    failing fixture): status ``error`` with the real message and traceback, never an agent FAIL."""
    return _failed(task_id, ERROR, f"harness error: {message}", traceback)


def _failed(task_id: str, status: str, reason: str, traceback: str | None = None) -> TaskResult:
    task = registry().get(task_id)
    n_humans = Leaderboard.read(task.leaderboard_path).n
    return TaskResult.failed(task, status, reason, n_humans, traceback=traceback)


def build_report(results: Iterable[TaskResult], *, agent: str | None, agent_options: dict, settings: dict,
                 run_id: str, skipped: Iterable[str] = (), repeats: int = 1) -> dict:
    """``skipped``: selected tasks pytest skipped (their records are ``missing`` with the skip reason);
    they still count 0 in the score but are not agent FAILs. ``repeats``: the session's ``--rexmle-repeat``;
    above 1 every run keeps its record, the score counts each (task, agent) once (the mean over its
    repeats), FAILs and ERRORs are counted per run (one never hides behind an ok sibling), and
    ``aggregate`` gives each task's mean, SEM and interval over its repeats."""
    records = sorted(results, key=lambda r: (r.task_id, r.repeat or 0))
    groups: dict[tuple[str, str], list[TaskResult]] = {}
    for rec in records:  # a record made by the session (not run, harness error) may not name the agent
        groups.setdefault((rec.task_id, rec.agent or agent or ""), []).append(rec)
    selected = [cid for cid, _ in groups]
    skipped = sorted(set(skipped) & set(selected))
    kind = SYNTHETIC if settings.get("data") == SYNTHETIC else REAL
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "created": datetime.now(UTC).isoformat(),
        "run_id": run_id,
        "agent": agent,
        "agent_options": agent_options,
        "settings": settings,
        "selected": selected,
        "partial": set(selected) != set(registry().ids),
        "score": overall_score(_mean([r.percentile if r.status == OK else 0.0 for r in g]) for g in groups.values()),
        "n_fail": sum(1 for r in records if r.status not in (OK, ERROR) and r.task_id not in skipped),
        "n_error": sum(1 for r in records if r.status == ERROR),
        "skipped": skipped,
        "data_kind": kind,
        "tasks": [_with_threshold(r.to_json(), settings) for r in records],
        "note": note_for([kind]),
    }
    below = sum(1 for r in doc["tasks"] if r.get("below_min_percentile"))
    if below:
        doc["n_below_min_percentile"] = below
    if repeats > 1:
        doc.update(repeats=repeats, n_runs=len(records))
    return doc


def _with_threshold(record: dict, settings: dict) -> dict:
    """An ok record below ``--rexmle-min-percentile`` is a failed item in pytest: the report says so
    (``below_min_percentile``) rather than showing it as a silent ok. Its percentile still counts."""
    threshold = settings.get("min_percentile") or 0.0
    if record["status"] == OK and isinstance(threshold, (int, float)) and record["percentile"] < threshold:
        record["below_min_percentile"] = True
    return record


def percentile_of(rec: dict | None) -> float:
    """A record's part in a score: its percentile when it is OK, 0 for a FAIL, an ERROR or no record."""
    return float(rec["percentile"]) if rec is not None and rec["status"] == OK else 0.0


def count_fails(selected: Iterable[str], records: dict[str, dict], skipped: set[str]) -> int:
    """The FAILs among ``selected``: a task without a record, or one that ended neither OK nor in a harness
    ERROR, unless pytest skipped it."""
    return sum(1 for c in selected if c not in records
               or (records[c]["status"] not in (OK, ERROR) and c not in skipped))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def with_aggregate(doc: dict) -> dict:
    """``doc`` with its ``aggregate`` (a session of ``--rexmle-repeat N`` > 1; unchanged otherwise): the
    numbers ``rexmle report`` gives when each repeat is a session of its own (:func:`.merge.split_repeats`),
    computed by the same code, so merging sessions and merging repeats cannot disagree."""
    if (doc.get("repeats") or 1) <= 1:
        return doc
    from .merge import merge_reports, split_repeats  # report.merge imports this module at its top

    merged = merge_reports(split_repeats(doc))
    doc["aggregate"] = [_aggregate_entry(entry) for entry in merged["agents"]]
    return doc


def _aggregate_entry(entry: dict) -> dict:
    """One agent of the merged repeats, as the session report keeps it: the tasks it ran, each with how
    its repeats ended counted by status (``{"ok": 2, "error": 1}``)."""
    rows = []
    for row in entry["tasks"]:
        if row["not_run"]:
            continue
        rows.append({k: row[k] for k in ("task_id", "n_runs", "percentiles", "statuses", "mean_percentile",
                                         "sem", "ci")} | {"counts": dict(Counter(row["statuses"]))})
    return {"agent": entry["agent"], "label": entry["label"], "n_repeats": entry["n_runs"],
            "scores": entry["scores"], "mean": entry["mean"], "sem": entry["sem"], "ci": entry["ci"],
            "tasks": rows}


def compute_summary(runs: dict[str, dict | None]) -> dict:
    """The session's ``compute``: each run's record, the totals, and the distinct hardware it ran on (a
    comparison across different hardware is flagged where reports are merged)."""
    records = {label: rec for label, rec in sorted(runs.items()) if isinstance(rec, dict)}

    def total(key: str) -> float | None:
        values = [rec.get(key) for rec in records.values()]
        known = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        return round(sum(known), 6) if known and len(known) == len(values) else None

    return {"runs": records,
            "total": {k: total(k) for k in ("wall_seconds", "gpu_hours", "tokens", "cost_usd")},
            "hardware": sorted({hardware_text(hardware(rec)) for rec in records.values()})}


class SessionReport(Document):
    """``rexmle-report.json`` as :func:`build_report` writes it and ``rexmle report`` reads it back."""

    schema_: Literal["rexmle-report/2"] = Field(alias="schema")
    run_id: StrictStr
    selected: list[StrictStr]
    partial: StrictBool
    score: Annotated[float, Strict()]
    n_fail: StrictInt
    tasks: list[TaskResult]

    @field_validator("tasks")
    @classmethod
    def _fails_score_zero(cls, records: list[TaskResult]) -> list[TaskResult]:
        for rec in records:
            if rec.status != OK and rec.percentile != 0.0:
                raise ValueError(f"{rec.task_id}: a FAIL must have percentile 0")
        return records
