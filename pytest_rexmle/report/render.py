"""Human-readable views of a session report: the terminal table and the paper's Table 3 layout."""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

from ..task import registry


def fmt_number(value) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return "-"
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.4g}"


def pct(value: float) -> str:
    """One decimal, halves rounded up as the paper prints them (0.5625 -> 56.3%, not banker's 56.2%)."""
    return f"{Decimal(repr(100.0 * value)).quantize(Decimal('0.1'), rounding=ROUND_HALF_UP)}%"


def terminal_lines(doc: dict) -> list[str]:
    rows = [("task", "status", "key metrics", "percentile")]
    for rec in doc["challenges"]:
        metrics = rec.get("metrics") or {}
        keys = rec["ranking_metrics"][:3]
        shown = ", ".join(f"{k}={fmt_number(metrics[k])}" for k in keys if k in metrics) or (rec.get("reason") or "")[:60]
        rows.append((rec["challenge_id"], rec["status"], shown, pct(rec["percentile"])))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    label = "partial score" if doc["partial"] else "ReX-MLE score"
    lines.append(f"{label}: {pct(doc['score'])} over {len(doc['selected'])} challenge(s), {doc['n_fail']} FAIL")
    return lines


def markdown(doc: dict) -> str:
    reg = registry()
    out = [f"# ReX-MLE report — agent `{doc.get('agent')}`", "",
           f"Run `{doc['run_id']}`, created {doc['created']}. "
           f"{'Partial score' if doc['partial'] else 'ReX-MLE score'}: **{pct(doc['score'])}** over "
           f"{len(doc['selected'])} challenge(s); {doc['n_fail']} FAIL.", "",
           "| Challenge | N | Status | Metrics (value / position) | Mean position | Percentile |",
           "|---|---|---|---|---|---|"]
    for rec in doc["challenges"]:
        name = reg.get(rec["challenge_id"]).paper_name
        metrics, positions = rec.get("metrics") or {}, rec.get("positions") or {}
        if rec["status"] == "ok":
            cells = "<br>".join(f"{k}: {fmt_number(metrics[k])} / {positions.get(k, '-')}" for k in rec["ranking_metrics"])
            mean = f"{rec['mean_position']:.2f}"
        else:
            cells, mean = f"FAIL: {(rec.get('reason') or '').replace('|', '/')[:200]}", "-"
        out.append(f"| {name} | {rec['n_humans']} | {rec['status']} | {cells} | {mean} | {pct(rec['percentile'])} |")
    out += ["", f"_{doc['note']}_", ""]
    return "\n".join(out)
