"""A run's own page, ``run.html`` beside its ``run.json``: what the agent did, step by step.

Why: a researcher using the benchmark spends most of their time reading runs — why an agent failed is
the finding. The page shows the run's timeline (each model call with its model, tokens, cost, latency,
the prompt's new part, the answer, reasoning, tool calls and the tool results carried back; the egress
requests; the agent's exit), the grade and its metrics, the compute record with a small GPU plot, the
capability judgement with the evidence it used, and the files the agent left (names and sizes only:
nothing the agent wrote is executed or rendered as markup).

Safety by construction: the page is rendered by Jinja2 with autoescape on, so every text is escaped
where it is placed; a Content-Security-Policy allows only the page's own script (by hash), which opens
a call's whole record on demand with ``textContent``. Every text of the agent's (or a model's) goes
through :class:`Budget`: invisible and reordering characters are shown as ``\\uXXXX``
(:func:`~pytest_rexmle.agent_output.reveal`), each text is clipped (names and ids at ``NAME_CHARS``, bodies and
tool-call arguments at ``PREVIEW_CHARS``), and all of them together hold at most ``MAX_PAGE_BYTES`` once
escaped. The agent's words are set in their own style (``class="agent"``), never in a heading, a bold
title or a table of the harness's facts, so a model named "✅ status ok" cannot pass for the grade.

Big runs stay a page: bodies are previewed for the first calls while the budget lasts, then calls are
listed by their metadata, and past the budget the page ends with a link to the next calls, which
``rexmle view`` renders (``run.html?from=N``); the whole record of any call is fetched from
``rexmle view``, which reads that one line at its offset.
"""

from __future__ import annotations

import base64
import hashlib
import json
import stat
from pathlib import Path
from typing import Any

from markupsafe import Markup, escape

from ..agent_output import RefusedFile, clean_text, plain_name, read_json, reveal, walk_files
from ..agents.usage import run_record
from ..compute import read_record
from ..jsonfile import write_text_atomic
from ..scoring.leaks import summary
from .atif import ATIF_JSON
from .calls import PREVIEW_CHARS, CallSummary, read_call, read_calls
from .disclosure import unsafe_options
from .render import fmt_number, percent
from .trust import mapping_of

RUN_HTML = "run.html"
#: calls whose bodies are previewed in the page; later calls show their metadata (bodies on demand)
MAX_PREVIEWED_CALLS = 300
#: ... and at most this much of the call record is parsed for them (conversations resend their history)
MAX_PREVIEWED_BYTES = 64 * 1024 * 1024
#: the agent's text on one page, escaped, in bytes: the timeline's share, and the rest's (files, egress,
#: validations, judgement, run facts); the page's own markup adds ``ROW_BYTES`` per listed call (charged
#: to the timeline) and a fixed frame of about 10 KiB
MAX_PAGE_BYTES = 3 * 1024 * 1024
TIMELINE_BYTES = 2304 * 1024
#: bodies are previewed only while this much of the timeline's share is left: the listing goes on
ROWS_RESERVE = 768 * 1024
#: the page's own markup for one listed call, and for each tool call or tool result it previews
#: (measured: about 700 bytes a call with one tool call and its result, texts included)
ROW_BYTES = 600
PART_BYTES = 100
#: characters of a name, an id, a model, a route, a file or host name
NAME_CHARS = 200
MAX_FILES = 200
#: the compute record's fields as the page names them
COMPUTE_LABELS = {"gpu_model": "GPU model", "gpu_count": "GPUs", "driver_version": "driver", "cuda_version": "CUDA",
                  "gpu_unavailable": "GPU facts", "cpu_model": "CPU", "cpu_cores": "CPU cores",
                  "memory_bytes": "memory (bytes)", "wall_seconds": "wall time (s)", "gpu_hours": "GPU-hours",
                  "tokens": "tokens", "cost_usd": "USD", "cost_unknown_reason": "USD unknown because",
                  "runtime": "runtime", "mechanism": "mechanism", "image_digest": "image digest"}
SCRIPT = """document.querySelectorAll("button.body").forEach(function (button) {
  button.addEventListener("click", function () {
    var out = button.nextElementSibling;
    out.hidden = false;
    out.textContent = "loading";
    fetch("call?offset=" + encodeURIComponent(button.dataset.offset)).then(function (r) {
      if (!r.ok) { throw new Error(String(r.status)); }
      return r.text();
    }).then(function (text) { out.textContent = text; }).catch(function () {
      out.textContent = "The whole record opens when the page is served: rexmle view RUN_DIR";
    });
  });
});"""
SCRIPT_HASH = "sha256-" + base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()


class Budget:
    """Bytes of agent text a page may still hold. Every agent-controlled string passes :meth:`text`, which
    shows its invisible characters, clips it to its own limit and then to what is left, and charges its
    escaped size: so the page's size is bounded whatever the record holds (a 62 MiB record once made a
    290 MiB page of unclipped tool-call names and arguments)."""

    def __init__(self, total: int) -> None:
        self.left = total

    def charge(self, size: int) -> None:
        self.left -= size

    def text(self, value: Any, limit: int = NAME_CHARS, keep_newlines: bool = False) -> str:
        """``value`` as page text: revealed, cleaned, clipped (saying how much was cut) and charged."""
        raw = value if isinstance(value, str) else ("" if value is None else str(value))
        text = clean_text(reveal(raw[:limit * 2 + 64]), keep_newlines=keep_newlines)
        if self.left <= 0:
            limit = 0
        total = len(raw) if len(raw) > limit * 2 + 64 else len(text)
        if len(text) > limit:
            text = text[:limit] + f"… [{total - limit} more characters]"
        size = len(str(escape(text)).encode())
        if size > self.left > 0:  # the last text that fits in part: worst case 6 bytes a character
            keep = max(0, self.left // 6)
            text = text[:keep] + "… [clipped: the page's size budget is spent]"
            size = len(str(escape(text)).encode())
        self.charge(size)
        return text


def _arguments_text(arguments: Any) -> str:
    """A tool call's arguments as text: indented JSON for an object or a list (within bounds), else as is."""
    if isinstance(arguments, (dict, list)):
        try:
            return json.dumps(arguments, indent=1, ensure_ascii=False)
        except (ValueError, TypeError, RecursionError):
            return "(arguments nested too deep to show here: open the whole record)"
    return "" if arguments is None else str(arguments)


def _json_file(path: Path, limit: int = 16 * 1024 * 1024) -> dict:
    try:
        value = read_json(path, limit)
    except (RefusedFile, OSError, ValueError):
        return {}
    return mapping_of(value)


def _gpu_plot(telemetry: dict) -> Markup | None:
    """A small SVG of each GPU's utilisation over the run (numbers only: nothing of the agent's is in it)."""
    series = [t for t in telemetry.get("timeline") or [] if isinstance(t, dict) and t.get("utilisation")]
    if not series:
        return None
    width, height, colours = 480, 120, ("#0969da", "#cf222e", "#1a7f37", "#bf8700", "#8250df")
    lines = []
    for index, entry in enumerate(series[:5]):
        values = [float(v) for v in entry["utilisation"] if isinstance(v, (int, float))]
        if not values:
            continue
        step = width / max(1, len(values) - 1)
        points = " ".join(f"{i * step:.1f},{height - min(100.0, max(0.0, v)) * height / 100:.1f}"
                          for i, v in enumerate(values))
        lines.append(f'<polyline fill="none" stroke="{colours[index]}" stroke-width="1.5" points="{points}"/>')
    return Markup(f'<svg width="{width}" height="{height + 2}" viewBox="0 -1 {width} {height + 2}" '
                  f'role="img" aria-label="GPU utilisation"><rect x="0" y="0" width="{width}" height="{height}" '
                  f'fill="#f6f8fa" stroke="#d0d7de"/>{"".join(lines)}</svg>')


def _files(run_dir: Path, budget: Budget) -> list[dict]:
    """The files the agent left, by name and size (names are the agent's: revealed, clipped, charged)."""
    folders = []
    for name in ("submission", "workspace"):
        root = run_dir / name
        if not root.is_dir() or root.is_symlink():
            continue
        entries: list[dict[str, Any]] = []
        total, count, cut = 0, 0, False
        try:
            for rel, info in walk_files(root, max_entries=50_000, what=f"the {name} folder"):
                if not stat.S_ISREG(info.st_mode):
                    continue
                count += 1
                total += info.st_size
                if len(entries) < MAX_FILES and budget.left > 0:
                    entries.append({"name": budget.text(rel, 300), "size": info.st_size})
                else:
                    cut = True
        except (RefusedFile, OSError) as exc:
            entries.append({"name": f"(listing stopped: {budget.text(str(exc), 200)})", "size": ""})
        folders.append({"name": name, "entries": entries, "count": count, "size": f"{total} bytes", "cut": cut})
    return folders


def _capability(run_dir: Path, budget: Budget) -> tuple[dict | None, list[dict]]:
    doc = _json_file(run_dir / "capability.json")
    found = _json_file(run_dir / "stages.json").get("stages")
    stages = [{"id": budget.text(st.get("id"), 40), "name": budget.text(st.get("name")), "score": st.get("score"),
               "evidence": budget.text(st.get("evidence") or "", 2000, keep_newlines=True)}
              for st in (found if isinstance(found, list) else [])[:50] if isinstance(st, dict)]
    if not doc:
        return None, stages
    rows: list[dict[str, Any]] = []
    for section in doc.get("sections") or []:
        for row in (section.get("results") or []) if isinstance(section, dict) else []:
            if isinstance(row, dict) and len(rows) < 200:
                rows.append({"id": budget.text(row.get("id"), 40), "strategy": budget.text(row.get("strategy")),
                             "score": budget.text(row.get("score"), 40),
                             "evidence": budget.text(row.get("evidence") or "", 2000, keep_newlines=True)})
    judge = doc.get("judge")
    judge = judge if isinstance(judge, dict) else {}
    return {"judge": budget.text(f"{judge.get('name')} ({judge.get('model')})"), "rows": rows}, stages


def _egress(meta: dict, budget: Budget) -> list[dict]:
    """The egress hosts (their names, paths and reasons are the agent's requests: shown as its text)."""
    egress = meta.get("egress")
    entries = egress.get("hosts", []) if isinstance(egress, dict) else (egress or [])
    shown = []
    for entry in [e for e in entries if isinstance(e, dict)][:500]:
        paths = entry.get("paths")
        paths = paths if isinstance(paths, list) else []
        shown.append({"host": budget.text(entry.get("host")), "port": budget.text(entry.get("port"), 10),
                      "allowed": entry.get("allowed") is True, "count": budget.text(entry.get("count"), 20),
                      "reason": budget.text(entry.get("reason") or "", 300),
                      "paths": [budget.text(p, 300) for p in paths[:20]]})
    return shown


def _validations(meta: dict, budget: Budget) -> dict:
    found = meta.get("validations")
    found = found if isinstance(found, dict) else {}
    calls = [{"ts": budget.text(c.get("ts"), 40), "ok": c.get("ok") is True,
              "problems": [budget.text(p, 300) for p in (c.get("problems") or [])[:20]]
              if isinstance(c.get("problems"), list) else []}
             for c in (found.get("calls") or [])[:500] if isinstance(c, dict)]
    count = found.get("count") if isinstance(found.get("count"), int) else len(calls)
    return {"count": count, "calls": calls}


def _repeat_text(meta: dict) -> str | None:
    """``2 of 3`` for a run of a session with ``--rexmle-repeat 3``; None otherwise (or for a value that is
    not a count: run.json lies in a folder the agent wrote to)."""
    repeat, repeats = meta.get("repeat"), meta.get("repeats")
    if type(repeat) is int and type(repeats) is int and repeats > 1:
        return f"{repeat} of {repeats}"
    return None


def _agent_logs(run_dir: Path, budget: Budget) -> list[dict]:
    """What trajectory.atif.json says of the agent's own logs (embedded, with their step counts, or skipped
    and why); a trajectory too large to read cheaply gives nothing, so a big run's page stays light."""
    notes = (_json_file(run_dir / ATIF_JSON).get("extra") or {}).get("agent_logs")
    return [{key: budget.text(n.get(key), 300) if isinstance(n.get(key), str) else n.get(key)
             for key in ("status", "steps", "source_file", "skipped_lines", "reason")}
            for n in notes[:20] if isinstance(n, dict)] if isinstance(notes, list) else []


def _metrics(result: dict, budget: Budget) -> list[dict]:
    metrics = result.get("metrics") or {}
    positions = result.get("positions")
    positions = positions if isinstance(positions, dict) else {}
    ranked = result.get("ranking_metrics")
    ranked = ranked if isinstance(ranked, list) else []
    return [{"key": budget.text(k, 100), "value": v, "position": budget.text(positions.get(k), 40)
             if positions.get(k) is not None else None, "ranked": k in ranked}
            for k, v in list(metrics.items())[:100]] if isinstance(metrics, dict) else []


def _call_view(call: CallSummary, previewed: bool, budget: Budget) -> dict:
    """One call of the timeline: the harness's numbers as they are, every text of the agent's or the
    model's through ``budget``; the bodies only when ``previewed``."""
    view: dict[str, Any] = {name: getattr(call, name) for name in ("number", "offset", "status", "stream",
                                                                    "refused", "duration_s", "cost_usd")}
    view["tokens"] = call.tokens()
    view.update({name: budget.text(getattr(call, name), limit) for name, limit in (
        ("ts", 40), ("model", NAME_CHARS), ("route", NAME_CHARS), ("error", 1000))})
    view["error"] = view["error"] or None
    view["bodies"] = call.bodies and previewed
    if not view["bodies"]:
        view.update(prompt="", answer="", reasoning="", tool_results=[], tool_calls=[])
        return view
    for name in ("prompt", "answer", "reasoning"):
        view[name] = budget.text(getattr(call, name), PREVIEW_CHARS, keep_newlines=True)
    budget.charge(PART_BYTES * (min(50, len(call.tool_results)) + min(50, len(call.tool_calls))))
    view["tool_results"] = [(budget.text(i), budget.text(t, PREVIEW_CHARS, keep_newlines=True), budget.text(n))
                            for i, t, n in call.tool_results[:50]]
    view["tool_calls"] = [{"id": budget.text(t.id), "name": budget.text(t.name),
                           "arguments": budget.text(_arguments_text(t.arguments), PREVIEW_CHARS, keep_newlines=True)}
                          for t in call.tool_calls[:50]]
    return view


def _timeline(calls: list[CallSummary], first: int, budget: Budget) -> tuple[list[dict], int | None]:
    """The calls listed from number ``first`` while the budget lasts (bodies while more than
    ``ROWS_RESERVE`` of it is left), and the number the next page starts at (None: the last call is here)."""
    views: list[dict[str, Any]] = []
    for index in range(max(0, first - 1), len(calls)):
        if budget.left <= 0:
            return views, index + 1
        views.append(_call_view(calls[index], budget.left > ROWS_RESERVE, budget))
        budget.charge(ROW_BYTES)
    return views, None


def render_run_page(run_dir: Path, first: int = 1) -> str:
    """The HTML of a run's page; its timeline starts at call number ``first`` (``rexmle view`` serves the
    pages after the first one as ``run.html?from=N``)."""
    run_dir = Path(run_dir)
    meta = run_record(run_dir) or {}
    result = _json_file(run_dir / "result.json")
    calls = read_calls(run_dir, bodies=MAX_PREVIEWED_CALLS, body_bytes=MAX_PREVIEWED_BYTES,
                       body_from=max(0, first - 1))
    settings = (meta.get("key") or {}).get("settings") or {}
    unsafe = unsafe_options({**settings, "agent_as_root": meta.get("agent_as_root"),
                             "unsafe_same_uid": meta.get("unsafe_same_uid")})
    compute = read_record(meta.get("compute")) or {}
    telemetry, usage = (mapping_of(meta.get(key)) for key in ("gpu_telemetry", "usage"))
    cost = usage.get("cost_usd")
    leak = ""
    if isinstance(result.get("suspected_leak"), dict):
        leak = summary(result["suspected_leak"])
    other = Budget(MAX_PAGE_BYTES - TIMELINE_BYTES)
    run = {key: meta.get(key) if isinstance(meta.get(key), (int, float, type(None))) else other.text(meta.get(key))
           for key in ("task", "agent", "runtime", "sandbox", "data", "started", "finished", "exit_code", "timed_out",
                       "duration")}
    run["repeat"] = _repeat_text(meta)
    facts = {k: result.get(k) if isinstance(result.get(k), (int, float, type(None))) else other.text(result.get(k), 1000)
             for k in ("status", "reason", "percentile", "mean_position", "n_humans")}
    # the title and heading name the task and agent only by plain names (a downloaded run.json chooses them)
    heading: dict[str, Any] = {"task": plain_name(meta.get("task")) or "(task not named plainly)",
                               "agent": plain_name(meta.get("agent")) or "(agent not named plainly)"}
    heading["plain"] = heading["task"] == meta.get("task") and heading["agent"] == meta.get("agent")
    capability, stages = _capability(run_dir, other)
    listed, next_from = _timeline(calls, first, Budget(TIMELINE_BYTES))
    from .templating import template as load

    template = load("run.html.j2")
    return template.render(
        run=run, heading=heading, run_dir=other.text(str(run_dir), 1000), result={**facts, "suspected_leak": result.get("suspected_leak")},
        leak=other.text(leak, 1000), metrics=_metrics(result, other),
        compute=[(COMPUTE_LABELS.get(k, k), other.text(v, 300)) for k, v in compute.items() if v is not None][:50],
        gpu_plot=_gpu_plot(telemetry), calls=listed, first=first, next_from=next_from,
        calls_total=len(calls), calls_refused=sum(c.refused for c in calls),
        calls_shown=sum(c["bodies"] for c in listed),
        tokens_in=usage.get("input_tokens", 0), tokens_out=usage.get("output_tokens", 0),
        cost="cost unknown" if not isinstance(cost, (int, float)) else f"${cost:.6f}",
        egress=_egress(meta, other), validations=_validations(meta, other),
        agent_logs=_agent_logs(run_dir, other), capability=capability, stages=stages, files=_files(run_dir, other),
        unsafe="UNSAFE: " + "; ".join(unsafe) if unsafe else None,
        number=fmt_number, percent=percent, script=Markup(SCRIPT), script_hash=SCRIPT_HASH)


def write_run_page(run_dir: Path) -> Path:
    """Write ``<run>/run.html`` (atomically: a reader never sees half a page) and return its path."""
    path = Path(run_dir) / RUN_HTML
    write_text_atomic(path, render_run_page(run_dir))
    return path


def call_record_text(run_dir: Path, offset: int) -> str | None:
    """One call's whole record as indented JSON text (what ``rexmle view`` serves for a button)."""
    record = read_call(run_dir, offset)
    if record is None:
        return None
    return json.dumps(record, indent=1, ensure_ascii=False)
