"""Workflow stage scores S1–S5 of one run, and the run's cost (turns, tokens, money, wall time).

The percentile says *how good* the submission was; the stages say *how far* the agent got, so a FAIL
that planned and trained well is told apart from one that never started. They are reported next to the
percentile and never mixed into it (the score is the mean percentile alone, docs/reading-the-report.md).

==========  ======  ====================================================================================
stage       weight  how it is measured
==========  ======  ====================================================================================
S1 plan     25 %    judged: reads the task, explores the data, states an approach
S2 setup    15 %    judged: environment and libraries, data loading, training started
S3 validate 35 %    judged: held-out data or CV, a validation metric, selection by it
S4 infer    15 %    deterministic: fraction of public test cases with a prediction that passes the
                    grader's per-case public check (1.0 when the whole submission validates)
S5 submit   10 %    deterministic: 1 if ``grader.validate(submission, public)`` accepts the submission
==========  ======  ====================================================================================

Judged stages use the capability judge on the run's observed trace (:mod:`pytest_rexmle.capability.trace`):
the ``rules`` judge scores the fraction of the three checks it finds evidence for (quoted with file and
line); the ``llm`` judge applies a 0 / 0.5 / 1 rubric per trace section and keeps the best section. Without
an observed trace S1–S3 are 0, and so they are when the judge runs out of its time (``judge timed out …``
in their evidence). S4/S5 measure the submission itself, which the harness reads, so a forged log changes
neither. ``total`` is the weighted sum.

Usage file (optional). An agent may write ``$REXMLE_WORKSPACE/rexmle-usage.json``, or a host-side
adapter ``<run>/logs/usage.json`` (preferred when both exist); all fields optional, unknown ones ignored::

    {"turns": int, "input_tokens": int, "output_tokens": int, "total_tokens": int,
     "cost_usd": float, "model": str}

``total_tokens`` defaults to input + output. Wall time is the harness's own measure (``run.json``
``duration``), never the agent's claim. When the run went through the gateway, ``run.json``'s metered
``usage`` (``source: "gateway"``) is the cost block instead (turns = model requests, plus
``cached_tokens`` and ``model_seconds``) and the agent's file is kept only as ``reported_by_agent``.

Document (``<run>/stages.json``, schema ``rexmle-stages/2``)::

    {"schema": "rexmle-stages/2", "agent": str | null, "task_id": str, "run_dir": str,
     "judge": {...judge record...},
     "stages": [{"id": "S1", "name": "plan", "weight": 0.25, "score": float in [0, 1],
                 "method": "rules" | "llm" | "deterministic", "evidence": str}, ... S1..S5],
     "total": float in [0, 1],
     "usage": {"turns", "input_tokens", "output_tokens", "total_tokens", "cost_usd", "model",
               "wall_seconds", "source": str | null,          every value may be null
               "warnings": [str]}    only when a usage file was refused (a FIFO, a link, too big, bad JSON)}
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from ..agent_output import RefusedFile, clean_text, read_json
from ..errors import InvalidSubmission, TaskConfigError
from ..graders.base import load_grader
from ..jsonfile import write_json_atomic
from ..submission import read_case_table
from .base import JUDGED_STAGES, description_lines, resolve_task, run_meta, task_id_of
from .clock import JudgeTimedOut
from .schema import NO_TEXT, Strict
from .trace import collect_sources, has_trace

SCHEMA = "rexmle-stages/2"
STAGES_JSON = "stages.json"
WEIGHTS = {"S1": 0.25, "S2": 0.15, "S3": 0.35, "S4": 0.15, "S5": 0.10}
NAMES = {"S1": "plan", "S2": "setup", "S3": "validate", "S4": "inference", "S5": "submit"}
USAGE_FILES = ("logs/usage.json", "workspace/rexmle-usage.json")
USAGE_INT = ("turns", "input_tokens", "output_tokens", "total_tokens")
#: a usage file is a few hundred bytes; anything past this is not read
MAX_USAGE_BYTES = 64 * 1024


def stage_scores(run_dir: Path, task: Any, public_dir: Path | None, judge) -> dict:
    """Score S1–S5 of one run, write ``<run_dir>/stages.json`` and return the document."""
    run_dir = Path(run_dir)
    task_obj = resolve_task(task)
    task_id = task_id_of(task)
    clock = judge.clock()
    try:
        sources = collect_sources(run_dir, clock=clock)
        if has_trace(sources):
            judged = judge.judge_stages(sources, task_id, description_lines(run_dir, task_obj), clock)
        else:  # claims in the agent's own logs earn no stage credit
            judged = {sid: {"score": 0.0, "evidence": NO_TEXT} for sid in JUDGED_STAGES}
    except JudgeTimedOut as exc:  # S4/S5 are measured all the same; the judged stages say why they are 0
        judged = {sid: {"score": 0.0, "evidence": str(exc)} for sid in JUDGED_STAGES}
    measured = dict(zip(("S4", "S5"), submission_stages(run_dir, task_obj, public_dir), strict=True))
    method = judge.describe()["name"]
    rows: list[dict[str, Any]] = []
    for sid in WEIGHTS:
        item = judged.get(sid, {"score": 0.0, "evidence": ""})
        score, evidence = measured.get(sid) or (float(item["score"]), str(item["evidence"]))
        rows.append({"id": sid, "name": NAMES[sid], "weight": WEIGHTS[sid], "score": min(1.0, max(0.0, score)),
                     "method": "deterministic" if sid in measured else method, "evidence": evidence})
    meta = run_meta(run_dir)
    doc = {"schema": SCHEMA, "agent": meta.get("agent"), "task_id": task_id, "run_dir": str(run_dir),
           "judge": judge.describe(), "stages": rows, "total": sum(r["weight"] * r["score"] for r in rows),
           "usage": read_usage(run_dir, meta)}
    write_json_atomic(run_dir / STAGES_JSON, doc)
    return doc


def submission_stages(run_dir: Path, task, public_dir: Path | None) -> tuple[tuple[float, str], tuple[float, str]]:
    """((S4 score, evidence), (S5 score, evidence)) from the submission folder and the public data."""
    submission = run_dir / "submission"
    if not (submission / "submission.csv").is_file():
        return (0.0, "no submission.csv"), (0.0, "no submission.csv")
    if task is None or public_dir is None or not Path(public_dir).is_dir():
        return _from_result(run_dir)

    try:
        grader = load_grader(task)
        test_ids = grader.public_test_ids(Path(public_dir))
    except (TaskConfigError, InvalidSubmission, OSError) as exc:
        return (0.0, f"cannot check: {exc}"), (0.0, f"cannot check: {exc}")
    try:
        grader.validate(submission, Path(public_dir))
        return (1.0, f"all {len(test_ids)} test case(s) predicted"), (1.0, "submission validates")
    except InvalidSubmission as exc:
        reason = str(exc)
    except Exception as exc:  # a grader bug is the harness's fault: say so, score nothing
        return (0.0, f"validator error: {type(exc).__name__}"), (0.0, f"validator error: {type(exc).__name__}")
    return _coverage(grader, submission, Path(public_dir), test_ids), (0.0, f"invalid: {reason}")


def _coverage(grader, submission: Path, public_dir: Path, test_ids: list[str]) -> tuple[float, str]:
    """Fraction of test cases whose row passes the grader's public per-case check."""
    if not test_ids:
        return 0.0, "no public test ids"
    try:
        table = read_case_table(submission / "submission.csv", grader.id_column, grader.prediction_columns, None)
    except InvalidSubmission as exc:
        return 0.0, f"submission.csv unreadable: {exc}"
    good = 0
    for case_id in test_ids:
        if case_id not in table.rows:
            continue
        try:
            grader.check_case(table, case_id, public_dir)
            good += 1
        except Exception:  # an invalid row, or a grader bug on it: the case is not counted
            continue
    return good / len(test_ids), f"{good} of {len(test_ids)} test case(s) predicted in a valid format"


def _from_result(run_dir: Path) -> tuple[tuple[float, str], tuple[float, str]]:
    """Without public data, fall back on the graded status in result.json."""
    try:
        status = json.loads((run_dir / "result.json").read_text(encoding="utf-8")).get("status")
    except (OSError, ValueError, AttributeError):
        status = None
    both = ((1.0, "graded ok (result.json)") if status == "ok"
            else (0.0, f"public data unavailable; status {status}"))
    return both, both


def read_usage(run_dir: Path, meta: dict | None = None) -> dict:
    """Turns, tokens and cost from the optional usage file; wall time from run.json."""
    meta = run_meta(run_dir) if meta is None else meta
    usage: dict[str, Any] = {k: None for k in (*USAGE_INT, "cost_usd", "model")}
    source = None
    warnings = []
    for rel in USAGE_FILES:
        path = run_dir / rel
        if not os.path.lexists(path):
            continue
        try:  # agent-written: a FIFO, a link to /dev/zero or a huge file is a warning, never a hang
            data = read_json(path, MAX_USAGE_BYTES, rel, max_depth=8)
        except RefusedFile as exc:
            warnings.append(clean_text(str(exc), limit=300))
            continue
        if not isinstance(data, dict):
            warnings.append(f"{rel} is not a JSON object")
            continue
        source = rel
        usage.update({key: _count(data.get(key)) for key in USAGE_INT})
        usage["cost_usd"] = _amount(data.get("cost_usd"))
        if isinstance(data.get("model"), str):
            usage["model"] = clean_text(data["model"], limit=200)
        break
    if usage["total_tokens"] is None and usage["input_tokens"] is not None and usage["output_tokens"] is not None:
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
    duration = meta.get("duration")
    usage["wall_seconds"] = float(duration) if isinstance(duration, (int, float)) and not isinstance(duration, bool) else None
    usage["source"] = source
    if warnings:
        usage["warnings"] = warnings
    metered = meta.get("usage")
    if isinstance(metered, dict) and metered.get("source") == "gateway":
        return _gateway_usage(metered, usage)
    return usage


def _gateway_usage(metered: dict, reported: dict) -> dict:
    """The gateway's metered usage (what the provider billed), with the agent's own file kept aside as
    ``reported_by_agent``: an agent claiming 0 tokens no longer shows 0 in the report."""
    by_model: dict = metered["by_model"] if isinstance(metered.get("by_model"), dict) else {}
    models = sorted(by_model, key=lambda m: -(by_model[m].get("requests") or 0) if isinstance(by_model[m], dict) else 0)
    usage: dict[str, Any] = {
        "turns": _count(metered.get("requests")), "input_tokens": _count(metered.get("input_tokens")),
        "output_tokens": _count(metered.get("output_tokens")),
        "total_tokens": None, "cost_usd": _amount(metered.get("cost_usd")),
        "model": clean_text(", ".join(models), limit=200) if models else None,
        "wall_seconds": reported.get("wall_seconds"), "source": "gateway",
        "cached_tokens": _count(metered.get("cached_tokens")), "model_seconds": metered.get("model_seconds"),
    }
    if usage["input_tokens"] is not None and usage["output_tokens"] is not None:
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
    if usage["cost_usd"] is None and metered.get("cost_unknown_reason"):
        usage["cost_unknown_reason"] = clean_text(str(metered["cost_unknown_reason"]), limit=500)
    if reported.get("source") is not None or reported.get("warnings"):
        usage["reported_by_agent"] = {k: v for k, v in reported.items() if k != "wall_seconds"}
    return usage


def _count(value: Any) -> int | None:
    """A count as reported: a non-negative integer, else None (not reported)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _amount(value: Any) -> float | None:
    """An amount as reported: a finite non-negative number, else None (not reported)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    return float(value) if ok else None


Count = Annotated[int, Field(ge=0)] | None
Amount = Annotated[float, Field(ge=0)] | None


class StageUsage(Strict):
    """The cost block: what the run spent. :func:`read_usage` writes every key; null means not reported
    (or not metered), never zero."""

    turns: Count
    input_tokens: Count
    output_tokens: Count
    total_tokens: Count
    cost_usd: Amount
    model: str | None
    wall_seconds: Amount
    source: str | None


class Stage(Strict):
    id: Literal["S1", "S2", "S3", "S4", "S5"]
    name: str
    weight: float
    score: float = Field(ge=0.0, le=1.0)
    method: Literal["rules", "llm", "deterministic"]
    evidence: str

    @model_validator(mode="after")
    def _named_and_weighted(self) -> Stage:
        if self.weight != WEIGHTS[self.id] or self.name != NAMES[self.id]:
            raise ValueError(f"{self.id} has the wrong name or weight")
        return self


class StageScores(Strict):
    """A run's ``stages.json`` (``rexmle-stages/2``)."""

    schema_: Literal["rexmle-stages/2"] = Field(alias="schema")
    task_id: str
    run_dir: str
    stages: list[Stage]
    total: float
    usage: StageUsage

    @model_validator(mode="after")
    def _weighted_total(self) -> StageScores:
        if [r.id for r in self.stages] != list(WEIGHTS):
            raise ValueError("'stages' must list S1..S5 in order")
        if not math.isclose(self.total, sum(r.weight * r.score for r in self.stages), abs_tol=1e-9):
            raise ValueError("total must be the weighted sum of the stage scores")
        return self
