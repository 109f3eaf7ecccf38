"""A self-contained HTML report with the paper's views (inline SVG and CSS, no external resources).

Views, in order:

1. Summary — agents ranked by score (mean over runs, standard error, bootstrap interval).
2. Figure 1 style — percentile per challenge per agent, grouped bars, interval whiskers for repeated runs.
3. Table 3 style — each ranking metric: the human best (``Leaderboard.best``) next to each agent's mean
   value over its graded runs, and the mean percentile (beside the top human team's percentile).
4. Figure 4 style — capability radar over the 13 winning strategies, one polygon per agent.
5. Capability tables — mean per strategy (with sum / runs and the fragment-weighted mean) and the
   per-challenge 0/1 table of each agent.
6. Workflow stages S1–S5 and cost (turns, tokens, money, wall time), next to the percentile.

Inputs: session reports (``rexmle-report/2``, merged here with :func:`merge_reports`) or one merged
document; optional capability documents — session ``rexmle-capability.json`` files, per-agent aggregates
or per-run ``capability.json`` files — matched to agents by agent name (several sessions of one agent
are pooled run by run); their ``stages`` lists feed view 6.

The file opens offline: no scripts, fonts, images or style sheets are fetched, every text is escaped.
With a reference (default ``paper``, see :mod:`.reference`) the paper's published agents appear beside
the user's in the summary, the chart (pale, dashed) and the metric table; a legend explains the percentile,
the positions and the human columns.
"""

from __future__ import annotations

import html
import math
from collections import defaultdict
from typing import Any

from ..capability.schema import AGENT_SCHEMA, SESSION_SCHEMA, aggregate
from ..capability.strategies import load_strategies
from ..documents import number
from ..task import registry
from .archive import local_time
from .humans import humans_of, place
from .merge import SCHEMA as MERGED_SCHEMA
from .merge import mean_of, merge_reports, trust_mark, verification_lines
from .reference import with_reference
from .render import LEAK_DOCS, fmt_number, leak_text, provider_tools_line

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


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100.0 * value:.1f}%"


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


def bar_chart(merged: dict, colors: dict[str, str], names: dict[str, str]) -> str:
    series = _series(merged, colors)
    ids = merged["tasks"]
    groups = [(names.get(cid, cid), [s["cells"][i] for s in series]) for i, cid in enumerate(ids)]
    groups.append(("Score (mean)", [s["score"] for s in series]))
    n_ag = max(1, len(series))
    # ~1300 px for 20 challenges however many series (the published agents included): fits a wide page
    bar = max(3.0, min(34.0, (1240.0 / len(groups) - 14.0) / n_ag))
    group_w = n_ag * bar + 14
    left, top, plot_h, bottom = 56, 16, 300, 130
    width = int(left + group_w * len(groups) + 24)
    height = top + plot_h + bottom
    y = lambda v: top + plot_h * (1.0 - max(0.0, min(1.0, v)))  # noqa: E731
    parts = [f'<svg class="fig1" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="Percentile per challenge per agent">']
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<line x1="{left}" x2="{width - 12}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#d0d7de" '
                     f'stroke-width="1"/><text x="{left - 6}" y="{y(tick) + 4:.1f}" font-size="11" text-anchor="end" '
                     f'fill="#57606a">{int(tick * 100)}%</text>')
    parts.append(f'<text x="14" y="{top + plot_h / 2:.0f}" font-size="12" fill="#1b1f24" text-anchor="middle" '
                 f'transform="rotate(-90 14 {top + plot_h / 2:.0f})">percentile</text>')
    for g, (label, values) in enumerate(groups):
        x0 = left + g * group_w + 7
        if g == len(groups) - 1:
            parts.append(f'<line x1="{x0 - 7:.1f}" x2="{x0 - 7:.1f}" y1="{top}" y2="{top + plot_h}" stroke="#8c959f" '
                         f'stroke-dasharray="4 3"/>')
        for k, (value, ci, n_runs) in enumerate(values):
            s = series[k]
            x = x0 + k * bar
            if value is None:  # not run by this agent (or not published): a mark, never a zero bar
                what = "not published" if s["published"] else "not run"
                parts.append(f'<text class="notrun" x="{x + (bar - 1) / 2:.1f}" y="{top + plot_h - 3:.1f}" '
                             f'font-size="9" text-anchor="middle" fill="#8c959f">×<title>{_e(s["label"])} — '
                             f'{_e(label)}: {what}</title></text>')
                continue
            h = max(0.0, plot_h * max(0.0, min(1.0, value)))
            tip = f"{s['label']} — {label}: {_pct(value)}" + (f" ({n_runs} runs, CI {_pct(ci[0])}–{_pct(ci[1])})"
                                                             if n_runs > 1 and ci else "")
            extra = (f' fill-opacity="0.25" stroke="{s["color"]}" stroke-width="1.2" stroke-dasharray="3 2" '
                     f'class="published"') if s["published"] else ""
            parts.append(f'<rect x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{bar - 1:.1f}" height="{max(h, 0.8):.1f}" '
                         f'fill="{s["color"]}"{extra}><title>{_e(tip)}</title></rect>')
            if n_runs > 1 and ci and ci[1] > ci[0]:
                cx = x + (bar - 1) / 2
                parts.append(f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{y(ci[0]):.1f}" y2="{y(ci[1]):.1f}" '
                             f'stroke="#1b1f24" stroke-width="1.2"/>')
        lx = x0 + n_ag * bar / 2
        ly = top + plot_h + 12
        parts.append(f'<text x="{lx:.1f}" y="{ly}" font-size="11" text-anchor="end" fill="#1b1f24" '
                     f'transform="rotate(-45 {lx:.1f} {ly})">{_e(label)}</text>')
    parts.append(f'<line x1="{left}" x2="{width - 12}" y1="{top + plot_h}" y2="{top + plot_h}" stroke="#57606a"/>')
    parts.append("</svg>")
    return "".join(parts)


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


def radar_chart(series: list[tuple[str, str, list[float]]]) -> str:
    """``series`` = [(label, colour, 13 values in [0, 1])]; 13 axes in strategy-id order."""
    strategies = load_strategies()
    n = len(strategies)
    size, cx, cy, radius = 760, 380, 318, 220
    point = lambda i, r: (cx + r * math.cos(-math.pi / 2 + 2 * math.pi * i / n),  # noqa: E731
                          cy + r * math.sin(-math.pi / 2 + 2 * math.pi * i / n))
    parts = [f'<svg class="radar" width="{size}" height="{size - 120}" '
             f'viewBox="0 0 {size} {size - 120}" role="img" aria-label="Capability radar over 13 strategies">']
    for level in (0.25, 0.5, 0.75, 1.0):
        pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in (point(i, radius * level) for i in range(n)))
        parts.append(f'<polygon points="{pts}" fill="none" stroke="#d0d7de" stroke-width="1"/>')
        x, y = point(0, radius * level)
        parts.append(f'<text x="{x + 4:.1f}" y="{y - 2:.1f}" font-size="10" fill="#8c959f">{int(level * 100)}%</text>')
    for i, s in enumerate(strategies):
        x, y = point(i, radius)
        parts.append(f'<line x1="{cx}" y1="{cy}" x2="{x:.1f}" y2="{y:.1f}" stroke="#d0d7de"/>')
        lx, ly = point(i, radius + 26)
        cos = math.cos(-math.pi / 2 + 2 * math.pi * i / n)
        anchor = "middle" if abs(cos) < 0.2 else ("start" if cos > 0 else "end")
        lines = _wrap(f"{s.id}. {s.name}")
        y0 = ly - 6 * (len(lines) - 1)
        spans = "".join(f'<tspan x="{lx:.1f}" y="{y0 + 12 * j:.1f}">{_e(t)}</tspan>' for j, t in enumerate(lines))
        parts.append(f'<text font-size="11" text-anchor="{anchor}" fill="#1b1f24">{spans}</text>')
    for label, color, values in series:
        pts = [point(i, radius * max(0.0, min(1.0, v))) for i, v in enumerate(values)]
        parts.append(f'<polygon class="agent" points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in pts)}" fill="{color}" '
                     f'fill-opacity="0.14" stroke="{color}" stroke-width="2"><title>{_e(label)}</title></polygon>')
        for (x, y), s, v in zip(pts, strategies, values, strict=False):
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"><title>{_e(label)} — '
                         f'{_e(s.name)}: {_pct(v)}</title></circle>')
    parts.append("</svg>")
    return "".join(parts)


# -- tables -----------------------------------------------------------------------------------------

def _legend(items: list[tuple[str, str]]) -> str:
    """A line of colour swatches, one per (label, CSS style of its swatch)."""
    return "<p>" + " &nbsp; ".join(f'<span class="swatch" style="{style}"></span>{_e(label)}'
                                   for label, style in items) + "</p>"


def _badge(kind: str) -> str:
    return f"<span class='badge {_e(kind)}'>{_e(kind)}</span>"


def summary_table(merged: dict, colors: dict[str, str]) -> str:
    conf = merged["bootstrap"]["confidence"]
    n_all = len(merged["tasks"])
    rows = ["<div class='scroll'><table class='summary wide'><tr><th>Rank</th><th>Agent</th><th>Data</th><th>Runs</th>"
            "<th>Challenges run</th><th>Score (mean)</th><th>SEM</th>"
            f"<th>{conf:.0%} CI</th><th>FAIL per run</th><th>Run scores</th></tr>"]
    for a in merged["agents"]:
        fails = ", ".join(str(f) for f in a["n_fail"])
        runs = ", ".join(_pct(s) for s in a["scores"])
        ran = n_all - len(a.get("not_run") or [])
        not_run = (f" <small>({_e(len(a['not_run']))} not run, left out of the score)</small>"
                   if a.get("not_run") else "")
        rows.append(f'<tr class="agent"><td class="num">{a["rank"]}</td><td><span class="swatch" '
                    f'style="background:{colors[a["label"]]}"></span>{_e(a["label"])}<b>{_e(trust_mark(a))}</b></td>'
                    f'<td class="data">{_badge(a.get("data_kind", "real"))}</td><td class="num">{a["n_runs"]}</td>'
                    f'<td class="num">{ran} of {n_all}{not_run}</td><td class="num"><b>{_pct(a["mean"])}</b></td>'
                    f'<td class="num">{_pct(a["sem"])}</td><td class="num">{_pct(a["ci"][0])} – {_pct(a["ci"][1])}</td>'
                    f'<td class="num">{_e(fails)}</td><td class="num">{_e(runs)}</td></tr>')
    for ref in merged.get("reference") or []:
        table3 = ref.get("table3_score")
        whole = f" <small>(Table 3, all 20: {100 * table3:.2f}%)</small>" if table3 is not None else ""
        rows.append(f'<tr class="published"><td class="num">–</td><td>{_e(ref["label"])}</td>'
                    f'<td class="data">{_badge("published")}</td><td class="num">paper <small>({_e(ref.get("llm"))}, '
                    f'{_e(ref.get("budget_hours"))} h)</small></td>'
                    f'<td class="num">{n_all} of {n_all}</td><td class="num"><b>{_pct(ref["mean"])}</b>{whole}</td>'
                    + '<td class="num">-</td>' * 4 + '</tr>')
    rows.append("</table></div>")
    return "".join(rows)


def _value_cell(value: float | None, pos, n_humans, suffix: str = "") -> str:
    where = f"<br><small class='pos'>{_e(place(pos, n_humans))}</small>" if pos is not None else ""
    return f"<td class='num'>{_e(fmt_number(value))}{suffix}{where}</td>"


def metric_table(merged: dict, names: dict[str, str]) -> str:
    """Table 3 style: per ranking metric the human best and median, each agent's mean value with its
    position among the humans, the published agents' values, and the mean percentile per challenge."""
    agents = merged["agents"]
    refs = merged.get("reference") or []
    head = "".join(f"<th>{_e(a['label'])}</th>" for a in agents)
    head += "".join(f"<th class='published'>{_e(r['label'])}</th>" for r in refs)
    rows = [f"<div class='scroll'><table class='table3 wide'><tr><th>Challenge</th><th>N</th><th>Metric</th>"
            f"<th>Human best</th><th>Human median</th>{head}</tr>"]
    for i, cid in enumerate(merged["tasks"]):
        cells = [a["tasks"][i] for a in agents]
        ref_cells = [r["tasks"][i] for r in refs]
        humans = humans_of(cid)
        if humans is not None:
            metrics = [(m.key, m) for m in humans.metrics]
            n_humans, top, median = humans.n, humans.top_percentile, humans.median_percentile
        else:
            keys = next((c.get("ranking_metrics") for c in cells if c.get("ranking_metrics")), [])
            metrics = [(key, None) for key in keys]
            n_humans = next((c.get("n_humans") for c in cells if c.get("n_humans")), None)
            top = median = None
        span = len(metrics) + 1
        n_text = _e(n_humans if n_humans is not None else "-")
        for j, (key, metric) in enumerate(metrics):
            arrow = "" if metric is None else (" ↑" if metric.higher_is_better else " ↓")
            row = (f'<tr><td rowspan="{span}"><b>{_e(names.get(cid, cid))}</b><br><small>{_e(cid)}</small></td>'
                   f'<td rowspan="{span}" class="num">{n_text}</td>') if j == 0 else "<tr>"
            row += (f"<td>{_e(key)}{arrow}</td><td class='num'>{_e(fmt_number(metric.best if metric else None))}</td>"
                    f"<td class='num'>{_e(fmt_number(metric.median if metric else None))}</td>")
            for c in cells:
                info = (c.get("metrics") or {}).get(key)
                ok = c["n_runs"] - c["n_fail"]
                if c.get("not_run") or c["n_runs"] == 0:
                    row += "<td class='notrun'>not run</td>"
                elif not info or info.get("mean") is None or ok == 0:
                    row += "<td class='fail'>FAIL</td>"
                else:
                    value = number(info["mean"])
                    suffix = f" <small>({ok}/{c['n_runs']} graded)</small>" if c["n_runs"] > 1 or ok < c["n_runs"] else ""
                    pos = metric.position(value) if metric is not None else None
                    row += _value_cell(value, pos, n_humans, suffix)
            for c in ref_cells:
                info = c["metrics"].get(key)
                if c["mean_percentile"] is None:
                    row += "<td class='notrun'>not published</td>"
                elif c["status"] != "ok" or info is None:
                    row += "<td class='fail'>FAIL</td>" if c["status"] != "ok" else "<td class='notrun'>-</td>"
                else:
                    row += _value_cell(number(info["mean"]), c["positions"].get(key), n_humans)
            rows.append(row + "</tr>")
        pct_row = ("<tr>" if metrics
                   else f'<tr><td><b>{_e(names.get(cid, cid))}</b></td><td class="num">{n_text}</td>')
        pct_row += (f"<td><i>percentile</i></td><td class='num' title='the winning team'>{_pct(top)}</td>"
                    f"<td class='num' title='the median team'>{_pct(median)}</td>")
        for c in cells:
            pct_row += ("<td class='notrun'>not run</td>" if c["mean_percentile"] is None
                        else f"<td class='num'><b>{_pct(c['mean_percentile'])}</b></td>")
        for c in ref_cells:
            pct_row += ("<td class='notrun'>not published</td>" if c["mean_percentile"] is None
                        else f"<td class='num'>{'FAIL ' if c['status'] != 'ok' else ''}{_pct(c['mean_percentile'])}</td>")
        rows.append(pct_row + "</tr>")
    rows.append("</table></div>")
    return "".join(rows)


LEGEND_HTML = (
    "<dl class='legend'>"
    "<dt>Percentile</dt><dd>1 − (mean position − 1) / N over the challenge's ranking metrics, N the number of "
    "human teams: 100 % = at least as good as every team on every metric, 0 % = behind all of them (a FAIL counts "
    "0). The score is its mean over the challenges.</dd>"
    "<dt>Position (“4th of 11”)</dt><dd>Where the value would place among the N human teams plus the agent; "
    "ties share the better place.</dd>"
    "<dt>Human best / Human median</dt><dd>The best value any team reached on that metric (not always the same "
    "team), and the median team's value. On the percentile row: the winning team's and the median team's "
    "percentile.</dd>"
    "<dt>published</dt><dd>The ReX-MLE paper's own results (GPT-5, 24 h; appendix Tables S1–S20, Table 3), "
    "transcribed, not re-graded here; drawn pale with a dashed outline. <code>rexmle report --reference none</code> leaves them "
    "out.</dd>"
    "<dt>not run</dt><dd>The agent never ran that challenge in the merged sessions: shown, and left out of its "
    "score.</dd></dl>")


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


def capability_tables(shown: list[tuple[str, str, dict]]) -> str:
    head = "".join(f"<th>{_e(label)}<br><small>{doc['n_runs']} run(s)</small></th>" for label, _, doc in shown)
    rows = [f"<table class='capability'><tr><th>#</th><th>Strategy</th>{head}</tr>"]
    for s in load_strategies():
        row = f"<tr><td class='num'>{s.id}</td><td>{_e(s.name)}</td>"
        for _, _, doc in shown:
            item = doc["strategies"][s.id - 1]
            frag = item.get("fragment_mean")
            extra = f"; fragments {_pct(frag)}" if frag is not None and frag != item["mean_score"] else ""
            row += (f"<td class='num'>{_pct(item['mean_score'])} <small>({item['sum_score']}/{item['n_runs']}"
                    f"{_e(extra)})</small></td>")
        rows.append(row + "</tr>")
    rows.append("</table>")
    for label, _, doc in shown:
        rows.append(f"<h3>{_e(label)}: per-challenge table (1 = strategy shown in the run)</h3>")
        ids = "".join(f"<th title='{_e(s.name)}'>{s.id}</th>" for s in load_strategies())
        rows.append(f"<div class='scroll'><table class='runs'><tr><th>Challenge</th><th>Seed</th>{ids}<th>Flags</th></tr>")
        for run in doc.get("runs", []):
            cells = "".join("<td class='hit'>1</td>" if v else "<td class='miss'>0</td>" for v in run["scores"])
            rows.append(f"<tr><td>{_e(run.get('task_id'))}</td><td class='num'>{_e(run.get('seed') if run.get('seed') is not None else '-')}"
                        f"</td>{cells}<td>{_e(', '.join(run.get('flags') or []))}</td></tr>")
        rows.append("</table></div>")
    return "".join(rows)


def stage_table(merged: dict, stages: list[dict]) -> str:
    """Stages S1–S5 and cost per agent and challenge (means over runs), beside the mean percentile."""
    grouped: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for doc in stages:
        grouped[(str(doc.get("agent")), str(doc.get("task_id")))].append(doc)
    rows = ["<div class='scroll'><table class='stages wide'><tr><th>Agent</th><th>Challenge</th><th>Percentile</th>"
            + "".join(f"<th>{sid}</th>" for sid in STAGE_IDS)
            + "<th>Stage total</th><th>Turns</th><th>Tokens</th><th>Cost (USD)</th><th>Wall time (s)</th></tr>"]
    for a in merged["agents"]:
        for i, cid in enumerate(merged["tasks"]):
            docs = grouped.get((str(a["agent"]), cid))
            if not docs:
                continue
            scores = [mean_of([r["score"] for d in docs for r in d["stages"] if r["id"] == sid])
                      for sid in STAGE_IDS]
            usage = [mean_of([d["usage"][k] for d in docs if d.get("usage", {}).get(k) is not None])
                     for k in ("turns", "total_tokens", "cost_usd", "wall_seconds")]
            cells = "".join(f"<td class='num'>{_pct(v)}</td>" for v in scores)
            cost = "".join(f"<td class='num'>{_e(fmt_number(v))}</td>" for v in usage)
            rows.append(f"<tr><td>{_e(a['label'])}</td><td>{_e(cid)}</td>"
                        f"<td class='num'><b>{_pct(a['tasks'][i]['mean_percentile'])}</b></td>{cells}"
                        f"<td class='num'>{_pct(mean_of([d['total'] for d in docs]))}</td>{cost}</tr>")
    rows.append("</table></div>")
    return "".join(rows)


# -- page -------------------------------------------------------------------------------------------

def _leak_notes(reports: list[dict]) -> str:
    """One line per result the leak rules flagged (:mod:`pytest_rexmle.leaks`), with its egress log."""
    notes = [f"<li>{_e(rep.get('agent'))} — {_e(leak_text(rec))}</li>"
             for rep in reports for rec in rep.get("tasks", [])
             if isinstance(rec, dict) and isinstance(rec.get("suspected_leak"), dict)]
    return f"<p class='leak'><b>Suspected leak</b> (what it means: {_e(LEAK_DOCS)}):</p><ul>{''.join(notes)}</ul>" if notes else ""


def _tools_banner(reports: list[dict]) -> str:
    """Sessions that let the provider fetch or act for the agent (--rexmle-allow-provider-tools) say so."""
    allowed = [r for r in reports if provider_tools_line(r)]
    if not allowed:
        return ""
    who = ", ".join(sorted({str(r.get("agent")) for r in allowed}))
    return (f"<p class='leak'><b>Provider tools allowed</b> for {_e(who)} (--rexmle-allow-provider-tools): model "
            "calls could use provider-side web search, URL fetch, remote MCP and code containers, outside the "
            "egress policy; each run's use is in run.json's provider_tools.</p>")


def _data_banner(merged: dict) -> str:
    """A page graded on synthetic twins says so before any number."""
    kinds = set(merged.get("data_kinds") or [a.get("data_kind", "real") for a in merged["agents"]])
    if "synthetic" not in kinds:
        return "<p class='meta'>Data: real (the project's split of the public training data).</p>"
    which = "All sessions were" if kinds == {"synthetic"} else "Some sessions (marked synthetic) were"
    return (f"<p class='synthetic'><b>Synthetic data.</b> {which} graded on synthetic twins generated by the "
            "harness, not on the challenges' images: the percentiles check the pipeline end to end and are not "
            "comparable with the human teams or the published agents.</p>")


def render_html(reports: list[dict], capability: list[dict] | None = None, reference: str | None = "paper") -> str:
    """The page. ``reference``: ``paper`` shows the paper's agents beside the user's, ``none`` does not; a
    merged document that already carries a ``reference`` list keeps it."""
    merged = _merged(reports)
    if "reference" not in merged:
        merged = with_reference(merged, reference)
    names = _names()
    colors = {a["label"]: PALETTE[i % len(PALETTE)] for i, a in enumerate(merged["agents"])}
    caps, stages = capability_by_agent(capability)
    conf = merged["bootstrap"]
    body = [f"<p class='unsafe'>UNSAFE: a session of this report weakened the sandbox: {_e('; '.join(merged['unsafe']))}</p>"
            if merged.get("unsafe") else ""]
    body += [f"<p class='unsafe'>Warning: {_e(w)}</p>" for w in merged.get("warnings") or []]
    body += [f"<p class='unsafe'>{_e(line.strip('*'))}</p>" for line in verification_lines(merged) if line]
    body += [f"<p class='unsafe'>REFUSED (left out): session {_e(r.get('run_id'))} of {_e(r.get('agent'))}: "
             f"{_e(r.get('why'))}</p>" for r in merged.get("refused") or []]
    body += [f"<h1>ReX-MLE report</h1><p class='meta'>{len(merged['agents'])} agent(s), {len(merged['sources'])} "
            f"session(s), {len(merged['tasks'])} task(s){' — partial challenge set' if merged['partial'] else ''}. "
            f"Generated {_e(local_time(merged['created']))}{_sessions_started(merged)}. Score = mean percentile over the challenges, FAIL = 0; intervals: "
            f"{conf['confidence']:.0%} bootstrap over runs ({conf['resamples']} resamples, seed {conf['seed']}).</p>",
            _data_banner(merged), _tools_banner(reports),
            "<h2>Summary</h2>", summary_table(merged, colors), _leak_notes(reports),
            "<h2>Percentile per challenge (Figure 1 style)</h2>",
            _legend([(s["label"], f"background:{s['color']}40;border:1px dashed {s['color']}"
                      if s["published"] else f"background:{s['color']}")
                     for s in _series(merged, colors)]),
            f"<figure><div class='scroll'>{bar_chart(merged, colors, names)}</div><figcaption>Mean percentile per challenge over each agent's "
            f"runs (whiskers: bootstrap interval when an agent has several runs; × = not run); pale, dashed: published "
            f"results of the paper's agents; last group: overall score over the challenges shown."
            f"</figcaption></figure>",
            "<h2>Metric values against the humans (Table 3 style)</h2>", metric_table(merged, names),
            LEGEND_HTML]
    body.append("<h2>Capability over the 13 winning strategies (Figure 4 style)</h2>")
    if not caps:
        body.append("<p class='nocap'>No capability data: the runs were not judged "
                    "(<code>--rexmle-judge=none</code>), or no run left logs to judge. Nothing to draw.</p>")
    else:
        shown = _capability_series(merged, caps, colors)
        judge = next((d.get("judge") for d in capability or [] if isinstance(d.get("judge"), dict)), None)
        judge_text = f" Judge: {_e(judge.get('name'))} ({_e(judge.get('model'))}, prompt {_e(judge.get('prompt_version'))})." if judge else ""
        series = [(label, c, [r["mean_score"] for r in doc["strategies"]]) for label, c, doc in shown]
        drawn = [item for item in series if any(v > 0 for v in item[2])]
        for label, _, doc in shown:
            if any(r["mean_score"] > 0 for r in doc["strategies"]):
                continue
            body.append(f"<p class='nocap'><b>{_e(label)}</b> showed no capability: in its "
                        f"{_e(doc['n_runs'])} judged run(s) the judge found none of the 13 winning strategies "
                        f"executed in the logs and code, so it has no polygon on the radar.{judge_text}</p>")
        if drawn:
            body += [_legend([(label, f"background:{c}") for label, c, _ in drawn]),
                     f"<figure>{radar_chart(drawn)}<figcaption>Fraction of each agent's runs whose log shows the "
                     f"strategy executed.{judge_text}</figcaption></figure>"]
        body += ["<h2>Capability tables</h2>", capability_tables(shown)]
    if stages:
        body += ["<h2>Workflow stages and cost</h2>",
                 "<p class='note'>S1 plan 25 %, S2 setup 15 %, S3 validate 35 % (judged), S4 inference 15 %, "
                 "S5 submit 10 % (from the submission). Reported beside the percentile, never part of it.</p>",
                 stage_table(merged, stages)]
    sessions = _sessions_of(reports[0]) if reports[0].get("schema") == MERGED_SCHEMA else reports
    body += compute_section(sessions) + disclosure_section(sessions)
    body.append(f"<p class='note'>{_e(merged['note'])}</p>")
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>ReX-MLE report</title>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'><style>{CSS}</style></head><body><main>"
            + "".join(body) + "</main></body></html>\n")


def _sessions_of(merged: dict) -> list[dict]:
    """A merged document's sessions as the compute and disclosure views read them (totals, no per-run rows)."""
    sessions = (merged.get("compute") or {}).get("sessions") or []
    hardware = sorted((merged.get("compute") or {}).get("hardware") or {})
    return [{"run_id": s.get("run_id"), "disclosure": s.get("disclosure"),
             "compute": {"hardware": hardware, "total": s.get("total")}} for s in sessions if isinstance(s, dict)]


def _run_label(doc: dict, rec: dict) -> str:
    """A record's name in the session's compute table (``isles22``, ``isles22@codex``, ``isles22-r2``), so
    each repeat's row links to its own run's page."""
    agent = f"@{rec.get('agent')}" if isinstance(doc.get("agents"), dict) and rec.get("agent") else ""
    return f"{rec.get('task_id')}{agent}" + (f"-r{rec['repeat']}" if rec.get("repeat") else "")


def compute_section(reports: list[dict]) -> list[str]:
    """What each run ran on and spent (the sessions' ``compute``), with a link to each run's page."""
    rows = []
    for doc in reports:
        runs = (doc.get("compute") or {}).get("runs") or {}
        dirs = {_run_label(doc, rec): rec.get("run_dir") for rec in doc.get("tasks") or []}
        for label, rec in runs.items():
            gpu = f"{rec.get('gpu_count')}× {rec.get('gpu_model')}" if rec.get("gpu_model") else (
                "none" if not rec.get("gpu_count") else f"{rec.get('gpu_count')} (model unknown)")
            run_dir = dirs.get(str(label)) or dirs.get(str(label).split("@", 1)[0])
            link = f"<a href='{_e('file://' + str(run_dir) + '/run.html')}'>run page</a>" if run_dir else ""
            cost = rec.get("cost_usd")
            rows.append(f"<tr><td>{_e(label)}</td><td>{_e(gpu)}</td><td class='num'>{_e(rec.get('cpu_cores'))}</td>"
                        f"<td class='num'>{_e(fmt_number(rec.get('wall_seconds')))} s</td>"
                        f"<td class='num'>{_e(fmt_number(rec.get('gpu_hours')))}</td>"
                        f"<td class='num'>{_e(fmt_number(rec.get('tokens')))}</td>"
                        f"<td class='num'>{'unknown' if cost is None else _e(fmt_number(cost))}</td>"
                        f"<td>{_e(rec.get('runtime'))} ({_e(rec.get('mechanism'))})</td><td>{link}</td></tr>")
        total = (doc.get("compute") or {}).get("total")
        if not runs and isinstance(total, dict):  # a merged report keeps each session's totals
            rows.append(f"<tr><td>session {_e(doc.get('run_id'))}</td><td></td><td></td>"
                        f"<td class='num'>{_e(fmt_number(total.get('wall_seconds')))} s</td>"
                        f"<td class='num'>{_e(fmt_number(total.get('gpu_hours')))}</td>"
                        f"<td class='num'>{_e(fmt_number(total.get('tokens')))}</td>"
                        f"<td class='num'>{_e(fmt_number(total.get('cost_usd')))}</td><td></td><td></td></tr>")
    if not rows:
        return []
    hardware = sorted({h for doc in reports for h in (doc.get("compute") or {}).get("hardware") or []})
    return ["<h2>Compute</h2><table><tr><th>run</th><th>GPU</th><th>CPU cores</th><th>wall time</th>"
            "<th>GPU-hours</th><th>tokens</th><th>USD</th><th>runtime</th><th></th></tr>", *rows, "</table>",
            f"<p class='note'>Hardware: {_e('; '.join(hardware))}"
            f"{' — the runs ran on different hardware' if len(hardware) > 1 else ''}</p>"]


def disclosure_section(reports: list[dict]) -> list[str]:
    """Each session's disclosure: what its agents could reach and see."""
    out = []
    for doc in reports:
        d = doc.get("disclosure")
        if not isinstance(d, dict):
            continue
        hosts = ", ".join(f"{h.get('host')}:{h.get('port')} ({'allowed' if h.get('allowed') else 'refused'}, "
                          f"{h.get('count')}×)" for h in d.get("hosts_asked") or []) or "none"
        items = [("Network", d.get("network")), ("Egress allow-list", ", ".join(d.get("egress_allow") or []) or "-"),
                 ("Hosts the agents asked for", hosts + (" (an agent flooded the log; aggregated)"
                                                         if d.get("hosts_flooded") else "")),
                 ("Answers", d.get("answers")), ("Validation", d.get("validation")), ("Data", d.get("data")),
                 ("Budget per run", d.get("budget") or "none"),
                 ("Suspected leaks", ", ".join(d.get("suspected_leaks") or []) or "none"),
                 ("Unsafe options", "; ".join(d.get("unsafe") or []) or "none")]
        out.append(f"<h3>Session {_e(doc.get('run_id'))}</h3><table>"
                   + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in items) + "</table>")
    return ["<h2>Disclosure</h2>", *out] if out else []


def _sessions_started(merged: dict) -> str:
    """When the session(s) behind the page started, in this machine's local time."""
    times = sorted(local_time(src.get("created")) for src in merged.get("sources", []) if src.get("created"))
    if not times:
        return ""
    if len(times) == 1:
        return f" from the session of {_e(times[0])}"
    return f" from sessions between {_e(times[0])} and {_e(times[-1])}"

