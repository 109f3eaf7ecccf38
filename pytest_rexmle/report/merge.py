"""Merging several sessions' ``rexmle-report.json``: agents side by side, repeated runs summarised.

``rexmle report DIR... --out OUT`` (DIR is a session folder holding ``rexmle-report.json`` — and, when
present, ``rexmle-capability.json`` —, the report file itself, or a report folder such as
``.rexmle/report``, which stands for its ``latest`` session) writes ``OUT/rexmle-merged.json``,
``OUT/rexmle-merged.md`` and the self-contained ``OUT/rexmle-report.html``.

Rules (ranking.md §5). Every session is one run of one agent. An agent is its name plus its public
options; two option sets of one name are labelled ``name [hash]``. The comparison set C is the union of
the challenges selected by any merged session, and a run that did not select a challenge of C counts it
as FAIL (percentile 0), so every agent's score is over the same C. Per agent: the score of each run,
their mean, the standard error of the mean (sample standard deviation / sqrt(n), null for one run) and a
percentile bootstrap confidence interval (resampling runs with replacement, fixed seed, so the same
inputs always give the same interval); per challenge the mean percentile over runs with its interval.
Agents are ordered by mean score; equal means share a rank.

Merged document (schema ``rexmle-merged-report/1``)::

    {
      "schema": "rexmle-merged-report/1", "created": ISO-8601 UTC,
      "challenges": [project ids of C, sorted], "partial": bool (C is not all 20),
      "bootstrap": {"resamples": int, "seed": int, "confidence": float},
      "sources": [{"run_id", "agent", "label", "created", "score", "partial", "n_fail", "n_selected"}],
      "agents": [{
          "label": str, "agent": str | null, "agent_options": {..}, "n_runs": int, "run_ids": [str],
          "scores": [float per run, over C], "mean": float, "sem": float | null, "ci": [lo, hi], "rank": int,
          "n_fail": [int per run, over C],
          "challenges": [{"challenge_id", "n_runs", "percentiles": [per run], "mean_percentile", "sem", "ci",
                          "n_fail", "statuses": [per run], "mean_position": float | null (over OK runs),
                          "ranking_metrics": [str], "n_humans": int | null,
                          "metrics": {key: {"mean": float | null, "n": int}}}]}],   means over OK runs
      "note": str
    }

Numbers are unrounded; non-finite metric means are the strings "inf", "-inf" or "nan".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import zlib
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

from ..result import _decode_number, _encode
from .model import NOTE, SCHEMA as REPORT_SCHEMA, validate_report

SCHEMA = "rexmle-merged-report/1"
REPORT_JSON = "rexmle-report.json"
CAPABILITY_JSON = "rexmle-capability.json"
MERGED_JSON = "rexmle-merged.json"
MERGED_MD = "rexmle-merged.md"
HTML_NAME = "rexmle-report.html"
RESAMPLES = 2000
SEED = 0
CONFIDENCE = 0.95


def agent_identity(doc: dict) -> tuple[str, str]:
    """(agent name, canonical options JSON): what makes two sessions runs of the same agent."""
    return str(doc.get("agent") or "unknown"), json.dumps(doc.get("agent_options") or {}, sort_keys=True)


def labels_for(docs: Iterable[dict]) -> dict[tuple[str, str], str]:
    identities = sorted({agent_identity(d) for d in docs})
    names = [name for name, _ in identities]
    out = {}
    for name, options in identities:
        if names.count(name) > 1:
            out[(name, options)] = f"{name} [{hashlib.sha256(options.encode()).hexdigest()[:8]}]"
        else:
            out[(name, options)] = name
    return out


def sem(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    import numpy as np  # only for statistics over several sessions: a session's own HTML report needs none

    return float(np.std(values, ddof=1) / math.sqrt(len(values)))


def bootstrap_ci(values: list[float], *, resamples: int = RESAMPLES, confidence: float = CONFIDENCE,
                 seed: Iterable[int] = (SEED,)) -> list[float]:
    """Percentile bootstrap interval of the mean (resampling values with replacement); fixed seed."""
    if not values:
        return [0.0, 0.0]
    if all(float(v) == float(values[0]) for v in values):  # one session, or all equal: no interval
        return [float(values[0]), float(values[0])]
    import numpy as np

    data = np.asarray(values, dtype=float)
    rng = np.random.default_rng(list(seed))
    means = data[rng.integers(0, len(data), size=(resamples, len(data)))].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    return [float(np.quantile(means, alpha)), float(np.quantile(means, 1.0 - alpha))]


def _key(text: str) -> int:
    return zlib.crc32(text.encode())


def _records(doc: dict) -> dict[str, dict]:
    return {rec["challenge_id"]: rec for rec in doc.get("challenges", [])}


def _metric_mean(values: list[float]) -> float | None:
    if not values:
        return None
    if any(math.isnan(v) for v in values):
        return float("nan")
    return float(sum(values) / len(values))


def merge_reports(docs: list[dict], *, resamples: int = RESAMPLES, seed: int = SEED,
                  confidence: float = CONFIDENCE) -> dict:
    """Merge session reports (each validated first); see the module docstring for the rules."""
    if not docs:
        raise ValueError("nothing to merge: no report documents")
    for doc in docs:
        validate_report(doc)
    from ..task import registry

    challenges = sorted({cid for d in docs for cid in d["selected"]})
    try:
        all_ids = set(registry().ids)
    except Exception:
        all_ids = set()
    labels = labels_for(docs)
    groups: dict[str, list[dict]] = {}
    for doc in sorted(docs, key=lambda d: (d.get("created") or "", d["run_id"])):
        groups.setdefault(labels[agent_identity(doc)], []).append(doc)
    agents = [_agent_entry(label, runs, challenges, resamples, seed, confidence) for label, runs in groups.items()]
    agents.sort(key=lambda a: (-a["mean"], a["label"]))
    for entry in agents:
        entry["rank"] = 1 + sum(1 for other in agents if other["mean"] > entry["mean"])
    sources = [{"run_id": d["run_id"], "agent": d.get("agent"), "label": labels[agent_identity(d)],
                "created": d.get("created"), "score": d["score"], "partial": d["partial"], "n_fail": d["n_fail"],
                "n_selected": len(d["selected"])} for d in docs]
    merged = {"schema": SCHEMA, "created": datetime.now(timezone.utc).isoformat(), "challenges": challenges,
              "partial": set(challenges) != all_ids, "bootstrap": {"resamples": resamples, "seed": seed,
                                                                      "confidence": confidence},
              "sources": sources, "agents": agents, "note": NOTE}
    return _encode(merged)


def _agent_entry(label: str, runs: list[dict], challenges: list[str], resamples: int, seed: int,
                 confidence: float) -> dict:
    per_run = [_records(doc) for doc in runs]
    scores, fails = [], []
    for records in per_run:
        pcts = [records[c]["percentile"] if c in records and records[c]["status"] == "ok" else 0.0 for c in challenges]
        scores.append(sum(pcts) / len(challenges) if challenges else 0.0)
        fails.append(sum(1 for c in challenges if c not in records or records[c]["status"] != "ok"))
    rows = []
    for cid in challenges:
        recs = [records.get(cid) for records in per_run]
        pcts = [r["percentile"] if r is not None and r["status"] == "ok" else 0.0 for r in recs]
        ok = [r for r in recs if r is not None and r["status"] == "ok"]
        metric_keys = sorted({k for r in ok for k in (r.get("metrics") or {})})
        metrics = {}
        for key in metric_keys:
            values = [float(_decode_number(r["metrics"][key])) for r in ok if key in (r.get("metrics") or {})]
            metrics[key] = {"mean": _metric_mean(values), "n": len(values)}
        positions = [float(r["mean_position"]) for r in ok if r.get("mean_position") is not None]
        rows.append({
            "challenge_id": cid, "n_runs": len(recs), "percentiles": pcts,
            "mean_percentile": sum(pcts) / len(pcts), "sem": sem(pcts),
            "ci": bootstrap_ci(pcts, resamples=resamples, confidence=confidence, seed=(seed, _key(label), _key(cid))),
            "n_fail": len(recs) - len(ok), "statuses": [r["status"] if r is not None else "not run" for r in recs],
            "mean_position": sum(positions) / len(positions) if positions else None,
            "ranking_metrics": next((r["ranking_metrics"] for r in recs if r is not None), []),
            "n_humans": next((r["n_humans"] for r in recs if r is not None), None),
            "metrics": metrics,
        })
    first = runs[0]
    return {"label": label, "agent": first.get("agent"), "agent_options": first.get("agent_options") or {},
            "n_runs": len(runs), "run_ids": [d["run_id"] for d in runs], "scores": scores,
            "mean": sum(scores) / len(scores), "sem": sem(scores),
            "ci": bootstrap_ci(scores, resamples=resamples, confidence=confidence, seed=(seed, _key(label))),
            "rank": 0, "n_fail": fails, "challenges": rows}


def validate_merged(doc: dict) -> None:
    """Structural check of a merged document; raises ValueError naming the first problem."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ValueError("merged report: unknown schema")
    for key, kind in (("challenges", list), ("partial", bool), ("bootstrap", dict), ("sources", list),
                      ("agents", list), ("note", str), ("created", str)):
        if not isinstance(doc.get(key), kind):
            raise ValueError(f"merged report: {key!r} missing or not {kind.__name__}")
    ids = doc["challenges"]
    ranks = []
    for agent in doc["agents"]:
        n = agent.get("n_runs")
        if not isinstance(n, int) or n < 1 or len(agent.get("scores", [])) != n or len(agent.get("run_ids", [])) != n:
            raise ValueError(f"merged report: agent {agent.get('label')!r} needs n_runs scores and run ids")
        if not math.isclose(agent["mean"], sum(agent["scores"]) / n, abs_tol=1e-12):
            raise ValueError(f"merged report: agent {agent['label']!r} mean is not the mean of its run scores")
        if (agent["sem"] is None) != (n < 2):
            raise ValueError(f"merged report: agent {agent['label']!r} sem must be null exactly for one run")
        lo, hi = agent["ci"]
        if not 0.0 <= lo <= hi <= 1.0:
            raise ValueError(f"merged report: agent {agent['label']!r} interval must satisfy 0 <= lo <= hi <= 1")
        if [c["challenge_id"] for c in agent["challenges"]] != ids:
            raise ValueError(f"merged report: agent {agent['label']!r} must have one row per merged challenge")
        for row in agent["challenges"]:
            if len(row["percentiles"]) != n or not all(0.0 <= p <= 1.0 for p in row["percentiles"]):
                raise ValueError(f"merged report: {agent['label']}/{row['challenge_id']} needs n_runs percentiles in [0, 1]")
        ranks.append((agent["mean"], agent["rank"]))
    for mean, rank in ranks:
        if rank != 1 + sum(1 for m, _ in ranks if m > mean):
            raise ValueError("merged report: ranks must follow the mean scores (ties share a rank)")


def markdown(doc: dict) -> str:
    from .render import pct

    out = ["# ReX-MLE merged report", "",
           f"{len(doc['agents'])} agent(s), {len(doc['sources'])} session(s), {len(doc['challenges'])} challenge(s)"
           f"{' (partial set)' if doc['partial'] else ''}. Scores are mean percentiles over the challenges, FAILs "
           f"as 0; intervals are {doc['bootstrap']['confidence']:.0%} bootstrap intervals over runs "
           f"({doc['bootstrap']['resamples']} resamples, seed {doc['bootstrap']['seed']}).", "",
           "| Rank | Agent | Runs | Score | SEM | CI |", "|---|---|---|---|---|---|"]
    for a in doc["agents"]:
        err = pct(a["sem"]) if a["sem"] is not None else "-"
        out.append(f"| {a['rank']} | {a['label']} | {a['n_runs']} | {pct(a['mean'])} | {err} | "
                   f"{pct(a['ci'][0])} – {pct(a['ci'][1])} |")
    out += ["", "| Challenge | " + " | ".join(a["label"] for a in doc["agents"]) + " |",
            "|---|" + "---|" * len(doc["agents"])]
    for i, cid in enumerate(doc["challenges"]):
        cells = [f"{pct(a['challenges'][i]['mean_percentile'])} ({a['challenges'][i]['n_fail']}/{a['n_runs']} FAIL)"
                 for a in doc["agents"]]
        out.append(f"| {cid} | " + " | ".join(cells) + " |")
    out += ["", f"_{doc['note']}_", ""]
    return "\n".join(out)


# -- command line -----------------------------------------------------------------------------------

def add_report_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("inputs", nargs="+", metavar="DIR",
                        help="session folder holding rexmle-report.json (and optionally rexmle-capability.json), "
                             "a rexmle-report.json file, or a report folder such as .rexmle/report (its latest session)")
    parser.add_argument("--out", required=True, type=Path, help="folder for rexmle-merged.{json,md} and rexmle-report.html")
    parser.add_argument("--capability", action="append", default=[], type=Path, metavar="FILE",
                        help="extra rexmle-capability.json file(s) for the capability views (repeatable)")
    parser.add_argument("--resamples", type=int, default=RESAMPLES, help=f"bootstrap resamples (default {RESAMPLES})")
    parser.add_argument("--seed", type=int, default=SEED, help=f"bootstrap seed (default {SEED})")
    parser.add_argument("--confidence", type=float, default=CONFIDENCE, help=f"interval level (default {CONFIDENCE})")
    return parser


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def load_inputs(inputs: list[Path], extra_capability: list[Path] = ()) -> tuple[list[dict], list[dict]]:
    """(report documents, capability documents) for the given folders/files; raises FileNotFoundError/ValueError."""
    reports, capability = [], []
    for raw in inputs:
        from .store import resolve

        report = resolve(Path(raw))  # a file, a session folder, or a report folder (its latest session)
        try:
            reports.append(_load(report))
        except ValueError as exc:
            raise ValueError(f"{report}: not JSON ({exc})") from None
        if reports[-1].get("schema") != REPORT_SCHEMA:
            raise ValueError(f"{report}: not a {REPORT_SCHEMA} document")
        cap = report.parent / CAPABILITY_JSON
        if cap.is_file():
            capability.append(_load(cap))
    for path in extra_capability:
        if not Path(path).is_file():
            raise FileNotFoundError(f"no capability file {path}")
        capability.append(_load(Path(path)))
    return reports, capability


def run_report(args: argparse.Namespace) -> int:
    """``rexmle report``: 0 on success, 1 for a bad input document, 2 for a missing input."""
    from .html import render_html
    from .store import write_json, write_text

    try:
        reports, capability = load_inputs(args.inputs, getattr(args, "capability", []) or [])
        merged = merge_reports(reports, resamples=args.resamples, seed=args.seed, confidence=args.confidence)
    except FileNotFoundError as exc:
        print(f"rexmle report: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"rexmle report: {exc}", file=sys.stderr)
        return 1
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / MERGED_JSON, merged)
    write_text(out / MERGED_MD, markdown(merged))
    html = write_text(out / HTML_NAME, render_html([merged], capability or None))
    for path in (out / MERGED_JSON, out / MERGED_MD, html):
        print(path)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = add_report_arguments(argparse.ArgumentParser(prog="rexmle report", description=__doc__.splitlines()[0]))
    return run_report(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
