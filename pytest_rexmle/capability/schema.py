"""Capability documents: normalisation of judge answers, per-run and per-agent aggregation, validation.

Per-run document (``<run>/capability.json``, schema ``rexmle-capability-run/2``: the strategies plus
the ``results`` view in the paper's judge-output shape)::

    {
      "schema": "rexmle-capability-run/2",
      "agent": str | null, "task_id": str, "seed": int | null, "run_dir": str,
      "judge": {"name": "rules" | "llm", "model": str, "params": {...}, "prompt_version": str, ...},
      "sections": [{"label": str, "flagged": bool, "results": [13 × {"id", "strategy", "score", "evidence"}]}],
      "strategies": [13 × {"id": int, "key": str, "strategy": str, "score": 0 | 1,
                           "evidence": str, "section": str | null}],
      "results": [13 × {"id": int, "strategy": str, "score": 0 | 1, "evidence": str}],
      "flags": [str],                 e.g. NO_TRACE_FLAG, "unparsable: <label>", "judge timed out after …"
      "judge_usage": {...}            optional: tokens the judge itself spent (llm judge)
    }

``strategies`` is the per-run binary score (1 iff some section scored 1; evidence and label of the first
such section); ``results`` is the same 13 rows without ``key``/``section``.

Per-agent document (the same per agent, schema ``rexmle-capability-agent/2``)::

    {
      "schema": "rexmle-capability-agent/2", "agent": str, "n_runs": int,
      "strategies": [13 × {"id", "key", "strategy", "mean_score": float, "sum_score": int, "n_runs": int,
                           "fragment_mean": float | null}],
      "runs": [{"task_id", "seed", "run_dir", "scores": [13 × 0|1], "flags": [str]}]   per-challenge table
    }

Session document (``rexmle-capability.json``, schema ``rexmle-capability/2``)::

    {
      "schema": "rexmle-capability/2", "created": ISO-8601 UTC, "judge": {...} | null,
      "agents": [per-agent documents],
      "stages": [stage documents of pytest_rexmle.capability.stages]      may be empty
    }

``mean_score`` is the primary number (fraction of the agent's runs showing the strategy, FAILs included);
``fragment_mean`` pools every judged section of every run (the reference's script), for comparison only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, model_validator

from ..documents import Document
from .strategies import N_STRATEGIES, load_strategies

RUN_SCHEMA = "rexmle-capability-run/2"
AGENT_SCHEMA = "rexmle-capability-agent/2"
SESSION_SCHEMA = "rexmle-capability/2"
UNPARSABLE = "Unparsable judge response"
MISSING = "Missing in model response"
NO_TEXT = "No observed trace"
#: the run flag when the gateway recorded no model call (the agent's own logs are never judged)
NO_TRACE_FLAG = "no observed trace (logs/model-calls.jsonl missing or empty)"


def score_value(value: Any) -> int:
    """1 iff the value means the integer 1 (``1``, ``1.0``, ``"1"``); anything else (bools too) is 0."""
    if isinstance(value, str):
        return int(value.strip() in ("1", "1.0"))
    return int(isinstance(value, (int, float)) and not isinstance(value, bool) and value == 1)


def normalise_results(raw: Any) -> list[dict]:
    """Normalised judge answers: first object per id, canonical names, strict scores, missing ids filled with 0."""
    first: dict[int, dict] = {}
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        raw_id: Any = item.get("id")   # whatever the judge wrote: int() refuses what is not a number
        try:
            ident = int(raw_id) if not isinstance(raw_id, bool) else None
        except (TypeError, ValueError):
            continue
        if ident is not None and 1 <= ident <= N_STRATEGIES and ident not in first:
            first[ident] = item
    out = []
    for s in load_strategies():
        item = first.get(s.id, {"evidence": MISSING})
        evidence = item.get("evidence", "")
        out.append({"id": s.id, "strategy": s.name, "score": score_value(item.get("score")),
                    "evidence": evidence if isinstance(evidence, str) else str(evidence)})
    return out


def zero_results(evidence: str) -> list[dict]:
    return [{"id": s.id, "strategy": s.name, "score": 0, "evidence": evidence} for s in load_strategies()]


def untraced(task_id: str, evidence: str = NO_TEXT) -> list[dict]:
    """The one section of a run without an observed trace (or whose judge timed out, ``evidence`` says
    so): flagged, every strategy 0."""
    return [{"label": f"{task_id}-section-1", "flagged": True, "results": zero_results(evidence)}]


def combine_sections(sections: list[dict]) -> list[dict]:
    """Per-run binary score: 1 if any section scored 1; evidence and label of the first such section."""
    rows = []
    for s in load_strategies():
        hit = next(((sec, r) for sec in sections for r in sec["results"] if r["id"] == s.id and r["score"] == 1), None)
        evidence, section = (hit[1]["evidence"], hit[0]["label"]) if hit else ("", None)
        rows.append({"id": s.id, "key": s.key, "strategy": s.name, "score": int(hit is not None),
                     "evidence": evidence, "section": section})
    return rows


def run_document(*, agent: str | None, task_id: str, seed: int | None, run_dir: str, judge: dict,
                 sections: list[dict], flags: list[str], judge_usage: dict | None = None) -> dict:
    strategies = combine_sections(sections)
    doc = {
        "schema": RUN_SCHEMA, "agent": agent, "task_id": task_id, "seed": seed, "run_dir": run_dir,
        "judge": judge, "sections": sections, "strategies": strategies,
        "results": [{k: row[k] for k in ("id", "strategy", "score", "evidence")} for row in strategies],
        "flags": flags,
    }
    if judge_usage is not None:
        doc["judge_usage"] = judge_usage
    return doc


def aggregate(docs: Iterable[dict], agent: str | None) -> dict:
    """Per-agent capability: mean over the agent's runs of the per-run 0/1 score.

    ``docs`` are per-run documents; those naming another agent are ignored (documents without an agent
    count for the one asked). Runs that ended in FAIL are included: the analysis is about the process.
    """
    runs = [d for d in docs if d.get("agent") in (agent, None)]
    runs.sort(key=lambda d: (d.get("task_id") or "", d.get("seed") if d.get("seed") is not None else -1,
                             d.get("run_dir") or ""))
    n = len(runs)
    rows = []
    for s in load_strategies():
        scores = [_run_score(d, s.id) for d in runs]
        fragments = [r["score"] for d in runs for sec in d.get("sections", []) for r in sec["results"] if r["id"] == s.id]
        rows.append({"id": s.id, "key": s.key, "strategy": s.name,
                     "mean_score": (sum(scores) / n) if n else 0.0, "sum_score": int(sum(scores)), "n_runs": n,
                     "fragment_mean": (sum(fragments) / len(fragments)) if fragments else None})
    table = [{"task_id": d.get("task_id"), "seed": d.get("seed"), "run_dir": d.get("run_dir"),
              "scores": [_run_score(d, s.id) for s in load_strategies()], "flags": list(d.get("flags", []))}
             for d in runs]
    return {"schema": AGENT_SCHEMA, "agent": agent, "n_runs": n, "strategies": rows, "runs": table}


def _run_score(doc: dict, ident: int) -> int:
    rows = (row for row in doc.get("strategies", []) if row.get("id") == ident)
    return next((int(row.get("score") == 1) for row in rows), 0)


def session_document(run_docs: Iterable[dict], stage_docs: Iterable[dict] = (), judge: dict | None = None) -> dict:
    """The session's ``rexmle-capability.json``: one per-agent aggregate per agent seen in ``run_docs``."""
    docs = list(run_docs)
    agents = sorted({d.get("agent") or "" for d in docs})
    if judge is None and docs:
        judge = docs[0].get("judge")
    return {"schema": SESSION_SCHEMA, "created": datetime.now(UTC).isoformat(), "judge": judge,
            "agents": [aggregate([d for d in docs if (d.get("agent") or "") == a], a or None) for a in agents],
            "stages": list(stage_docs)}


def _zero_or_one(value: Any) -> int:
    if type(value) is not int or value not in (0, 1):
        raise ValueError("must be the integer 0 or 1")
    return value


Score = Annotated[Any, AfterValidator(_zero_or_one)]


class Strict(Document):
    """A capability or stage document, or a part of one: strict types, unknown keys kept."""

    model_config = ConfigDict(strict=True)


class StrategyResult(Strict):
    """One judged strategy in the paper's judge-output shape."""

    id: int
    strategy: str
    score: Score
    evidence: str


class RunStrategy(StrategyResult):
    key: str
    section: str | None


def _one_row_per_strategy(rows: list) -> list:
    names = {s.id: s.name for s in load_strategies()}
    if [r.id for r in rows] != list(names):
        raise ValueError(f"must hold one row per strategy id 1..{N_STRATEGIES} in order")
    for row in rows:
        if row.strategy != names[row.id]:
            raise ValueError(f"strategy {row.id} must be named {names[row.id]!r}")
    return rows


Rows = Annotated[list[StrategyResult], AfterValidator(_one_row_per_strategy)]


class JudgeRecord(Strict):
    name: str
    model: str
    params: dict[str, Any]
    prompt_version: str


class JudgedSection(Strict):
    label: str
    flagged: bool
    results: Rows


class CapabilityRun(Strict):
    """A per-run ``capability.json`` (``rexmle-capability-run/2``)."""

    schema_: Literal["rexmle-capability-run/2"] = Field(alias="schema")
    agent: str | None
    task_id: str
    seed: int | None
    run_dir: str
    judge: JudgeRecord
    sections: list[JudgedSection]
    strategies: Annotated[list[RunStrategy], AfterValidator(_one_row_per_strategy)]
    results: Rows
    flags: list[str]

    @model_validator(mode="after")
    def _run_score_is_the_best_section(self) -> CapabilityRun:
        labels = {sec.label for sec in self.sections}
        for row, res in zip(self.strategies, self.results, strict=False):
            if row.score != res.score:
                raise ValueError(f"strategy {row.id} differs between 'strategies' and 'results'")
            if (row.section is None) != (row.score == 0) or (row.section is not None and row.section not in labels):
                raise ValueError(f"strategy {row.id} section must name a judged section iff score is 1")
            best = int(any(r.score == 1 for sec in self.sections for r in sec.results if r.id == row.id))
            if row.score != best:
                raise ValueError(f"strategy {row.id} run score must be the max over sections")
        return self


class AgentStrategy(Strict):
    id: int
    mean_score: float
    sum_score: int
    n_runs: int
    fragment_mean: float | None = Field(ge=0.0, le=1.0)


class AgentRun(Strict):
    scores: list[Score] = Field(min_length=N_STRATEGIES, max_length=N_STRATEGIES)


class AgentCapability(Strict):
    """A per-agent aggregate (``rexmle-capability-agent/2``)."""

    schema_: Literal["rexmle-capability-agent/2"] = Field(alias="schema")
    n_runs: int
    runs: list[AgentRun]
    strategies: list[AgentStrategy]

    @model_validator(mode="after")
    def _counts_agree(self) -> AgentCapability:
        n = self.n_runs
        if len(self.runs) != n:
            raise ValueError("'runs' must have n_runs rows")
        if [r.id for r in self.strategies] != list(range(1, N_STRATEGIES + 1)):
            raise ValueError(f"one row per strategy id 1..{N_STRATEGIES} in order")
        for row in self.strategies:
            if row.n_runs != n or not 0 <= row.sum_score <= n:
                raise ValueError(f"strategy {row.id} counts inconsistent with n_runs={n}")
            if not math.isclose(row.mean_score, row.sum_score / n if n else 0.0, abs_tol=1e-12):
                raise ValueError(f"strategy {row.id} mean_score != sum_score / n_runs")
            if sum(r.scores[row.id - 1] for r in self.runs) != row.sum_score:
                raise ValueError(f"strategy {row.id} sum_score disagrees with the run table")
        return self


def _stage_documents(docs: list) -> list:
    from .stages import StageScores  # stages.py builds on this module

    for doc in docs:
        StageScores.check(doc, "stages")
    return docs


class SessionCapability(Strict):
    """The session's ``rexmle-capability.json`` (``rexmle-capability/2``)."""

    schema_: Literal["rexmle-capability/2"] = Field(alias="schema")
    created: str
    agents: list[AgentCapability]
    stages: Annotated[list[dict[str, Any]], AfterValidator(_stage_documents)]
