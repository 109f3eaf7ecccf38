"""A self-contained HTML report with the paper's views (inline SVG and CSS, no external resources).

Views, in order:

1. Summary — agents ranked by score (mean over runs, standard error, bootstrap interval).
2. Figure 1 style — percentile per task per agent, grouped bars, interval whiskers for repeated runs.
3. Table 3 style — each ranking metric: the human best (``Leaderboard.best``) next to each agent's mean
   value over its graded runs, and the mean percentile (beside the top human team's percentile).
4. Figure 4 style — capability radar over the 13 winning strategies, one polygon per agent.
5. Capability tables — mean per strategy (with sum / runs and the fragment-weighted mean) and the
   per-task 0/1 table of each agent.
6. Workflow stages S1–S5 and cost (turns, tokens, money, wall time), next to the percentile.

Inputs: session reports (``rexmle-report/2``, merged here with :func:`merge_reports`) or one merged
document; optional capability documents — session ``rexmle-capability.json`` files, per-agent aggregates
or per-run ``capability.json`` files — matched to agents by agent name (several sessions of one agent
are pooled run by run); their ``stages`` lists feed view 6.

The file opens offline: no scripts, fonts, images or style sheets are fetched, every text is escaped (the
markup is ``templates/report.html.j2``, autoescaped; this module computes what it shows).
With a reference (default ``paper``, see :mod:`.reference`) the paper's published agents appear beside
the user's in the summary, the chart (pale, dashed) and the metric table; a legend explains the percentile,
the positions and the human columns.
"""

from __future__ import annotations

import math
from collections import defaultdict
from functools import cache
from typing import Any

from jinja2 import Template
from markupsafe import Markup

from ..capability.schema import AGENT_SCHEMA, SESSION_SCHEMA, aggregate
from ..capability.strategies import load_strategies
from ..documents import number
from ..task import registry
from .archive import local_time
from .disclosure import host_text
from .humans import humans_of, place
from .merge import SCHEMA as MERGED_SCHEMA
from .merge import mean_of, merge_reports, trust_mark, verification_lines
from .reference import with_reference
from .render import LEAK_DOCS, fmt_number, gpu_text, leak_text, percent, provider_tools_line, run_label
from .templating import environment

#: the published agents' colours: drawn pale with a dashed outline, so they never read as one of the user's agents
REFERENCE_PALETTE = ("#6e7781", "#8250df", "#bf8700", "#0550ae")
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")
STAGE_IDS = ("S1", "S2", "S3", "S4", "S5")

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:0;padding:24px 32px;
color:#1b1f24;background:#fff}
main{margin:0 auto;max-width:2400px}
.scroll{overflow-x:auto;max-width:100%}
table.wide{width:100%}
svg.fig1{display:block;margin:0 auto}
svg.radar{display:block;margin:0 auto;max-width:100%;height:auto}
p.nocap{font-size:15px;background:#fff8c5;border:1px solid #d4a72c;border-radius:6px;padding:10px 14px}
@media (max-width:900px){body{padding:16px 12px}table{font-size:12px}}
h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;margin:32px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}p.meta,p.note{color:#57606a;font-size:13px}
table{border-collapse:collapse;font-size:13px;margin:6px 0 12px}
th,td{border:1px solid #d0d7de;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
td.fail{color:#cf222e}td.hit{background:#2da44e;color:#fff;text-align:center}td.miss{background:#f6f8fa;color:#8c959f;text-align:center}
.swatch{display:inline-block;width:11px;height:11px;margin-right:5px;border-radius:2px;vertical-align:-1px}
svg text{font-family:system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif}
figure{margin:8px 0 16px}figcaption{font-size:13px;color:#57606a;margin-top:4px}
td.notrun{color:#8c959f;font-style:italic}tr.published td{background:#f6f8fa;color:#3d444d}
th.published{background:#eef1f4;font-weight:600}small.pos{color:#57606a}
p.synthetic{font-size:15px;background:#fff8c5;border:1px solid #d4a72c;border-radius:6px;padding:10px 14px}
span.badge{display:inline-block;font-size:11px;padding:0 6px;border-radius:8px;background:#ddf4ff;color:#0969da;
border:1px solid #54aeff;margin-left:4px;vertical-align:1px}span.badge.synthetic{background:#fff8c5;color:#7d4e00;
border-color:#d4a72c}dl.legend{font-size:13px;color:#3d444d}dl.legend dt{font-weight:600;margin-top:6px}
dl.legend dd{margin:0 0 0 16px}
p.unsafe{font-size:15px;font-weight:600;background:#ffebe9;border:1px solid #ff8182;border-radius:6px;padding:10px 14px}
"""


# -- inputs -----------------------------------------------------------------------------------------

def _merged(reports: list[dict]) -> dict:
    if len(reports) == 1 and reports[0].get("schema") == MERGED_SCHEMA:
        return reports[0]
    if any(r.get("schema") == MERGED_SCHEMA for r in reports):
        raise ValueError("pass either one merged report or session reports, not both")
    return merge_reports(reports)


def capability_by_agent(capability: list[dict] | None) -> tuple[dict[str, dict], list[dict]]:
    """Per-agent aggregates keyed by agent name (runs of several sessions pooled) and all stage documents."""
    runs: dict[str, list[dict]] = defaultdict(list)
    direct: dict[str, list[dict]] = defaultdict(list)
    stages: list[dict] = []
    for doc in capability or []:
        if doc.get("schema") == SESSION_SCHEMA:
            for agent_doc in doc.get("agents", []):
                direct[str(agent_doc.get("agent"))].append(agent_doc)
            stages += list(doc.get("stages", []))
        elif doc.get("schema") == AGENT_SCHEMA:
            direct[str(doc.get("agent"))].append(doc)
        elif "strategies" in doc and "sections" in doc:  # a per-run capability.json
            runs[str(doc.get("agent"))].append(doc)
    for name, docs in runs.items():
        direct[name].append(aggregate(docs, docs[0].get("agent")))
    return {name: docs[0] if len(docs) == 1 else _pool(docs) for name, docs in direct.items()}, stages


def _pool(docs: list[dict]) -> dict:
    """Several aggregates of one agent (repeated sessions): pool their run tables."""
    table = [row for d in docs for row in d.get("runs", [])]
    n = len(table)
    rows = []
    for s in load_strategies():
        total = sum(r["scores"][s.id - 1] for r in table)
        rows.append({"id": s.id, "key": s.key, "strategy": s.name, "mean_score": total / n if n else 0.0,
                     "sum_score": total, "n_runs": n, "fragment_mean": None})
    return {"schema": AGENT_SCHEMA, "agent": docs[0].get("agent"), "n_runs": n, "strategies": rows, "runs": table}


def _names() -> dict[str, str]:
    try:
        return {t.id: t.paper_name for t in registry()}
    except Exception:
        return {}


# -- figure 1: grouped bars -------------------------------------------------------------------------

def _series(merged: dict, colors: dict[str, str]) -> list[dict]:
    """The bars' series: the user's agents, then the published ones (``published``: drawn pale, dashed)."""
    out = [{"label": a["label"], "color": colors[a["label"]], "published": False,
            "cells": [(c["mean_percentile"], c.get("ci"), c["n_runs"]) for c in a["tasks"]],
            "score": (a["mean"], a["ci"], a["n_runs"])} for a in merged["agents"]]
    for j, ref in enumerate(merged.get("reference") or []):
        out.append({"label": ref["label"], "color": REFERENCE_PALETTE[j % len(REFERENCE_PALETTE)], "published": True,
                    "cells": [(c["mean_percentile"], None, 1) for c in ref["tasks"]],
                    "score": (ref["mean"], None, 1)})
    return out


def bar_chart(merged: dict, colors: dict[str, str], names: dict[str, str]) -> dict:
    """Figure 1's geometry: ~1300 px for 20 tasks however many series (the published agents
    included), so that it fits a wide page; a bar per series and group, a mark where one was not run."""
    series = _series(merged, colors)
    groups = [(names.get(cid, cid), [s["cells"][i] for s in series]) for i, cid in enumerate(merged["tasks"])]
    groups.append(("Score (mean)", [s["score"] for s in series]))
    n_ag = max(1, len(series))
    bar = max(3.0, min(34.0, (1240.0 / len(groups) - 14.0) / n_ag))
    group_w = n_ag * bar + 14
    left, top, plot_h, bottom = 56, 16, 300, 130
    width = int(left + group_w * len(groups) + 24)
    y = lambda v: top + plot_h * (1.0 - max(0.0, min(1.0, v)))  # noqa: E731
    drawn = []
    for g, (label, values) in enumerate(groups):
        x0 = left + g * group_w + 7
        bars = []
        for k, (value, ci, n_runs) in enumerate(values):
            s, x = series[k], x0 + k * bar
            if value is None:  # not run by this agent (or not published): a mark, never a zero bar
                bars.append({"s": s, "x": x + (bar - 1) / 2, "what": "not published" if s["published"] else "not run"})
                continue
            h = max(0.0, plot_h * max(0.0, min(1.0, value)))
            spread = n_runs > 1 and ci
            tip = f"{s['label']} — {label}: {percent(value)}" + (f" ({n_runs} runs, CI {percent(ci[0])}–{percent(ci[1])})"
                                                             if spread else "")
            bars.append({"s": s, "x": x, "y": top + plot_h - h, "w": bar - 1, "h": max(h, 0.8), "tip": tip,
                         "whisker": (x + (bar - 1) / 2, y(ci[0]), y(ci[1])) if spread and ci[1] > ci[0] else None})
        drawn.append({"label": label, "x0": x0, "bars": bars, "lx": x0 + n_ag * bar / 2, "ly": top + plot_h + 12})
    return {"width": width, "height": top + plot_h + bottom, "left": left, "top": top, "plot_h": plot_h,
            "ticks": [(y(t), int(t * 100)) for t in (0, 0.25, 0.5, 0.75, 1.0)], "groups": drawn}


# -- figure 4: radar --------------------------------------------------------------------------------

def _wrap(text: str, width: int = 20) -> list[str]:
    lines, current = [], ""
    for word in text.split():
        if current and len(current) + 1 + len(word) > width:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}".strip()
    return lines + ([current] if current else [])


def radar_chart(series: list[tuple[str, str, list[float]]]) -> dict:
    """Figure 4's geometry: ``series`` = [(label, colour, 13 values in [0, 1])]; 13 axes in strategy-id order."""
    strategies = load_strategies()
    n = len(strategies)
    cx, cy, radius = 380, 318, 220
    point = lambda i, r: (cx + r * math.cos(-math.pi / 2 + 2 * math.pi * i / n),  # noqa: E731
                          cy + r * math.sin(-math.pi / 2 + 2 * math.pi * i / n))
    axes = []
    for i, s in enumerate(strategies):
        lx, ly = point(i, radius + 26)
        cos = math.cos(-math.pi / 2 + 2 * math.pi * i / n)
        lines = _wrap(f"{s.id}. {s.name}")
        axes.append({"end": point(i, radius), "lx": lx, "y0": ly - 6 * (len(lines) - 1), "lines": lines,
                     "anchor": "middle" if abs(cos) < 0.2 else ("start" if cos > 0 else "end")})
    return {"size": 760, "cx": cx, "cy": cy, "axes": axes,
            "levels": [([point(i, radius * level) for i in range(n)], int(level * 100))
                       for level in (0.25, 0.5, 0.75, 1.0)],
            "series": [(label, color, [(point(i, radius * max(0.0, min(1.0, v))), s, v)
                                       for i, (s, v) in enumerate(zip(strategies, values, strict=False))])
                       for label, color, values in series]}


# -- tables -----------------------------------------------------------------------------------------

def metric_rows(merged: dict) -> list[dict]:
    """Table 3 style: per task its ranking metrics (with the humans' best, median and how many), each
    agent's cell and the published agents' cells; the template draws one row per metric plus the percentile."""
    out = []
    for i, cid in enumerate(merged["tasks"]):
        cells = [a["tasks"][i] for a in merged["agents"]]
        humans = humans_of(cid)
        if humans is not None:
            side = {"metrics": [(m.key, m) for m in humans.metrics], "n_humans": humans.n,
                    "top": humans.top_percentile, "median": humans.median_percentile}
        else:  # a task this version does not know: the records' own metrics, no human columns
            keys: list[str] = next((c.get("ranking_metrics") for c in cells if c.get("ranking_metrics")), [])
            side = {"metrics": [(key, None) for key in keys], "top": None, "median": None,
                    "n_humans": next((c.get("n_humans") for c in cells if c.get("n_humans")), None)}
        out.append({"id": cid, "cells": cells, "refs": [r["tasks"][i] for r in merged.get("reference") or []],
                    **side})
    return out


def _metric_cell(cell: dict, key: str, metric: Any) -> dict:
    """One agent's value of one metric: not run, FAIL, or its mean over the graded runs and its place."""
    info = (cell.get("metrics") or {}).get(key)
    ok = cell["n_runs"] - cell["n_fail"]
    if cell.get("not_run") or cell["n_runs"] == 0:
        return {"kind": "notrun"}
    if not info or info.get("mean") is None or ok == 0:
        return {"kind": "fail"}
    value = number(info["mean"])
    return {"kind": "value", "value": value, "ok": ok, "pos": metric.position(value) if metric is not None else None,
            "graded": cell["n_runs"] > 1 or ok < cell["n_runs"]}


def _capability_series(merged: dict, caps: dict[str, dict],
                       colors: dict[str, str]) -> list[tuple[str, str, dict]]:
    """(label, colour, aggregate) per agent with capability data: the merged agents first, then
    agents known only from the capability documents (in the next palette colours)."""
    known = {str(a["agent"]) for a in merged["agents"]}
    shown = [(a["label"], colors[a["label"]], caps[str(a["agent"])])
             for a in merged["agents"] if str(a["agent"]) in caps]
    others = [(name, doc) for name, doc in caps.items() if name not in known]
    return shown + [(name, PALETTE[(len(colors) + j) % len(PALETTE)], doc)
                    for j, (name, doc) in enumerate(others)]


def stage_rows(merged: dict, stages: list[dict]) -> list[dict]:
    """Stages S1–S5 and cost per agent and task (means over runs), beside the mean percentile."""
    grouped: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for doc in stages:
        grouped[(str(doc.get("agent")), str(doc.get("task_id")))].append(doc)
    rows = []
    for a in merged["agents"]:
        for i, cid in enumerate(merged["tasks"]):
            docs = grouped.get((str(a["agent"]), cid))
            if docs:
                rows.append({"agent": a["label"], "id": cid, "percentile": a["tasks"][i]["mean_percentile"],
                             "scores": [mean_of([r["score"] for d in docs for r in d["stages"] if r["id"] == sid])
                                        for sid in STAGE_IDS],
                             "total": mean_of([d["total"] for d in docs]),
                             "usage": [mean_of([d["usage"][k] for d in docs if d.get("usage", {}).get(k) is not None])
                                       for k in ("turns", "total_tokens", "cost_usd", "wall_seconds")]})
    return rows


# -- page -------------------------------------------------------------------------------------------

def _leaks(reports: list[dict]) -> list[tuple[Any, str]]:
    """(agent, text) per result the leak rules flagged (:mod:`pytest_rexmle.scoring.leaks`), with its egress log."""
    return [(rep.get("agent"), leak_text(rec)) for rep in reports for rec in rep.get("tasks", [])
            if isinstance(rec, dict) and isinstance(rec.get("suspected_leak"), dict)]


def _capability(merged: dict, caps: dict[str, dict], colors: dict[str, str], capability: list[dict] | None) -> dict:
    """The radar's agents (those with any strategy shown), those without, the judge, the tables' agents."""
    shown = _capability_series(merged, caps, colors)
    series = [(label, c, [r["mean_score"] for r in doc["strategies"]]) for label, c, doc in shown]
    drawn = [item for item in series if any(v > 0 for v in item[2])]
    return {"shown": shown, "drawn": drawn, "legend": [(label, f"background:{c}") for label, c, _ in drawn], "radar": radar_chart(drawn) if drawn else None,
            "blank": [(label, doc) for label, _, doc in shown if not any(r["mean_score"] > 0 for r in doc["strategies"])],
            "judge": next((d.get("judge") for d in capability or [] if isinstance(d.get("judge"), dict)), None)}


def render_html(reports: list[dict], capability: list[dict] | None = None, reference: str | None = "paper") -> str:
    """The page. ``reference``: ``paper`` shows the paper's agents beside the user's, ``none`` does not; a
    merged document that already carries a ``reference`` list keeps it."""
    merged = _merged(reports)
    if "reference" not in merged:
        merged = with_reference(merged, reference)
    names = _names()
    colors = {a["label"]: PALETTE[i % len(PALETTE)] for i, a in enumerate(merged["agents"])}
    caps, stages = capability_by_agent(capability)
    sessions = _sessions_of(reports[0]) if reports[0].get("schema") == MERGED_SCHEMA else reports
    times = sorted(local_time(src.get("created")) for src in merged.get("sources", []) if src.get("created"))
    return _template().render(
        css=Markup(CSS), merged=merged, names=names, colors=colors,
        series_legend=[(s["label"], f"background:{s['color']}40;border:1px dashed {s['color']}" if s["published"]
                        else f"background:{s['color']}") for s in _series(merged, colors)],
        bars=bar_chart(merged, colors, names), metric_rows=metric_rows(merged),
        verification=[line.strip("*") for line in verification_lines(merged) if line], created=local_time(merged["created"]),
        started=times, kinds=sorted(set(merged.get("data_kinds") or [a.get("data_kind", "real") for a in merged["agents"]])), leaks=_leaks(reports), stage_ids=STAGE_IDS,
        tools=sorted({str(r.get("agent")) for r in reports if provider_tools_line(r)}), leak_docs=LEAK_DOCS,
        capability=_capability(merged, caps, colors, capability) if caps else None, strategies=load_strategies(),
        stages=stage_rows(merged, stages) if stages else None, compute=_compute(sessions), disclosures=_disclosures(sessions))


def _sessions_of(merged: dict) -> list[dict]:
    """A merged document's sessions as the compute and disclosure views read them (totals, no per-run rows)."""
    sessions = (merged.get("compute") or {}).get("sessions") or []
    hardware = sorted((merged.get("compute") or {}).get("hardware") or {})
    return [{"run_id": s.get("run_id"), "disclosure": s.get("disclosure"),
             "compute": {"hardware": hardware, "total": s.get("total")}} for s in sessions if isinstance(s, dict)]


def _compute(reports: list[dict]) -> dict | None:
    """What each run ran on and spent (the sessions' ``compute``), with each run's page; a merged report's
    sessions keep their totals only."""
    rows: list[dict] = []
    for doc in reports:
        runs = (doc.get("compute") or {}).get("runs") or {}
        several = isinstance(doc.get("agents"), dict)
        dirs = {run_label(rec.get("task_id"), several and rec.get("agent"), rec.get("repeat")): rec.get("run_dir")
                for rec in doc.get("tasks") or []}
        for label, rec in runs.items():
            run_dir = dirs.get(str(label)) or dirs.get(str(label).split("@", 1)[0])
            rows.append({"label": label, "gpu": gpu_text(rec), "rec": rec,
                         "page": "file://" + str(run_dir) + "/run.html" if run_dir else None})
        total = (doc.get("compute") or {}).get("total")
        if not runs and isinstance(total, dict):
            rows.append({"session": doc.get("run_id"), "rec": total})
    hardware = sorted({h for doc in reports for h in (doc.get("compute") or {}).get("hardware") or []})
    return {"rows": rows, "hardware": hardware} if rows else None


def compute_section(reports: list[dict]) -> list[str]:
    """The compute table alone (the page's ``Compute`` section)."""
    compute = _compute(reports)
    return [str(_template("report_compute.html.j2").module.compute_table(compute))] if compute else []  # type: ignore[attr-defined]


def _disclosures(reports: list[dict]) -> list[tuple[Any, list[tuple[str, Any]]]]:
    """Each session's disclosure: what its agents could reach and see."""
    out = []
    for doc in reports:
        d = doc.get("disclosure")
        if not isinstance(d, dict):
            continue
        hosts = ", ".join(host_text(h) for h in d.get("hosts_asked") or []) or "none"
        out.append((doc.get("run_id"), [
            ("Network", d.get("network")), ("Egress allow-list", ", ".join(d.get("egress_allow") or []) or "-"),
            ("Hosts the agents asked for", hosts + (" (an agent flooded the log; aggregated)"
                                                    if d.get("hosts_flooded") else "")),
            ("Answers", d.get("answers")), ("Validation", d.get("validation")), ("Data", d.get("data")),
            ("Budget per run", d.get("budget") or "none"),
            ("Suspected leaks", ", ".join(d.get("suspected_leaks") or []) or "none"),
            ("Unsafe options", "; ".join(d.get("unsafe") or []) or "none")]))
    return out


# -- the template -----------------------------------------------------------------------------------

@cache
def _template(name: str = "report.html.j2") -> Template:
    env = environment()
    env.filters.update(pct=percent, num=fmt_number, f1=lambda v: f"{v:.1f}", f0=lambda v: f"{v:.0f}", place=place,
                       trust=trust_mark)
    env.globals.update(number=number, metric_cell=_metric_cell)
    return env.get_template(name)
