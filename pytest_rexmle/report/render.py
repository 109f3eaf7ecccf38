"""Human-readable views of a session report: the terminal table and the paper's Table 3 layout."""

from __future__ import annotations

import textwrap
from decimal import ROUND_HALF_UP, Decimal

from ..agent_output import clean_text
from ..scoring.leaks import DOCS as LEAK_DOCS
from ..scoring.leaks import summary
from ..task import registry
from .disclosure import markdown_lines as disclosure_lines
from .disclosure import unsafe_line
from .humans import humans_of, place
from .mdtext import md_code, md_row, md_table, md_text
from .model import SYNTHETIC, data_kind
from .reference import paper_agents


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
    size = abs(value)  # NaN and the infinities fall through to a format that prints nan, inf, -inf
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


def percent(value) -> str:
    """The HTML pages' percent: one decimal as float formatting rounds it, ``-`` for no number."""
    return f"{100.0 * value:.1f}%" if isinstance(value, (int, float)) else "-"


def gpu_text(rec: dict) -> str:
    """A compute record's GPUs in words: ``2× H100``, ``none``, or ``2 (model unknown)``."""
    if rec.get("gpu_model"):
        return f"{rec.get('gpu_count')}× {rec.get('gpu_model')}"
    return "none" if not rec.get("gpu_count") else f"{rec.get('gpu_count')} (model unknown)"


def score_line(doc: dict) -> str:
    """``ReX-MLE score: 13.5% over 20 task(s), 0 FAIL`` — harness ERRORs and skipped tasks named
    apart when there are any, so the line agrees with pytest's own summary."""
    label = "partial score" if doc["partial"] else "ReX-MLE score"
    n_error = doc.get("n_error", 0)
    errors = f", {n_error} ERROR (harness, not the agent)" if n_error else ""
    n_skipped = len(doc.get("skipped") or ())
    skipped = f", {n_skipped} skipped (counted as 0)" if n_skipped else ""
    runs = f" ({doc['n_runs']} runs, {_each(doc)})" if (doc.get("repeats") or 1) > 1 else ""
    return (f"{label}: {pct(doc['score'])} over {len(doc['selected'])} task(s){runs}, {doc['n_fail']} FAIL"
            f"{errors}{skipped}{threshold_text(doc)}")


def threshold_text(doc: dict) -> str:
    """``, 1 below --rexmle-min-percentile 40.0% (failed in pytest)``, when any ok run was below it."""
    below = doc.get("n_below_min_percentile") or 0
    if not below:
        return ""
    return f", {below} below --rexmle-min-percentile {pct((doc.get('settings') or {}).get('min_percentile') or 0.0)} " \
           f"(failed in pytest)"


def _each(doc: dict) -> str:
    """``3 repeats each``, or ``up to 3 repeats each`` where a selection (``-k isles22-r2``) left some out."""
    full = doc["n_runs"] == doc["repeats"] * len(doc["selected"])
    return f"{'' if full else 'up to '}{doc['repeats']} repeats each"


def run_name(rec: dict) -> str:
    """``isles22``, or ``isles22 r2`` for a repeat of ``--rexmle-repeat N`` > 1."""
    return rec["task_id"] + (f" r{rec['repeat']}" if rec.get("repeat") else "")


def run_label(task: object, agent: object = None, repeat: object = None) -> str:
    """``isles22``, ``isles22@codex``, ``isles22-r2``: a run's name in the compute table, which the HTML
    report also uses to link each row to its own run's page."""
    return f"{task}" + (f"@{agent}" if agent else "") + (f"-r{repeat}" if repeat else "")


#: a repeat a selection left out (``-k isles22-r2``) is "not run" in the repeats table, 0 as ``rexmle report``
#: counts a session that did not select a task another one did; the session's score leaves it out
STATUS_WORDS = {"ok": "ok", "error": "ERROR", "not run": "not run"}


def counts_text(counts: dict[str, int]) -> str:
    """``2 ok, 1 ERROR``: how a task's repeats ended, every FAIL and ERROR named (never hidden)."""
    order = sorted(counts, key=lambda s: (s != "ok", s))
    return ", ".join(f"{counts[s]} {STATUS_WORDS.get(s, f'FAIL ({s})')}" for s in order)


def aggregate_lines(doc: dict) -> list[str]:
    """Per task (and agent), the mean percentile over its repeats with its SEM and interval, and how
    each repeat ended; then each agent's score per repeat, their mean, SEM and interval."""
    out = []
    for entry in doc.get("aggregate") or []:
        who = f"agent {entry['agent']}: " if doc.get("agents") else ""
        sem, ci = spread(entry)
        out.append(f"{who}over {entry['n_repeats']} repeats: score {pct(entry['mean'])} (SEM {sem}, 95% interval "
                   f"{ci})")
        for row in entry["tasks"]:
            sem, ci = spread(row)
            out.append(f"  {row['task_id']}: mean {pct(row['mean_percentile'])} over {row['n_runs']} runs "
                       f"(SEM {sem}, interval {ci}): {counts_text(row['counts'])}")
    return out


def spread(row: dict) -> tuple[str, str]:
    """An aggregate's (or one task's) standard error and interval as text, ``-`` where there is none."""
    sem = pct(row["sem"]) if row.get("sem") is not None else "-"
    ci = f"{pct(row['ci'][0])} – {pct(row['ci'][1])}" if row.get("ci") else "-"
    return sem, ci


def data_line(doc: dict) -> str:
    """What was graded, in one line: synthetic twins must never pass for real results."""
    if data_kind(doc) == SYNTHETIC:
        return "data: SYNTHETIC twins (generated by the harness): a pipeline check, not comparable with the humans"
    return "data: real (the project's split of the public training data)"


def provider_tools_line(doc: dict) -> str | None:
    """Said when the session let the provider fetch or act for the agent (``--rexmle-allow-provider-tools``):
    results then rest on what the provider reached outside the egress policy."""
    if not (doc.get("settings") or {}).get("allow_provider_tools"):
        return None
    return ("provider tools: ALLOWED (--rexmle-allow-provider-tools): model calls could use provider-side web "
            "search, URL fetch, remote MCP and code containers, outside the egress policy; each run's use is in "
            "run.json's provider_tools")


def shown_status(doc: dict, rec: dict) -> str:
    """The status a reader sees: ``skipped`` for a task pytest skipped, ``ok < min`` for an ok run below
    ``--rexmle-min-percentile`` (a failed item in pytest), else the record's own."""
    if rec["task_id"] in set(doc.get("skipped") or ()) and rec["status"] != "ok":  # an ok repeat stays ok
        return "skipped"
    return "ok < min" if rec.get("below_min_percentile") else rec["status"]


MIN_TEXT_WIDTH = 40
MAX_METRICS_WIDTH = 60


def terminal_lines(doc: dict, width: int = 100) -> list[str]:
    """The results table. Reasons are wrapped onto continuation lines, never cut: the end of a reason
    (the last stderr line of a crash) is usually the part that says what went wrong."""
    rows = [("task", "status", "key metrics", "percentile")]
    metric_cells = []
    for rec in doc["tasks"]:
        metrics = rec.get("metrics") or {}
        keys = rec["ranking_metrics"][:3]
        shown = ", ".join(f"{k}={fmt_number(metrics[k])}" for k in keys if k in metrics)
        if shown:
            metric_cells.append(shown)
        shown = shown or clean_text(rec.get("reason") or "")  # no escape sequence of the agent's reaches the tty
        rows.append((run_name(rec), shown_status(doc, rec), " ".join(shown.split()), pct(rec["percentile"])))
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
            lines.append("  ".join(cell.ljust(w) for cell, w in zip(text, widths, strict=True)).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines += leak_lines(doc)
    lines += aggregate_lines(doc)
    for line in filter(None, (data_line(doc), provider_tools_line(doc))):
        lines += textwrap.wrap(line, max(len(lines[1]), MIN_TEXT_WIDTH), subsequent_indent="  ")
    lines.append(score_line(doc))
    return lines


def leak_lines(doc: dict) -> list[str]:
    """``suspected leak: isles22: answers-reproduced (run.json egress: ...)``, one per flagged task, then
    where the rules are explained."""
    lines = [f"suspected leak: {leak_text(rec)}" for rec in doc["tasks"]
             if isinstance(rec.get("suspected_leak"), dict)]
    return lines + [f"  what a suspected leak means: {LEAK_DOCS}"] if lines else []


def leak_text(rec: dict) -> str:
    """``isles22: answers-reproduced (egress log)`` for a record the leak rules flagged."""
    leak = rec["suspected_leak"]
    return f"{rec['task_id']}: {summary(leak)} ({leak.get('egress') or 'no egress log'})"


LEGEND = ("Percentile = 1 − (mean position − 1) / N over the task's ranking metrics: 100 % = at least as "
          "good as every human team on every metric, 0 % = behind all of them. A position such as \"4th of 11\" "
          "is where the value would place among the N human teams plus the agent (ties share the better place). "
          "Human best is the best value any team reached on that metric (not always the same team), human median "
          "the median team's value. Rows marked published are the ReX-MLE paper's own results (GPT-5, 24 h), "
          "transcribed, not re-graded here.")


def _metric_cell(key: str, value, pos, humans) -> str:
    metric = next((m for m in humans.metrics if m.key == key), None) if humans else None
    text = f"{md_text(key)}: {fmt_number(value)} — {place(pos, humans.n if humans else None)}"
    if metric is not None:
        text += f" (human best {fmt_number(metric.best)}, median {fmt_number(metric.median)})"
    return text


def markdown(doc: dict, reference: str | None = "paper") -> str:
    """The session report in Markdown. Every agent-controlled text (reasons, file names, stderr tails) goes
    through :func:`md_text`, so no viewer renders HTML, a link, an image or emphasis the agent wrote."""
    reg = registry()
    refs = paper_agents(doc["selected"]) if reference == "paper" else []
    skipped = len(doc.get("skipped") or ())
    unsafe = unsafe_line(doc.get("disclosure"))
    out = [f"**{unsafe}**", ""] if unsafe else []
    out += [f"# ReX-MLE report — agent {md_code(doc.get('agent'))}", "",
           f"Run {md_code(doc['run_id'])}, created {md_code(doc['created'])}. {_data_sentence(doc)}"
           f"{' ' + TOOLS_SENTENCE if provider_tools_line(doc) else ''}", "",
           f"{'Partial score' if doc['partial'] else 'ReX-MLE score'}: **{pct(doc['score'])}** over "
           f"{len(doc['selected'])} task(s); {doc['n_fail']} FAIL; {doc.get('n_error', 0)} harness ERROR"
           f"{f'; {skipped} skipped (counted as 0)' if skipped else ''}{threshold_text(doc).replace(',', ';', 1)}"
           f"{_runs_text(doc)}.", ""]
    if refs:
        table3 = " · ".join(f"{r['label']} {100 * r['table3_score']:.2f}%" for r in refs)
        here = " · ".join(f"{r['label']} {pct(r['mean'])}" for r in refs if r["mean"] is not None)
        out += [f"Published reference (ReX-MLE paper, {refs[0]['llm']}, {refs[0]['budget_hours']} h): {table3} "
                f"(Table 3, over all 20 tasks); over the tasks of this session: {here}.", ""]
    out += md_table("Task", "N", "Status", "Metrics: value — position among the humans", "Mean position",
                    "Percentile", *(r["label"] for r in refs))
    for rec in doc["tasks"]:
        cid = rec["task_id"]
        name = reg.get(cid).paper_name
        humans = humans_of(cid)
        metrics, positions = rec.get("metrics") or {}, rec.get("positions") or {}
        status = shown_status(doc, rec)
        if rec["status"] == "ok":
            cells = "<br>".join(_metric_cell(k, metrics[k], positions.get(k), humans)
                                for k in rec["ranking_metrics"] if k in metrics)
            mean = f"{rec['mean_position']:.2f}"
        else:
            kind = {"error": "ERROR", "skipped": "SKIPPED"}.get(status, "FAIL")
            cells, mean = f"{kind}: {md_text(rec.get('reason') or '')}", "-"
        if rec.get("suspected_leak"):
            status += f" ⚠ suspected leak ({LEAK_DOCS})"
        if rec.get("repeat"):
            name = f"{name} (repeat {rec['repeat']})"
        published = [_reference_cell(next(c for c in ref["tasks"] if c["task_id"] == cid)) for ref in refs]
        out.append(md_row(md_text(name), rec["n_humans"], status, cells, mean, pct(rec["percentile"]), *published))
    out += repeat_lines(doc)
    out += ["", f"_{md_text(doc['note'])}_", "", LEGEND, ""]
    out += compute_lines(doc.get("compute"))
    out += disclosure_lines(doc.get("disclosure"))
    return "\n".join(out)


def repeat_lines(doc: dict) -> list[str]:
    """The repeats table (``--rexmle-repeat N`` > 1): each task's mean over its repeats, SEM, interval,
    and how every repeat ended (the rows above keep each run)."""
    if not doc.get("aggregate"):
        return []
    out = ["", "## Repeats", "", *md_table("Agent", "Task", "Runs", "Mean percentile", "SEM", "95% interval",
                                           "Outcomes")]
    for entry in doc["aggregate"]:
        label = md_text(entry["label"])
        out.append(md_row(label, "**score**", entry["n_repeats"], pct(entry["mean"]), *spread(entry)) + " |")
        out += [md_row(label, md_text(row["task_id"]), row["n_runs"], pct(row["mean_percentile"]), *spread(row),
                       counts_text(row["counts"])) for row in entry["tasks"]]
    return out


def compute_lines(compute: dict | None) -> list[str]:
    """The compute table: what each run ran on and spent (the numbers are the harness's own)."""
    compute = compute or {}
    runs = compute.get("runs") or {}
    if not runs:
        return []
    out = ["## Compute", "", *md_table("Run", "GPU", "CPU cores", "Wall time", "GPU-hours", "Tokens", "USD", "Runtime")]
    for label, rec in runs.items():
        cost = rec.get("cost_usd")
        out.append(md_row(md_text(label), md_text(gpu_text(rec)), fmt_number(rec.get("cpu_cores")),
                          f"{fmt_number(rec.get('wall_seconds'))} s", fmt_number(rec.get("gpu_hours")),
                          fmt_number(rec.get("tokens")), "unknown" if cost is None else fmt_number(cost),
                          f"{md_text(rec.get('runtime'))} ({md_text(rec.get('mechanism'))})"))
    hardware = compute.get("hardware") or []
    out += ["", "Hardware: " + "; ".join(md_text(h) for h in hardware) + (
        " — **the runs ran on different hardware**" if len(hardware) > 1 else ""), ""]
    return out


def _runs_text(doc: dict) -> str:
    if (doc.get("repeats") or 1) <= 1:
        return ""
    return f"; {doc['n_runs']} runs ({doc['repeats']} repeats of each task, their means in the score)"


def _data_sentence(doc: dict) -> str:
    if data_kind(doc) == SYNTHETIC:
        return ("Data: **synthetic twins** generated by the harness — the numbers check the pipeline and are not "
                "comparable with the humans' or the published agents'.")
    return "Data: real (the project's split of the public training data)."


TOOLS_SENTENCE = ("**Provider tools allowed** (`--rexmle-allow-provider-tools`): model calls could use provider-side "
                  "web search, URL fetch, remote MCP and code containers, outside the egress policy; each run's use "
                  "is in `run.json`'s `provider_tools`.")


def _reference_cell(cell: dict) -> str:
    if cell["mean_percentile"] is None:
        return "not published"
    if cell["status"] != "ok":
        return "FAIL (0.0%)"
    return f"{pct(cell['mean_percentile'])} (mean position {fmt_number(cell['mean_position'])})"
