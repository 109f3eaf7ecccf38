"""The paper's agents as a reference beside the user's: "how does my agent compare?"

``paper_results.json`` is a verbatim copy of ``reference-data/_common/paper_results.json``: the values,
positions and percentiles the ReX-MLE paper published for AIDE, ML-Master and R&D-Agent (GPT-5, 24 h,
appendix Tables S1–S20) and their overall scores (Table 3). They are facts transcribed from the paper,
never re-graded here, so every place that shows them says "published".

A reference entry (the merged document's ``reference`` list) has the shape of a merged agent where the
renderers need it::

    {"label": "AIDE (published)", "agent": "AIDE", "published": true, "llm": "GPT-5", "budget_hours": 24,
     "table3_score": float,              the paper's overall mean percentile over all 20 tasks
     "mean": float,                      mean published percentile over the tasks shown (FAIL = 0)
     "tasks": [{"task_id", "status": "ok" | "FAIL" | "not published", "mean_percentile": float | null,
                     "metrics": {key: {"mean": value}}, "positions": {key: int}, "mean_position": float | null}]}
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

PAPER_RESULTS = Path(__file__).with_name("paper_results.json")
#: ``rexmle report --reference`` choices; ``paper`` is the default (the first question a user has)
CHOICES = ("paper", "none")
DEFAULT = "paper"
PUBLISHED = "published"


@lru_cache(maxsize=1)
def paper_results() -> dict:
    return json.loads(PAPER_RESULTS.read_text(encoding="utf-8"))


def paper_agents(task_ids: list[str]) -> list[dict]:
    """One reference entry per agent of the paper's main table (24 h), over ``task_ids`` in order."""
    data = paper_results()
    runs = [r for r in data["runs"] if r.get("budget_hours") == 24]
    names = list(dict.fromkeys(r["agent"] for r in runs))
    out = []
    for name in sorted(names, key=lambda n: -data["overall_mean_percentile"].get(n, 0.0)):
        by_task = {r["task"]: r for r in runs if r["agent"] == name}
        rows: list[dict[str, Any]] = []
        for cid in task_ids:
            run = by_task.get(cid)
            if run is None:
                rows.append({"task_id": cid, "status": "not published", "mean_percentile": None, "metrics": {},
                             "positions": {}, "mean_position": None})
                continue
            ok = run["status"] == "ok"
            rows.append({"task_id": cid, "status": "ok" if ok else "FAIL",
                         "mean_percentile": float(run["percentile"]) if ok else 0.0,
                         "metrics": {k: {"mean": v} for k, v in (run.get("metrics") or {}).items()},
                         "positions": dict(run.get("positions") or {}), "mean_position": run.get("mean_position")})
        shown = [r["mean_percentile"] for r in rows if r["mean_percentile"] is not None]
        first = next(iter(by_task.values()))
        out.append({"label": f"{name} ({PUBLISHED})", "agent": name, "published": True, "llm": first.get("llm"),
                    "budget_hours": first.get("budget_hours"),
                    "table3_score": data["overall_mean_percentile"].get(name),
                    "mean": sum(shown) / len(shown) if shown else None, "tasks": rows})
    return out


def with_reference(merged: dict, reference: str | None) -> dict:
    """``merged`` with its ``reference`` list set for ``reference`` (``paper`` or ``none``/None: empty)."""
    if reference not in (None, *CHOICES):
        raise ValueError(f"unknown reference {reference!r}: choose one of {', '.join(CHOICES)}")
    entries = paper_agents(merged["tasks"]) if reference == "paper" else []
    return {**merged, "reference": entries}
