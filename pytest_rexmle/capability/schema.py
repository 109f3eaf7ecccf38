"""Capability documents: normalisation of judge answers, per-run and per-agent aggregation, validation.

Per-run document (``<run>/capability.json``, schema ``rexmle-capability-run/1``; capability.md §5 plus
the ``results`` view in the paper's judge-output shape)::

    {
      "schema": "rexmle-capability-run/1",
      "agent": str | null, "challenge_id": str, "seed": int | null, "run_dir": str,
      "judge": {"name": "rules" | "llm", "model": str, "params": {...}, "prompt_version": str, ...},
      "sections": [{"label": str, "flagged": bool, "results": [13 × {"id", "strategy", "score", "evidence"}]}],
      "strategies": [13 × {"id": int, "key": str, "strategy": str, "score": 0 | 1,
                           "evidence": str, "section": str | null}],
      "results": [13 × {"id": int, "strategy": str, "score": 0 | 1, "evidence": str}],
      "flags": [str],                 e.g. NO_TRACE_FLAG, "unparsable: <label>"
      "judge_usage": {...}            optional: tokens the judge itself spent (llm judge)
    }

``strategies`` is the per-run binary score (1 iff some section scored 1; evidence and label of the first
such section); ``results`` is the same 13 rows without ``key``/``section``.

Per-agent document (capability.md §5 per agent, schema ``rexmle-capability-agent/1``)::

    {
      "schema": "rexmle-capability-agent/1", "agent": str, "n_runs": int,
      "strategies": [13 × {"id", "key", "strategy", "mean_score": float, "sum_score": int, "n_runs": int,
                           "fragment_mean": float | null}],
      "runs": [{"challenge_id", "seed", "run_dir", "scores": [13 × 0|1], "flags": [str]}]   per-challenge table
    }

Session document (``rexmle-capability.json``, schema ``rexmle-capability/1``)::

    {
      "schema": "rexmle-capability/1", "created": ISO-8601 UTC, "judge": {...} | null,
      "agents": [per-agent documents],
      "stages": [stage documents of pytest_rexmle.capability.stages]      may be empty
    }

``mean_score`` is the primary number (fraction of the agent's runs showing the strategy, FAILs included);
``fragment_mean`` pools every judged section of every run (the reference's script), for comparison only.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any, Iterable

from .strategies import N_STRATEGIES, load_strategies

RUN_SCHEMA = "rexmle-capability-run/1"
AGENT_SCHEMA = "rexmle-capability-agent/1"
SESSION_SCHEMA = "rexmle-capability/1"
UNPARSABLE = "Unparsable judge response"
MISSING = "Missing in model response"
NO_TEXT = "No observed trace"
#: the run flag when the gateway recorded no model call (the agent's own logs are never judged)
NO_TRACE_FLAG = "no observed trace (logs/model-calls.jsonl missing or empty)"


def score_value(value: Any) -> int:
    """1 iff the value means the integer 1 (``1``, ``1.0``, ``"1"``); anything else (bools too) is 0."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return int(value == 1)
    if isinstance(value, float):
        return int(value == 1.0)
    if isinstance(value, str):
        return int(value.strip() in ("1", "1.0"))
    return 0


def normalise_results(raw: Any) -> list[dict]:
    """capability.md §3: first object per id, canonical names, strict scores, missing ids filled with 0."""
    first: dict[int, dict] = {}
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        try:
            ident = int(item.get("id")) if not isinstance(item.get("id"), bool) else None
        except (TypeError, ValueError):
            continue
        if ident is not None and 1 <= ident <= N_STRATEGIES and ident not in first:
            first[ident] = item
    out = []
    for s in load_strategies():
        item = first.get(s.id)
        if item is None:
            out.append({"id": s.id, "strategy": s.name, "score": 0, "evidence": MISSING})
        else:
            evidence = item.get("evidence", "")
            out.append({"id": s.id, "strategy": s.name, "score": score_value(item.get("score")),
                        "evidence": evidence if isinstance(evidence, str) else str(evidence)})
    return out


def zero_results(evidence: str) -> list[dict]:
    return [{"id": s.id, "strategy": s.name, "score": 0, "evidence": evidence} for s in load_strategies()]


def combine_sections(sections: list[dict]) -> list[dict]:
    """Per-run binary score: 1 if any section scored 1; evidence and label of the first such section."""
    rows = []
    for s in load_strategies():
        hit = next(((sec, r) for sec in sections for r in sec["results"] if r["id"] == s.id and r["score"] == 1), None)
        if hit:
            rows.append({"id": s.id, "key": s.key, "strategy": s.name, "score": 1, "evidence": hit[1]["evidence"],
                         "section": hit[0]["label"]})
        else:
            rows.append({"id": s.id, "key": s.key, "strategy": s.name, "score": 0, "evidence": "", "section": None})
    return rows


def run_document(*, agent: str | None, challenge_id: str, seed: int | None, run_dir: str, judge: dict,
                 sections: list[dict], flags: list[str], judge_usage: dict | None = None) -> dict:
    strategies = combine_sections(sections)
    doc = {
        "schema": RUN_SCHEMA, "agent": agent, "challenge_id": challenge_id, "seed": seed, "run_dir": run_dir,
        "judge": judge, "sections": sections, "strategies": strategies,
        "results": [{k: row[k] for k in ("id", "strategy", "score", "evidence")} for row in strategies],
        "flags": flags,
    }
    if judge_usage is not None:
        doc["judge_usage"] = judge_usage
    return doc


def aggregate(docs: Iterable[dict], agent: str) -> dict:
    """Per-agent capability: mean over the agent's runs of the per-run 0/1 score (capability.md §4).

    ``docs`` are per-run documents; those naming another agent are ignored (documents without an agent
    count for the one asked). Runs that ended in FAIL are included: the analysis is about the process.
    """
    runs = [d for d in docs if d.get("agent") in (agent, None)]
    runs.sort(key=lambda d: (d.get("challenge_id") or "", d.get("seed") if d.get("seed") is not None else -1,
                             d.get("run_dir") or ""))
    n = len(runs)
    rows = []
    for s in load_strategies():
        scores = [_run_score(d, s.id) for d in runs]
        fragments = [r["score"] for d in runs for sec in d.get("sections", []) for r in sec["results"] if r["id"] == s.id]
        rows.append({"id": s.id, "key": s.key, "strategy": s.name,
                     "mean_score": (sum(scores) / n) if n else 0.0, "sum_score": int(sum(scores)), "n_runs": n,
                     "fragment_mean": (sum(fragments) / len(fragments)) if fragments else None})
    table = [{"challenge_id": d.get("challenge_id"), "seed": d.get("seed"), "run_dir": d.get("run_dir"),
              "scores": [_run_score(d, s.id) for s in load_strategies()], "flags": list(d.get("flags", []))}
             for d in runs]
    return {"schema": AGENT_SCHEMA, "agent": agent, "n_runs": n, "strategies": rows, "runs": table}


def _run_score(doc: dict, ident: int) -> int:
    for row in doc.get("strategies", []):
        if row.get("id") == ident:
            return 1 if row.get("score") == 1 else 0
    return 0


def session_document(run_docs: Iterable[dict], stage_docs: Iterable[dict] = (), judge: dict | None = None) -> dict:
    """The session's ``rexmle-capability.json``: one per-agent aggregate per agent seen in ``run_docs``."""
    docs = list(run_docs)
    agents = sorted({d.get("agent") or "" for d in docs})
    if judge is None and docs:
        judge = docs[0].get("judge")
    return {"schema": SESSION_SCHEMA, "created": datetime.now(timezone.utc).isoformat(), "judge": judge,
            "agents": [aggregate([d for d in docs if (d.get("agent") or "") == a], a or None) for a in agents],
            "stages": list(stage_docs)}


# -- validation --------------------------------------------------------------------------------------

def _need(doc: dict, key: str, kind, where: str) -> Any:
    if not isinstance(doc, dict) or key not in doc:
        raise ValueError(f"{where}: missing {key!r}")
    value = doc[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, (int, float))):
        raise ValueError(f"{where}: {key!r} must be {kind}, got {value!r}")
    return value


def _check_rows(rows: Any, where: str, extra: tuple[str, ...] = ()) -> None:
    names = {s.id: s.name for s in load_strategies()}
    if not isinstance(rows, list) or [r.get("id") if isinstance(r, dict) else None for r in rows] != list(names):
        raise ValueError(f"{where}: must hold one row per strategy id 1..{N_STRATEGIES} in order")
    for row in rows:
        if row.get("strategy") != names[row["id"]]:
            raise ValueError(f"{where}: strategy {row['id']} must be named {names[row['id']]!r}")
        if row.get("score") not in (0, 1) or isinstance(row.get("score"), bool) or isinstance(row.get("score"), float):
            raise ValueError(f"{where}: strategy {row['id']} score must be the integer 0 or 1")
        if not isinstance(row.get("evidence"), str):
            raise ValueError(f"{where}: strategy {row['id']} evidence must be a string")
        for key in extra:
            if key not in row:
                raise ValueError(f"{where}: strategy {row['id']} lacks {key!r}")


def validate_capability(doc: dict) -> None:
    """Check a per-run ``capability.json``; raises ValueError naming the first problem."""
    if _need(doc, "schema", str, "capability") != RUN_SCHEMA:
        raise ValueError(f"capability: unknown schema {doc['schema']!r}")
    _need(doc, "challenge_id", str, "capability")
    _need(doc, "run_dir", str, "capability")
    for key in ("agent", "seed"):
        if key not in doc:
            raise ValueError(f"capability: missing {key!r}")
    judge = _need(doc, "judge", dict, "capability")
    for key, kind in (("name", str), ("model", str), ("params", dict), ("prompt_version", str)):
        _need(judge, key, kind, "capability.judge")
    for i, sec in enumerate(_need(doc, "sections", list, "capability")):
        _need(sec, "label", str, f"capability.sections[{i}]")
        _need(sec, "flagged", bool, f"capability.sections[{i}]")
        _check_rows(sec.get("results"), f"capability.sections[{i}].results")
    _check_rows(doc.get("strategies"), "capability.strategies", ("key", "section"))
    _check_rows(doc.get("results"), "capability.results")
    labels = {sec["label"] for sec in doc["sections"]}
    for row, res in zip(doc["strategies"], doc["results"]):
        if row["score"] != res["score"]:
            raise ValueError(f"capability: strategy {row['id']} differs between 'strategies' and 'results'")
        if (row["section"] is None) != (row["score"] == 0) or (row["section"] is not None and row["section"] not in labels):
            raise ValueError(f"capability: strategy {row['id']} section must name a judged section iff score is 1")
        expected = int(any(r["score"] == 1 for sec in doc["sections"] for r in sec["results"] if r["id"] == row["id"]))
        if row["score"] != expected:
            raise ValueError(f"capability: strategy {row['id']} run score must be the max over sections")
    if not all(isinstance(f, str) for f in _need(doc, "flags", list, "capability")):
        raise ValueError("capability: flags must be strings")


def validate_agent_capability(doc: dict) -> None:
    """Check a per-agent aggregate document."""
    if _need(doc, "schema", str, "agent capability") != AGENT_SCHEMA:
        raise ValueError(f"agent capability: unknown schema {doc['schema']!r}")
    n = _need(doc, "n_runs", int, "agent capability")
    runs = _need(doc, "runs", list, "agent capability")
    if len(runs) != n:
        raise ValueError("agent capability: 'runs' must have n_runs rows")
    rows = _need(doc, "strategies", list, "agent capability")
    if [r.get("id") for r in rows] != list(range(1, N_STRATEGIES + 1)):
        raise ValueError("agent capability: one row per strategy id 1..13 in order")
    for row in rows:
        mean = _need(row, "mean_score", (int, float), f"strategy {row['id']}")
        total = _need(row, "sum_score", int, f"strategy {row['id']}")
        if _need(row, "n_runs", int, f"strategy {row['id']}") != n or not 0 <= total <= n:
            raise ValueError(f"agent capability: strategy {row['id']} counts inconsistent with n_runs={n}")
        if not math.isclose(mean, total / n if n else 0.0, abs_tol=1e-12):
            raise ValueError(f"agent capability: strategy {row['id']} mean_score != sum_score / n_runs")
        frag = row.get("fragment_mean", "absent")
        if frag is not None and not (isinstance(frag, (int, float)) and 0.0 <= frag <= 1.0):
            raise ValueError(f"agent capability: strategy {row['id']} fragment_mean must be in [0, 1] or null")
        if sum(r["scores"][row["id"] - 1] for r in runs) != total:
            raise ValueError(f"agent capability: strategy {row['id']} sum_score disagrees with the run table")
    for r in runs:
        if len(r.get("scores", [])) != N_STRATEGIES or any(v not in (0, 1) for v in r["scores"]):
            raise ValueError("agent capability: each run row needs 13 scores of 0/1")


def validate_session_capability(doc: dict) -> None:
    """Check a session ``rexmle-capability.json``."""
    if _need(doc, "schema", str, "session capability") != SESSION_SCHEMA:
        raise ValueError(f"session capability: unknown schema {doc['schema']!r}")
    _need(doc, "created", str, "session capability")
    for agent_doc in _need(doc, "agents", list, "session capability"):
        validate_agent_capability(agent_doc)
    from .stages import validate_stages

    for stage_doc in _need(doc, "stages", list, "session capability"):
        validate_stages(stage_doc)
