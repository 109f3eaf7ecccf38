"""A run's own page, ``run.html`` beside its ``run.json``: what the agent did, step by step.

Why: a researcher using the benchmark spends most of their time reading runs — why an agent failed is
the finding. The page shows the run's timeline (each model call with its model, tokens, cost, latency,
the prompt's new part, the answer, reasoning, tool calls and the tool results carried back; the egress
requests; the agent's exit), the grade and its metrics, the compute record with a small GPU plot, the
capability judgement with the evidence it used, and the files the agent left (names and sizes only:
nothing the agent wrote is executed or rendered as markup).

Safety by construction: the page is rendered by Jinja2 with autoescape on, so every text is escaped
where it is placed; a Content-Security-Policy allows only the page's own script (by hash), which opens
a call's whole record on demand with ``textContent``. Big runs stay light: the page holds previews of
the first ``MAX_PREVIEWED_CALLS`` calls and the metadata of the rest; the whole record of any call is
fetched from ``rexmle view``, which reads that one line at its offset.
"""

from __future__ import annotations

import base64
import hashlib
import json
import stat
from pathlib import Path
from typing import Any

from markupsafe import Markup

from ..hostile import RefusedFile, clean_text, read_json, walk_files
from .calls import CallSummary, read_calls

RUN_HTML = "run.html"
#: calls whose bodies are previewed in the page; later calls show their metadata (bodies on demand)
MAX_PREVIEWED_CALLS = 300
#: ... and at most this much of the call record is parsed for them (conversations resend their history)
MAX_PREVIEWED_BYTES = 64 * 1024 * 1024
#: calls listed at all (a flood of calls is summarised past this)
MAX_LISTED_CALLS = 20_000
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


def _environment():
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    return Environment(loader=PackageLoader("pytest_rexmle.report", "templates"),
                       autoescape=select_autoescape(default=True, default_for_string=True),
                       undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def _number(value: Any) -> str:
    from .render import fmt_number

    return fmt_number(value)


def _percent(value: Any) -> str:
    return "-" if not isinstance(value, (int, float)) else f"{100 * value:.1f}%"


def _json_file(path: Path, limit: int = 16 * 1024 * 1024) -> dict:
    try:
        value = read_json(path, limit)
    except (RefusedFile, OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


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


def _files(run_dir: Path) -> list[dict]:
    folders = []
    for name in ("submission", "workspace"):
        root = run_dir / name
        if not root.is_dir() or root.is_symlink():
            continue
        entries, total, count, cut = [], 0, 0, False
        try:
            for rel, info in walk_files(root, max_entries=50_000, what=f"the {name} folder"):
                if not stat.S_ISREG(info.st_mode):
                    continue
                count += 1
                total += info.st_size
                if len(entries) < MAX_FILES:
                    entries.append({"name": clean_text(rel, limit=300), "size": info.st_size})
                else:
                    cut = True
        except (RefusedFile, OSError) as exc:
            entries.append({"name": f"(listing stopped: {clean_text(str(exc), limit=200)})", "size": ""})
        folders.append({"name": name, "entries": entries, "count": count, "size": f"{total} bytes", "cut": cut})
    return folders


def _capability(run_dir: Path) -> tuple[dict | None, list[dict]]:
    doc = _json_file(run_dir / "capability.json")
    stages = _json_file(run_dir / "stages.json").get("stages") or []
    if not doc:
        return None, stages if isinstance(stages, list) else []
    rows = []
    for section in doc.get("sections") or []:
        for row in (section.get("results") or []) if isinstance(section, dict) else []:
            if isinstance(row, dict):
                rows.append({"id": row.get("id"), "strategy": row.get("strategy"), "score": row.get("score"),
                             "evidence": clean_text(str(row.get("evidence") or ""), keep_newlines=True, limit=2000)})
    judge = doc.get("judge") if isinstance(doc.get("judge"), dict) else {}
    return ({"judge": f"{judge.get('name')} ({judge.get('model')})", "rows": rows},
            [s for s in stages if isinstance(s, dict)] if isinstance(stages, list) else [])


def _egress(meta: dict) -> list[dict]:
    egress = meta.get("egress")
    entries = egress.get("hosts", []) if isinstance(egress, dict) else (egress or [])
    return [e for e in entries if isinstance(e, dict)][:500]


def _validations(meta: dict) -> dict:
    found = meta.get("validations") if isinstance(meta.get("validations"), dict) else {}
    calls = [c for c in found.get("calls") or [] if isinstance(c, dict)]
    count = found.get("count") if isinstance(found.get("count"), int) else len(calls)
    return {"count": count, "calls": calls}


def _repeat_text(meta: dict) -> str | None:
    """``2 of 3`` for a run of a session with ``--rexmle-repeat 3``; None otherwise (or for a value that is
    not a count: run.json lies in a folder the agent wrote to)."""
    repeat, repeats = meta.get("repeat"), meta.get("repeats")
    if type(repeat) is int and type(repeats) is int and repeats > 1:
        return f"{repeat} of {repeats}"
    return None


def _agent_logs(run_dir: Path) -> list[dict]:
    """What trajectory.atif.json says of the agent's own logs (embedded, with their step counts, or skipped
    and why); a trajectory too large to read cheaply gives nothing, so a big run's page stays light."""
    from .atif import ATIF_JSON

    notes = (_json_file(run_dir / ATIF_JSON).get("extra") or {}).get("agent_logs")
    return [n for n in notes if isinstance(n, dict)][:20] if isinstance(notes, list) else []


def _metrics(result: dict) -> list[dict]:
    metrics = result.get("metrics") or {}
    positions = result.get("positions") or {}
    ranked = set(result.get("ranking_metrics") or [])
    return [{"key": k, "value": v, "position": positions.get(k), "ranked": k in ranked}
            for k, v in metrics.items()] if isinstance(metrics, dict) else []


def _call_view(call: CallSummary, previewed: bool) -> dict:
    view = {name: getattr(call, name) for name in ("number", "offset", "ts", "model", "route", "status", "stream",
                                                    "refused", "error", "duration_s", "cost_usd", "prompt",
                                                    "answer", "reasoning", "tool_results")}
    view["tokens"] = call.tokens()
    view["bodies"] = call.bodies and previewed
    view["tool_calls"] = [{"id": t.id, "name": t.name, "arguments": t.arguments} for t in call.tool_calls]
    return view


def render_run_page(run_dir: Path) -> str:
    """The HTML of a run's page."""
    from ..agents.usage import run_record
    from .disclosure import unsafe_options

    run_dir = Path(run_dir)
    meta = run_record(run_dir) or {}
    result = _json_file(run_dir / "result.json")
    calls = read_calls(run_dir, bodies=MAX_PREVIEWED_CALLS, body_bytes=MAX_PREVIEWED_BYTES)
    listed = calls[:MAX_LISTED_CALLS]
    settings = (meta.get("key") or {}).get("settings") or {}
    unsafe = unsafe_options({**settings, "agent_as_root": meta.get("agent_as_root"),
                             "unsafe_same_uid": meta.get("unsafe_same_uid")})
    compute = meta.get("compute") if isinstance(meta.get("compute"), dict) else {}
    telemetry = meta.get("gpu_telemetry") if isinstance(meta.get("gpu_telemetry"), dict) else {}
    usage = meta.get("usage") if isinstance(meta.get("usage"), dict) else {}
    cost = usage.get("cost_usd")
    leak = ""
    if isinstance(result.get("suspected_leak"), dict):
        from ..leaks import summary

        leak = summary(result["suspected_leak"])
    run = {key: meta.get(key) for key in ("task", "agent", "runtime", "sandbox", "data", "started", "finished",
                                          "exit_code", "timed_out", "duration")}
    run["repeat"] = _repeat_text(meta)
    template = _environment().get_template("run.html.j2")
    return template.render(
        run=run, run_dir=str(run_dir), result={k: result.get(k) for k in (
            "status", "reason", "percentile", "mean_position", "n_humans", "suspected_leak")},
        leak=leak, metrics=_metrics(result),
        compute=[(COMPUTE_LABELS.get(k, k), v) for k, v in compute.items() if v is not None],
        gpu_plot=_gpu_plot(telemetry), calls=[_call_view(c, i < MAX_PREVIEWED_CALLS) for i, c in enumerate(listed)],
        calls_total=len(calls), calls_refused=sum(c.refused for c in calls),
        calls_shown=sum(c.bodies for c in listed),
        tokens_in=usage.get("input_tokens", 0), tokens_out=usage.get("output_tokens", 0),
        cost="cost unknown" if cost is None else f"${cost:.6f}", egress=_egress(meta), validations=_validations(meta),
        agent_logs=_agent_logs(run_dir),
        capability=_capability(run_dir)[0], stages=_capability(run_dir)[1], files=_files(run_dir),
        unsafe="UNSAFE: " + "; ".join(unsafe) if unsafe else None,
        number=_number, percent=_percent, script=Markup(SCRIPT), script_hash=SCRIPT_HASH)


def write_run_page(run_dir: Path) -> Path:
    """Write ``<run>/run.html`` (atomically: a reader never sees half a page) and return its path."""
    from ..jsonfile import write_text_atomic

    path = Path(run_dir) / RUN_HTML
    write_text_atomic(path, render_run_page(run_dir))
    return path


def call_record_text(run_dir: Path, offset: int) -> str | None:
    """One call's whole record as indented JSON text (what ``rexmle view`` serves for a button)."""
    from .calls import read_call

    record = read_call(run_dir, offset)
    if record is None:
        return None
    return json.dumps(record, indent=1, ensure_ascii=False)
