"""The session report document (``rexmle-report.json``), schema ``rexmle-report/1``.

Top level::

    {
      "schema": "rexmle-report/1",
      "created": ISO-8601 UTC time,
      "run_id": str,                      unique per session
      "agent": str, "agent_options": {..}, "settings": {data, runtime, time_limit, min_percentile, resume, seed},
      "selected": [project ids],          every challenge the session selected (ran, failed or skipped)
      "partial": bool,                    false only when all 20 challenges were selected
      "score": float,                     mean percentile over "selected", FAILs, ERRORs (and not-run) as 0
      "n_fail": int,                      agent FAILs: invalid, missing (also not run), timeout
      "n_error": int,                     harness ERRORs (status "error"): our fault, not the agent's
      "skipped": [project ids],           selected but skipped by pytest (data not prepared): 0 in the score,
                                          counted apart from FAILs, as pytest's summary counts them
      "data_kind": "synthetic" | "real",  what was graded (settings.data "synthetic" or "prepared")
      "challenges": [result records + agent, run_dir, timings, medal, above_median],
      "note": str,                        what the numbers mean (agents on our split, humans on theirs)
      "submissions": {task id (or task@agent): {"files": {path: sha256}, "answers_id": str | null}}
                                          each graded run's submission, what `rexmle report --verify` checks
    }

Numbers are unrounded; +inf/-inf are the strings "inf"/"-inf".
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import Field, Strict, StrictBool, StrictInt, StrictStr, field_validator

from ..documents import Document
from ..ranking import overall_score
from ..result import ERROR, MISSING, OK, ChallengeResult
from ..task import registry

SCHEMA = "rexmle-report/1"
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


def not_run(task_id: str, reason: str) -> ChallengeResult:
    """A selected challenge that produced no result counts as FAIL (docs/reading-the-report.md)."""
    return _failed(task_id, MISSING, f"not run: {reason}")


def harness_error(task_id: str, message: str, traceback: str | None) -> ChallengeResult:
    """A selected challenge the harness broke on before grading (runtime unavailable, image missing, a
    failing fixture): status ``error`` with the real message and traceback, never an agent FAIL."""
    return _failed(task_id, ERROR, f"harness error: {message}", traceback)


def _failed(task_id: str, status: str, reason: str, traceback: str | None = None) -> ChallengeResult:
    from ..leaderboard import Leaderboard

    task = registry().get(task_id)
    n_humans = Leaderboard.read(task.leaderboard_path).n
    return ChallengeResult.failed(task, status, reason, n_humans, traceback=traceback)


def build_report(results: Iterable[ChallengeResult], *, agent: str | None, agent_options: dict, settings: dict,
                 run_id: str, skipped: Iterable[str] = ()) -> dict:
    """``skipped``: selected challenges pytest skipped (their records are ``missing`` with the skip reason);
    they still count 0 in the score but are not agent FAILs."""
    records = sorted(results, key=lambda r: r.challenge_id)
    selected = [r.challenge_id for r in records]
    skipped = sorted(set(skipped) & set(selected))
    kind = SYNTHETIC if settings.get("data") == SYNTHETIC else REAL
    return {
        "schema": SCHEMA,
        "created": datetime.now(UTC).isoformat(),
        "run_id": run_id,
        "agent": agent,
        "agent_options": agent_options,
        "settings": settings,
        "selected": selected,
        "partial": set(selected) != set(registry().ids),
        "score": overall_score(r.percentile if r.status == OK else 0.0 for r in records),
        "n_fail": sum(1 for r in records if r.status not in (OK, ERROR) and r.challenge_id not in skipped),
        "n_error": sum(1 for r in records if r.status == ERROR),
        "skipped": skipped,
        "data_kind": kind,
        "challenges": [r.to_json() for r in records],
        "note": note_for([kind]),
    }


def compute_summary(runs: dict[str, dict | None]) -> dict:
    """The session's ``compute``: each run's record, the totals, and the distinct hardware it ran on (a
    comparison across different hardware is flagged where reports are merged)."""
    from ..compute import hardware, hardware_text

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

    schema_: Literal["rexmle-report/1"] = Field(alias="schema")
    run_id: StrictStr
    selected: list[StrictStr]
    partial: StrictBool
    score: Annotated[float, Strict()]
    n_fail: StrictInt
    challenges: list[ChallengeResult]

    @field_validator("challenges")
    @classmethod
    def _fails_score_zero(cls, records: list[ChallengeResult]) -> list[ChallengeResult]:
        for rec in records:
            if rec.status != OK and rec.percentile != 0.0:
                raise ValueError(f"{rec.challenge_id}: a FAIL must have percentile 0")
        return records
