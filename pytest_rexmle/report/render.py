"""Human-readable views of a session report: the terminal table and the paper's Table 3 layout."""

from __future__ import annotations

import math
import textwrap
from decimal import ROUND_HALF_UP, Decimal

from ..task import registry


def fmt_number(value) -> str:
    """One format for every metric, so columns compare at a glance: four significant digits, whole
    numbers from 1000 up (``16650``, not ``1.665e+04`` beside ``3175``), and an exponent only for
    magnitudes no fixed-point width can show (below 1e-4, from 1e9)."""
    if isinstance(value, str):
        return value
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    size = abs(value)
    if size == 0:
        return "0"
    if size < 1e-4 or size >= 1e9:
        return f"{value:.3e}"
    if size >= 1000:
        return f"{value:.0f}"
    return f"{value:.4g}"


def pct(value: float) -> str:
    """One decimal, halves rounded up as the paper prints them (0.5625 -> 56.3%, not banker's 56.2%)."""
    return f"{Decimal(repr(100.0 * value)).quantize(Decimal('0.1'), rounding=ROUND_HALF_UP)}%"


def score_line(doc: dict) -> str:
    """``ReX-MLE score: 13.5% over 20 challenge(s), 0 FAIL`` — harness ERRORs named apart when there are any."""
    label = "partial score" if doc["partial"] else "ReX-MLE score"
    n_error = doc.get("n_error", 0)
    errors = f", {n_error} ERROR (harness, not the agent)" if n_error else ""
    return f"{label}: {pct(doc['score'])} over {len(doc['selected'])} challenge(s), {doc['n_fail']} FAIL{errors}"


MIN_TEXT_WIDTH = 40
MAX_METRICS_WIDTH = 60


def terminal_lines(doc: dict, width: int = 100) -> list[str]:
    """The results table. Reasons are wrapped onto continuation lines, never cut: the end of a reason
    (the last stderr line of a crash) is usually the part that says what went wrong."""
    rows = [("task", "status", "key metrics", "percentile")]
    metric_cells = []
    for rec in doc["challenges"]:
        metrics = rec.get("metrics") or {}
        keys = rec["ranking_metrics"][:3]
        shown = ", ".join(f"{k}={fmt_number(metrics[k])}" for k in keys if k in metrics)
        if shown:
            metric_cells.append(shown)
        shown = shown or (rec.get("reason") or "")
        rows.append((rec["challenge_id"], rec["status"], " ".join(shown.split()), pct(rec["percentile"])))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    room = max(MIN_TEXT_WIDTH, width - widths[0] - widths[1] - widths[3] - 6)
    # metrics stay on one line (up to MAX_METRICS_WIDTH) even on a narrow terminal; reasons wrap
    metrics_need = min(MAX_METRICS_WIDTH, max((len(c) for c in metric_cells), default=0))
    widths[2] = min(widths[2], max(room, metrics_need))
    lines = []
    for row in rows:
        chunks = textwrap.wrap(row[2], widths[2], break_on_hyphens=False) or [""]
        for i, chunk in enumerate(chunks):
            cells = row if i == 0 else ("", "", "", "")
            text = [cells[0], cells[1], chunk, cells[3]]
            lines.append("  ".join(cell.ljust(w) for cell, w in zip(text, widths)).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines += leak_lines(doc)
    lines.append(score_line(doc))
    return lines


def leak_lines(doc: dict) -> list[str]:
    """``suspected leak: isles22: answers-reproduced (run.json egress: ...)``, one per flagged challenge."""
    from ..leaks import summary

    out = []
    for rec in doc["challenges"]:
        leak = rec.get("suspected_leak")
        if isinstance(leak, dict):
            egress = leak.get("egress")
            out.append(f"suspected leak: {rec['challenge_id']}: {summary(leak)}"
                       + (f" ({egress})" if egress else " (no egress log)"))
    return out


def markdown(doc: dict) -> str:
    reg = registry()
    out = [f"# ReX-MLE report — agent `{doc.get('agent')}`", "",
           f"Run `{doc['run_id']}`, created {doc['created']}. "
           f"{'Partial score' if doc['partial'] else 'ReX-MLE score'}: **{pct(doc['score'])}** over "
           f"{len(doc['selected'])} challenge(s); {doc['n_fail']} FAIL; {doc.get('n_error', 0)} harness ERROR.", "",
           "| Challenge | N | Status | Metrics (value / position) | Mean position | Percentile |",
           "|---|---|---|---|---|---|"]
    for rec in doc["challenges"]:
        name = reg.get(rec["challenge_id"]).paper_name
        metrics, positions = rec.get("metrics") or {}, rec.get("positions") or {}
        if rec["status"] == "ok":
            cells = "<br>".join(f"{k}: {fmt_number(metrics[k])} / {positions.get(k, '-')}" for k in rec["ranking_metrics"])
            mean = f"{rec['mean_position']:.2f}"
        else:
            kind = "ERROR" if rec["status"] == "error" else "FAIL"
            reason = " ".join((rec.get("reason") or "").replace("|", "/").split())
            cells, mean = f"{kind}: {reason}", "-"
        status = rec["status"] + (" ⚠ suspected leak" if rec.get("suspected_leak") else "")
        out.append(f"| {name} | {rec['n_humans']} | {status} | {cells} | {mean} | {pct(rec['percentile'])} |")
    out += ["", f"_{doc['note']}_", ""]
    return "\n".join(out)
