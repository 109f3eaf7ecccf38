"""Merging several sessions' ``rexmle-report.json``: agents side by side, repeated runs summarised.

``rexmle report DIR... --out OUT`` (DIR is a session folder holding ``rexmle-report.json`` — and, when
present, ``rexmle-capability.json`` —, the report file itself, or a report folder such as
``.rexmle/report``, which stands for every session in it; the command prints which sessions it took)
writes ``OUT/rexmle-merged.json``, ``OUT/rexmle-merged.md`` and the self-contained ``OUT/rexmle-report.html``.
``--reference paper`` (the default) adds the paper's published agents beside yours, ``--reference none``
leaves them out.

Rules: docs/reading-the-report.md, "Merged reports", where they are explained. In short: every session is
one run of one agent, and a session of ``--rexmle-repeat N`` > 1 is N runs (:func:`split_repeats`). An agent
is its name plus its public options and the kind of data it was graded on (synthetic twins or real data); two
of one name are labelled ``name [hash]`` (or ``name (synthetic)`` when only the data differs). The comparison
set C is the union of the tasks any merged session selected; runs of different selections are merged per task
(:func:`merged_score`), and a task no run of an agent selected is "not run" for it, left out of its score. The intervals are bootstraps with a fixed seed (:func:`bootstrap_ci`,
:func:`merged_bootstrap`), so the same inputs always give the same interval. Agents are ordered by mean
score; equal means share a rank.

Merged document (schema ``rexmle-merged-report/2``)::

    {
      "schema": "rexmle-merged-report/2", "created": ISO-8601 UTC,
      "tasks": [project ids of C, sorted], "partial": bool (C is not all 20),
      "bootstrap": {"resamples": int, "seed": int, "confidence": float},
      "sources": [{"run_id", "agent", "label", "created", "score", "partial", "n_fail", "n_selected", "data_kind"}],
      "data_kinds": ["real" | "synthetic", ...],
      "agents": [{
          "label": str, "agent": str | null, "agent_options": {..}, "data_kind": str, "n_runs": int,
          "run_ids": [str], "scores": [float per run, over the tasks that run selected],
          "n_tasks": [int per run], "not_run": [ids of C no run of this agent selected],
          "same_selection": bool, "mean": float (per-task merge), "sem": float | null, "ci": [lo, hi],
          "rank": int, "n_fail": [int per run, over the tasks that run selected],
          "tasks": [{"task_id", "n_runs" (runs that selected it, 0 = not run), "not_run": bool,
                          "percentiles": [per run], "mean_percentile": float | null, "sem", "ci",
                          "n_fail", "statuses": [per such run], "mean_position": float | null (over OK runs),
                          "ranking_metrics": [str], "n_humans": int | null,
                          "metrics": {key: {"mean": float | null, "n": int}}}]}],   means over OK runs
      "reference": [published agents, see :mod:`.reference`] (only with a reference),
      "verification": {"verified": int, "unverified": int, "unverified_why": {run_id: str}}, each source's
          "trust" ("verified" | "unverified"), "trust_why", "trust_notes" and each agent's "trust", and
      "refused": [{"run_id", "agent", "why"}]: only for reports read from files (see :mod:`.trust`, :mod:`.verify`),
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
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, model_validator

from ..agent_output import clean_text
from ..capability import SESSION_CAPABILITY_JSON
from ..documents import Document, json_numbers, number
from ..errors import RexmleError
from ..scoring.ranking import overall_score
from ..task import registry
from .archive import resolve_all, write_json, write_text
from .mdtext import md_row, md_table, md_text
from .model import SessionReport, count_fails, data_kind, note_for, percentile_of
from .reference import CHOICES, DEFAULT, with_reference
from .render import LEGEND, pct
from .trust import REFUSED, UNVERIFIED, VERIFIED, read_report, rederive, status_of
from .verify import verify_session

SCHEMA = "rexmle-merged-report/2"
MERGED_JSON = "rexmle-merged.json"
MERGED_MD = "rexmle-merged.md"
HTML_NAME = "rexmle-report.html"
RESAMPLES = 2000
SEED = 0
CONFIDENCE = 0.95


def agent_identity(doc: dict) -> tuple[str, str, str]:
    """(agent name, canonical options JSON, data kind): what makes two sessions runs of the same agent.
    A run on synthetic twins is never pooled with a run on real data."""
    return (str(doc.get("agent") or "unknown"), json.dumps(doc.get("agent_options") or {}, sort_keys=True),
            data_kind(doc))


def labels_for(docs: Iterable[dict]) -> dict[tuple[str, str, str], str]:
    identities = sorted({agent_identity(d) for d in docs})
    out = {}
    for name, options, kind in identities:
        same_name = [i for i in identities if i[0] == name]
        label = name
        if len({i[1] for i in same_name}) > 1:
            label += f" [{hashlib.sha256(options.encode()).hexdigest()[:8]}]"
        if len({i[2] for i in same_name}) > 1:
            label += f" ({kind})"
        out[(name, options, kind)] = label
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
    import numpy as np  # start-up: numpy only where this runs

    data = np.asarray(values, dtype=float)
    rng = np.random.default_rng(list(seed))
    return _interval(data[rng.integers(0, len(data), size=(resamples, len(data)))].mean(axis=1), confidence)


def _interval(means: Any, confidence: float) -> list[float]:
    """The central ``confidence`` interval of bootstrap means (a numpy array)."""
    import numpy as np  # start-up: numpy only where this runs

    alpha = (1.0 - confidence) / 2.0
    return [float(np.quantile(means, alpha)), float(np.quantile(means, 1.0 - alpha))]


def _key(text: str) -> int:
    return zlib.crc32(text.encode())


def mean_of(values: list[float]) -> float | None:
    """The mean, None for no values (a NaN among them makes it NaN)."""
    return sum(values) / len(values) if values else None


def split_repeats(doc: dict) -> list[dict]:
    """A session of ``--rexmle-repeat N`` > 1 as the N sessions (per agent) it stands for: each repeat's
    records, score, FAIL and ERROR counts, as a session of that one repeat would have written them (run id
    ``<run id>-r001``...). Any other document is returned as it is."""
    if not isinstance(doc, dict) or (doc.get("repeats") or 1) <= 1:
        return [doc]
    several = isinstance(doc.get("agents"), dict)
    parts: dict[tuple[str | None, int], list[dict]] = {}
    for rec in doc.get("tasks") or []:
        agent = rec.get("agent") if several else doc.get("agent")
        parts.setdefault((agent, int(rec.get("repeat") or 1)), []).append(rec)
    skipped = set(doc.get("skipped") or ())
    out = []
    for (agent, repeat), records in sorted(parts.items(), key=lambda p: (str(p[0][0]), p[0][1])):
        selected = [r["task_id"] for r in records]
        options = (doc["agents"].get(agent) or {}).get("agent_options") if several else doc.get("agent_options")
        rest = {k: v for k, v in doc.items() if k not in ("agents", "aggregate", "repeats", "n_runs")}
        out.append({**rest, "run_id": f"{doc['run_id']}-r{repeat:03d}", "agent": agent, "agent_options": options or {},
                    "selected": selected, "tasks": records, "skipped": sorted(skipped & set(selected)),
                    "score": overall_score(percentile_of(r) for r in records),
                    "n_fail": count_fails(selected, {r["task_id"]: r for r in records}, skipped),
                    "n_error": sum(1 for r in records if r["status"] == "error")})
    return out


def merge_reports(docs: list[dict], *, resamples: int = RESAMPLES, seed: int = SEED,
                  confidence: float = CONFIDENCE) -> dict:
    """Merge session reports (each validated first); see the module docstring for the rules."""
    if not docs:
        raise ValueError("nothing to merge: no report documents")
    for doc in docs:
        SessionReport.check(doc, f"report {doc.get('run_id') if isinstance(doc, dict) else doc!r}")
    docs = [part for doc in docs for part in split_repeats(doc)]

    task_ids = sorted({cid for d in docs for cid in d["selected"]})
    try:
        all_ids = set(registry().ids)
    except Exception:
        all_ids = set()
    labels = labels_for(docs)
    groups: dict[str, list[dict]] = {}
    for doc in sorted(docs, key=lambda d: (d.get("created") or "", d["run_id"])):
        groups.setdefault(labels[agent_identity(doc)], []).append(doc)
    agents = [_agent_entry(label, runs, task_ids, resamples, seed, confidence) for label, runs in groups.items()]
    agents.sort(key=lambda a: (-a["mean"], a["label"]))
    for entry in agents:
        entry["rank"] = 1 + sum(1 for other in agents if other["mean"] > entry["mean"])
    sources = [{"run_id": d["run_id"], "agent": d.get("agent"), "label": labels[agent_identity(d)],
                "created": d.get("created"), "score": d["score"], "partial": d["partial"], "n_fail": d["n_fail"],
                "n_selected": len(d["selected"]), "data_kind": data_kind(d), **_trust_of(d)} for d in docs]
    checked = any("trust" in d for d in docs)
    if checked:
        for entry in agents:
            # an agent is verified only when every one of its sessions is
            entry["trust"] = VERIFIED if all(status_of(d) == VERIFIED for d in groups[entry["label"]]) else UNVERIFIED
    kinds = sorted({data_kind(d) for d in docs})
    merged = {"schema": SCHEMA, "created": datetime.now(UTC).isoformat(), "tasks": task_ids,
              "partial": set(task_ids) != all_ids, "bootstrap": {"resamples": resamples, "seed": seed,
                                                                      "confidence": confidence},
              "sources": sources, "data_kinds": kinds, "agents": agents, "note": note_for(kinds),
              **merged_compute(docs, labels)}
    if checked:
        merged["verification"] = {s: sum(1 for d in docs if status_of(d) == s) for s in (VERIFIED, UNVERIFIED)}
        why = {d["run_id"]: (d.get("trust") or {}).get("why") for d in docs if status_of(d) == UNVERIFIED}
        merged["verification"]["unverified_why"] = why
        notes = [f"session {d['run_id']}: {n}" for d in docs for n in (d.get("trust") or {}).get("notes") or []]
        if notes:
            merged["warnings"] = [*merged.get("warnings", []), *notes]
    return json_numbers(merged)


def _trust_of(doc: dict) -> dict:
    """A source's verdict and why, for a document ``rexmle report`` read from a file (its own sessions' reports,
    merged for their HTML page, carry none)."""
    if "trust" not in doc:
        return {}
    trust = doc["trust"]
    return {"trust": status_of(doc), "trust_why": trust.get("why"), "trust_notes": list(trust.get("notes") or [])}


def merged_compute(docs: list[dict], labels: dict) -> dict:
    """Each session's compute totals and disclosure, the hardware the runs ran on, and a warning when the
    merged runs ran on different hardware (their scores were not bought with equal means)."""
    hardware: dict[str, list[str]] = {}
    per_source = []
    for doc in sorted(docs, key=lambda d: (d.get("created") or "", d["run_id"])):
        compute: dict = doc["compute"] if isinstance(doc.get("compute"), dict) else {}
        claimed = "trust" in doc and status_of(doc) != VERIFIED  # a downloaded file's word, not a fact
        for text in compute.get("hardware") or []:
            shown = f"{text} (as an unverified session states it)" if claimed else str(text)
            hardware.setdefault(shown, []).append(labels[agent_identity(doc)])
        per_source.append({"run_id": doc["run_id"], "total": compute.get("total"),
                           "disclosure": doc.get("disclosure")})
    out: dict = {"compute": {"hardware": {k: sorted(set(v)) for k, v in sorted(hardware.items())},
                             "sessions": per_source}}
    if len(hardware) > 1:
        out["warnings"] = [f"the merged runs ran on different hardware ({'; '.join(sorted(hardware))}): "
                           f"compare their scores with that in mind"]
    unsafe = sorted({u for d in docs for u in ((d.get("disclosure") or {}).get("unsafe") or [])})
    if unsafe:
        out["unsafe"] = unsafe
    return out


def merged_score(matrix: list[list[float | None]]) -> float:
    """The per-task merge: per task the mean over the runs that selected it (``None``: not selected),
    then the mean over the tasks any run selected. Equal selections give the mean of the run scores."""
    means = [mean_of([v for v in column if v is not None]) for column in zip(*matrix, strict=True)]
    return overall_score(m for m in means if m is not None)


def merged_bootstrap(matrix: list[list[float | None]], *, resamples: int, confidence: float,
                     seed: Iterable[int]) -> tuple[list[float], float]:
    """(percentile interval, standard error) of :func:`merged_score` over resampled runs: runs drawn with
    replacement, each draw scored per task as the whole merge is. Used when the runs selected different
    tasks, where the mean of the run scores would weigh a ``-k`` run's few tasks like a full run."""
    import numpy as np  # start-up: numpy only where this runs

    data = np.array([[np.nan if v is None else v for v in row] for row in matrix], dtype=float)
    rng = np.random.default_rng(list(seed))
    draws = data[rng.integers(0, len(data), size=(resamples, len(data)))]  # (resamples, runs, tasks)
    counts = (~np.isnan(draws)).sum(axis=1)
    sums = np.nansum(draws, axis=1)
    per_task = np.divide(sums, counts, out=np.full(sums.shape, np.nan), where=counts > 0)
    means = np.nanmean(np.where(np.isnan(per_task).all(axis=1, keepdims=True), 0.0, per_task), axis=1)
    return _interval(means, confidence), float(np.std(means, ddof=1))


def _agent_entry(label: str, runs: list[dict], task_ids: list[str], resamples: int, seed: int,
                 confidence: float) -> dict:
    """One agent's runs merged per task: a task counts for a run only if that run selected it."""
    per_run = [{rec["task_id"]: rec for rec in doc.get("tasks", [])} for doc in runs]
    # the tasks each run selected (a selected one without a record is still its FAIL)
    covers = [set(doc.get("selected") or ()) | set(records) for doc, records in zip(runs, per_run, strict=True)]
    skipped = [set(doc.get("skipped") or ()) for doc in runs]
    ran = [c for c in task_ids if any(c in cov for cov in covers)]
    scores, fails, counts = [], [], []
    for records, cov, skips in zip(per_run, covers, skipped, strict=True):
        own = [c for c in ran if c in cov]
        scores.append(overall_score(percentile_of(records.get(c)) for c in own))  # its own score, FAILs as 0
        fails.append(count_fails(own, records, skips))
        counts.append(len(own))
    matrix = [[percentile_of(records.get(c)) if c in cov else None for c in ran] for records, cov in zip(per_run, covers, strict=True)]
    rows = [_task_row(label, cid, [records.get(cid) for records, cov in zip(per_run, covers, strict=True)
                                        if cid in cov], resamples, seed, confidence) for cid in task_ids]
    same_selection = all(cov & set(ran) == set(ran) for cov in covers)
    if same_selection:  # every run selected every task: the run scores' statistics, as always
        error = sem(scores)
        ci = bootstrap_ci(scores, resamples=resamples, confidence=confidence, seed=(seed, _key(label)))
    else:
        ci, spread = merged_bootstrap(matrix, resamples=resamples, confidence=confidence, seed=(seed, _key(label)))
        error = spread if len(runs) > 1 else None
    first = runs[0]
    return {"label": label, "agent": first.get("agent"), "agent_options": first.get("agent_options") or {},
            "data_kind": data_kind(first), "n_runs": len(runs), "run_ids": [d["run_id"] for d in runs],
            "scores": scores, "n_tasks": counts, "not_run": [r["task_id"] for r in rows if r["not_run"]],
            "same_selection": same_selection, "mean": merged_score(matrix) if ran else 0.0, "sem": error,
            "ci": ci, "rank": 0, "n_fail": fails, "tasks": rows}


def _task_row(label: str, cid: str, recs: list[dict | None], resamples: int, seed: int,
                   confidence: float) -> dict:
    """One task of one agent over the runs that selected it (``recs``; None: selected, no record)."""
    pcts = [percentile_of(r) for r in recs]
    ok = [r for r in recs if r is not None and r["status"] == "ok"]
    recs_known = [r for r in recs if r is not None]
    metric_keys = sorted({k for r in ok for k in (r.get("metrics") or {})})
    metrics = {}
    for key in metric_keys:
        values = [float(number(r["metrics"][key])) for r in ok if key in (r.get("metrics") or {})]
        metrics[key] = {"mean": mean_of(values), "n": len(values)}
    positions = [float(r["mean_position"]) for r in ok if r.get("mean_position") is not None]
    return {
        "task_id": cid, "n_runs": len(recs), "not_run": not recs, "percentiles": pcts,
        "mean_percentile": mean_of(pcts), "sem": sem(pcts),
        "ci": (bootstrap_ci(pcts, resamples=resamples, confidence=confidence, seed=(seed, _key(label), _key(cid)))
               if pcts else None),
        "n_fail": len(recs) - len(ok), "statuses": [r["status"] if r is not None else "missing" for r in recs],
        "mean_position": mean_of(positions),
        "ranking_metrics": next((r["ranking_metrics"] for r in recs_known), []),
        "n_humans": next((r["n_humans"] for r in recs_known), None),
        "metrics": metrics,
    }


class MergedTask(BaseModel):
    model_config = ConfigDict(extra="allow")

    task_id: str
    n_runs: StrictInt = Field(ge=0)
    not_run: StrictBool = False
    percentiles: list[Annotated[float, Field(ge=0.0, le=1.0)]]
    mean_percentile: float | None = None


class MergedAgent(BaseModel):
    model_config = ConfigDict(extra="allow")

    label: str
    n_runs: StrictInt = Field(ge=1)
    run_ids: list[str]
    scores: list[float]
    mean: float
    sem: float | None
    ci: tuple[float, float]
    rank: StrictInt
    tasks: list[MergedTask]

    @model_validator(mode="after")
    def _statistics_of_its_runs(self) -> MergedAgent:
        n = self.n_runs
        if len(self.scores) != n or len(self.run_ids) != n:
            raise ValueError(f"agent {self.label!r} needs n_runs scores and run ids")
        ran = [row.mean_percentile or 0.0 for row in self.tasks if not row.not_run]
        if not math.isclose(self.mean, sum(ran) / len(ran) if ran else 0.0, abs_tol=1e-12):
            raise ValueError(f"agent {self.label!r} mean is not the mean over its tasks of their mean "
                             "percentiles")
        if (self.sem is None) != (n < 2):
            raise ValueError(f"agent {self.label!r} sem must be null exactly for one run")
        if not 0.0 <= self.ci[0] <= self.ci[1] <= 1.0:
            raise ValueError(f"agent {self.label!r} interval must satisfy 0 <= lo <= hi <= 1")
        for row in self.tasks:
            if row.n_runs > n or len(row.percentiles) != row.n_runs:
                raise ValueError(f"{self.label}/{row.task_id} needs one percentile in [0, 1] per run that "
                                 "selected it")
        return self


class MergedReport(Document):
    """``rexmle-merged.json`` (``rexmle-merged-report/2``); see the module docstring for the fields."""

    schema_: Literal["rexmle-merged-report/2"] = Field(alias="schema")
    created: str
    tasks: list[str]
    partial: StrictBool
    bootstrap: dict
    sources: list
    agents: list[MergedAgent]
    note: str

    @model_validator(mode="after")
    def _one_row_per_task_and_ranked(self) -> MergedReport:
        for agent in self.agents:
            if [c.task_id for c in agent.tasks] != self.tasks:
                raise ValueError(f"agent {agent.label!r} must have one row per merged task")
        for agent in self.agents:
            if agent.rank != 1 + sum(1 for other in self.agents if other.mean > agent.mean):
                raise ValueError("ranks must follow the mean scores (ties share a rank)")
        return self


def markdown(doc: dict) -> str:
    """The merged report in Markdown; labels go through :func:`md_text` (an agent name is user text)."""
    refs = doc.get("reference") or []
    kinds = ", ".join(doc.get("data_kinds") or [])
    out = [f"**UNSAFE: a merged session weakened the sandbox: {md_text('; '.join(doc['unsafe']))}**", ""] \
        if doc.get("unsafe") else []
    out += ["# ReX-MLE merged report", "",
           f"{len(doc['agents'])} agent(s), {len(doc['sources'])} session(s), {len(doc['tasks'])} task(s)"
           f"{' (partial set)' if doc['partial'] else ''}; data: **{kinds or '-'}**. Scores are mean percentiles over "
           f"the tasks each agent ran, FAILs as 0; a task an agent never ran is \"not run\" and left out "
           f"of its score. Intervals are {doc['bootstrap']['confidence']:.0%} bootstrap intervals over runs "
           f"({doc['bootstrap']['resamples']} resamples, seed {doc['bootstrap']['seed']}).", "",
           *[f"**Warning: {md_text(w)}**" for w in doc.get("warnings") or []],
           *verification_lines(doc),
           *[f"**REFUSED (left out): session {md_text(r['run_id'])} of {md_text(str(r['agent']))}: {md_text(r['why'])}**"
             for r in doc.get("refused") or []],
           *md_table("Rank", "Agent", "Data", "Runs", "Tasks run", "Score", "SEM", "CI")]
    n_all = len(doc["tasks"])
    for a in doc["agents"]:
        err = pct(a["sem"]) if a["sem"] is not None else "-"
        ran = n_all - len(a.get("not_run") or [])
        out.append(md_row(a["rank"], md_text(a["label"]) + trust_mark(a), a.get("data_kind", "-"), a["n_runs"],
                          f"{ran} of {n_all}", pct(a["mean"]), err, f"{pct(a['ci'][0])} – {pct(a['ci'][1])}"))
    for r in refs:
        shown = pct(r["mean"]) if r["mean"] is not None else "-"
        out.append(md_row("–", md_text(r["label"]), "real (paper)", "published", n_all,
                          f"{shown} (Table 3, all 20: {100 * r['table3_score']:.2f}%)", "-", "-"))
    labels = [md_text(a["label"]) for a in doc["agents"]] + [md_text(r["label"]) for r in refs]
    out += ["", *md_table("Task", *labels)]
    for i, cid in enumerate(doc["tasks"]):
        cells = []
        for a in doc["agents"]:
            row = a["tasks"][i]
            cells.append("not run" if row.get("not_run") or row["mean_percentile"] is None else
                         f"{pct(row['mean_percentile'])} ({row['n_fail']}/{row['n_runs']} FAIL)")
        for r in refs:
            cell = r["tasks"][i]
            cells.append("not published" if cell["mean_percentile"] is None else
                         ("FAIL" if cell["status"] != "ok" else pct(cell["mean_percentile"])))
        out.append(md_row(md_text(cid), *cells))
    out += ["", f"_{md_text(doc['note'])}_", "", LEGEND, ""]
    return "\n".join(out)


def trust_mark(agent: dict) -> str:
    """`` — UNVERIFIED`` beside an agent whose results were not all re-graded here (nothing when the merge read
    no files: a session's own report)."""
    return " — UNVERIFIED" if agent.get("trust", VERIFIED) != VERIFIED else ""


def ranking_lines(doc: dict) -> list[str]:
    """The ranking as the terminal shows it, each agent with its verdict: an unverified row is never shown
    beside a verified one without saying so."""
    return [f"{a['rank']}. {clean_text(a['label'], limit=80)}: {pct(a['mean'])} over {a['n_runs']} session(s)"
            f"{trust_mark(a)}" for a in doc["agents"]] + [
           f"REFUSED (left out): session {clean_text(str(r['run_id']), limit=80)}" for r in doc.get("refused") or []]


def verification_lines(doc: dict) -> list[str]:
    """What was checked: how many sessions were re-graded here, how many are taken on their files' word."""
    counts = doc.get("verification")
    if not counts:
        return []
    return [f"**Verified: {counts.get(VERIFIED, 0)} session(s) re-graded here from their submissions; unverified: "
            f"{counts.get(UNVERIFIED, 0)} session(s), whose results are their files' claims (ranks and scores "
            f"re-derived from the rows, nothing re-graded): an agent marked UNVERIFIED is not ranked on equal "
            f"terms. `rexmle report --verify` re-grades what it can find.**", ""]


# -- command line -----------------------------------------------------------------------------------

def add_report_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("inputs", nargs="+", metavar="DIR",
                        help="session folder holding rexmle-report.json (and optionally rexmle-capability.json), "
                             "a rexmle-report.json file, or a report folder such as .rexmle/report (every session "
                             "in it; the command lists the sessions it took)")
    parser.add_argument("--out", required=True, type=Path, help="folder for rexmle-merged.{json,md} and rexmle-report.html")
    parser.add_argument("--capability", action="append", default=[], type=Path, metavar="FILE",
                        help="extra rexmle-capability.json file(s) for the capability views (repeatable)")
    parser.add_argument("--reference", choices=CHOICES, default=DEFAULT,
                        help=f"published agents shown beside yours: 'paper' (the ReX-MLE paper's AIDE, ML-Master, "
                             f"R&D-Agent; default {DEFAULT}) or 'none'")
    parser.add_argument("--verify", action="store_true",
                        help="re-grade every graded submission the reports name (their run folders, or copies next "
                             "to the report) against this machine's private answers; a session whose results all "
                             "re-grade the same is 'verified', one whose submission or metrics differ is refused")
    parser.add_argument("--data-dir", type=Path, default=None, metavar="DIR",
                        help="prepared real data for --verify (default $REXMLE_DATA_DIR or ~/.cache/rexmle/data); "
                             "synthetic sessions use this machine's twins")
    parser.add_argument("--resamples", type=int, default=RESAMPLES, help=f"bootstrap resamples (default {RESAMPLES})")
    parser.add_argument("--seed", type=int, default=SEED, help=f"bootstrap seed (default {SEED})")
    parser.add_argument("--confidence", type=float, default=CONFIDENCE, help=f"interval level (default {CONFIDENCE})")
    return parser


def load_inputs(inputs: list[Path], extra_capability: list[Path], taken: list[tuple[Path, Path]],
                verify: bool = False, data_dir: Path | None = None) -> tuple[list[dict], list[dict]]:
    """(report documents, capability documents) for the given folders/files; raises FileNotFoundError/ValueError.

    A report folder stands for every session in it; a session named twice (a folder and its ``latest``)
    is taken once. ``taken`` receives (input, report file) for each report read, so the caller can say
    plainly what was merged."""
    reports, capability, seen = [], [], set()
    for raw in inputs:
        for report in resolve_all(Path(raw)):
            if report.resolve() in seen:
                continue
            seen.add(report.resolve())
            doc = read_report(report)  # a download: bounded in size and depth
            SessionReport.check(doc, report)
            reports.append(verify_session(rederive(doc), report, data_dir) if verify else rederive(doc))
            taken.append((Path(raw), report))
            cap = report.parent / SESSION_CAPABILITY_JSON
            if cap.is_file():
                capability.append(read_report(cap, "capability file"))
    for path in extra_capability:
        if not Path(path).is_file():
            raise FileNotFoundError(f"no capability file {path}")
        capability.append(read_report(Path(path), "capability file"))
    return reports, capability


def run_report(args: argparse.Namespace) -> int:
    """``rexmle report``: 0 on success, 1 for a bad input document, 2 for a missing input."""
    from .html import render_html  # html imports this module

    taken: list[tuple[Path, Path]] = []
    try:
        reports, capability = load_inputs(args.inputs, args.capability, taken, getattr(args, "verify", False),
                                          getattr(args, "data_dir", None))
        refused = [d for d in reports if status_of(d) == REFUSED]
        for doc in refused:
            print(f"rexmle report: REFUSED session {doc['run_id']}: {doc['trust']['why']}", file=sys.stderr)
        kept = [d for d in reports if status_of(d) != REFUSED]
        if not kept:
            raise ValueError("nothing to merge: every session was refused by --verify")
        merged = merge_reports(kept, resamples=args.resamples, seed=args.seed, confidence=args.confidence)
        if refused:
            merged["refused"] = [{"run_id": d["run_id"], "agent": d.get("agent"), "why": d["trust"]["why"]}
                                 for d in refused]
        merged = with_reference(merged, args.reference)
    except (FileNotFoundError, ValueError, RexmleError) as exc:
        print(f"rexmle report: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, FileNotFoundError) else 1
    for raw in dict.fromkeys(raw for raw, _ in taken):
        names = [report.parent.name for r, report in taken if r == raw]
        print(f"took {len(names)} session(s) from {raw}: {', '.join(names)}", file=sys.stderr)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    MergedReport.check(merged, out / MERGED_JSON)  # the schema holds on every write, as run.json's does
    write_json(out / MERGED_JSON, merged)
    write_text(out / MERGED_MD, markdown(merged))
    html = write_text(out / HTML_NAME, render_html([merged], capability or None))
    for line in ranking_lines(merged):
        print(line)
    for path in (out / MERGED_JSON, out / MERGED_MD, html):
        print(path)
    return 0
