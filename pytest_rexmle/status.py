"""``rexmle status``: what the runs folder says about runs in progress and finished ones.

A benchmark session can run for days on several xdist workers; rather than interleave progress lines
with pytest's output, every run keeps ``run.json`` (start, limit) and, once graded, ``result.json``.
Reading them gives progress from any shell, also while the session runs.

A run that has neither is "running" only while its owner is: a session stopped by Ctrl-C marks its runs
``interrupted`` on the way out, and one killed outright (SIGTERM, ``kill -9``, a reboot) is recognised
by its owning process being gone (:mod:`.run.owner`); both show as "interrupted" with when, never as a
ghost "running" whose elapsed time keeps growing. A scheduler that still runs the job (Slurm, after the
harness detached) has the last word: the run is running.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path

from .report.archive import local_time
from .run.owner import GONE, last_activity, owner_state
from .runtime import RUNTIMES

INTERRUPTED = "interrupted"


#: what stopped a run, by the exception its harness recorded (schedule/perform.py, run.finish)
INTERRUPT_CAUSES = {"KeyboardInterrupt": "Ctrl-C", "Stopped": "SIGTERM", "Terminated": "SIGTERM",
                    "SessionGone": "harness gone: the session was killed"}


def _repeat(meta: dict) -> int | None:
    """The run's repeat in a session of ``--rexmle-repeat N`` > 1 (None otherwise, or for a value that is no
    count: run.json lies in a folder the agent could write to)."""
    repeat, repeats = meta.get("repeat"), meta.get("repeats")
    return repeat if type(repeat) is int and type(repeats) is int and repeats > 1 else None


def _hms(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def collect(runs_dir: Path, now: datetime | None = None) -> list[dict]:
    """One row per run folder, newest first within each task."""
    now = now or datetime.now(UTC)
    rows = []
    unfinished: dict[str, list[dict]] = {}
    pending: list[tuple[dict, dict]] = []  # each unfinished run's row and run.json
    for meta_path in sorted(runs_dir.glob("*/*/*/run.json")):
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError):
            continue
        run_dir = meta_path.parent
        result_path = run_dir / "result.json"
        row = {"task": meta.get("task"), "agent": meta.get("agent"), "run_dir": str(run_dir),
               "time_limit": meta.get("time_limit"), "gpus": meta.get("gpus") or [], "repeat": _repeat(meta)}
        if result_path.is_file():
            result = json.loads(result_path.read_text())
            row.update(state=result.get("status"), percentile=result.get("percentile"),
                       elapsed=(result.get("timings") or {}).get("agent_seconds"))
        elif "finished" in meta:
            row.update(state="grading", elapsed=meta.get("duration"))
            if owner_state(meta) == GONE:  # the run ended but its session died before grading it
                row.update(state=INTERRUPTED, interrupted=meta.get("interrupted") or
                           last_activity(run_dir).isoformat(), interrupted_by=meta.get("interrupted_by") or "harness gone")
        else:
            started = datetime.fromisoformat(meta["started"])
            row.update(state="running", elapsed=(now - started).total_seconds())
            unfinished.setdefault(meta.get("runtime") or "local", []).append({**meta, "run_dir": str(run_dir)})
            pending.append((row, meta))
        rows.append(row)
    _add_scheduler_states(rows, unfinished)
    for row, meta in pending:
        if not row.get("scheduler"):
            _settle_unfinished(row, meta, Path(row["run_dir"]))
    return rows


def _settle_unfinished(row: dict, meta: dict, run_dir: Path) -> None:
    """An unfinished run whose session said it was interrupted, or whose owner is gone, is interrupted:
    its elapsed time stops at that moment."""
    if "interrupted" in meta:
        cause = meta.get("interrupted_by") or "?"
        when, cause = meta["interrupted"], INTERRUPT_CAUSES.get(cause, cause)
    elif owner_state(meta) == GONE:
        when, cause = last_activity(run_dir).isoformat(), "harness gone (killed?); time of its last sign of life"
    else:
        return
    started = datetime.fromisoformat(meta["started"])
    ended = datetime.fromisoformat(when)
    row.update(state=INTERRUPTED, interrupted=when, interrupted_by=cause,
               elapsed=max(0.0, (ended - started).total_seconds()))


def _add_scheduler_states(rows: list[dict], unfinished: dict[str, list[dict]]) -> None:
    """A scheduler runtime (Slurm) knows more than the run folder: queued with a reason, or running on a
    node since when. Each runtime answers for its own runs; a runtime that cannot answer adds nothing."""
    by_dir = {r["run_dir"]: r for r in rows}
    for name, records in unfinished.items():
        try:
            states = RUNTIMES.load(name).live_states(records)
        except Exception:  # an unknown runtime or an unreachable scheduler: the run folder's view stands
            continue
        for run_dir, live in states.items():
            row = by_dir[run_dir]
            row["scheduler"] = live
            row["elapsed"] = live.get("elapsed", row.get("elapsed"))


def _scheduler(row: dict) -> str:
    """`` job 12 PENDING (Priority)`` / `` job 12 RUNNING on node3`` for runs a scheduler holds."""
    live = row.get("scheduler")
    if not live:
        return ""
    text = f"  job {live['job_id']} {live['state']}"
    if live["state"] == "PENDING" and live.get("reason") not in (None, "", "None"):
        text += f" ({live['reason']})"
    elif live.get("node") and live["node"] not in ("None assigned", ""):
        text += f" on {live['node']}"
    return text


def _when(iso: str) -> str:
    moment = datetime.fromisoformat(iso)
    return f"{local_time(iso)[:10]} {moment.astimezone().strftime('%H:%M:%S %Z')}"


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs-dir", default=".rexmle/runs", help="the session's runs folder (default .rexmle/runs)")
    parser.add_argument("--running", action="store_true", help="only runs still in progress (default: finished ones too)")
    parser.add_argument("--json", action="store_true")


def run_status(args: argparse.Namespace) -> int:
    """Runs in progress first, then finished ones (``--running``: only those in progress). An empty
    answer says what exists instead, so "no runs" never hides a folder full of finished results."""
    every = collect(Path(args.runs_dir))
    active = [r for r in every if r["state"] in ("running", "grading")]
    finished = [r for r in every if r not in active]
    rows = active if args.running else active + finished
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not every:
        print(f"no runs in {args.runs_dir}")
        return 0
    if not active:
        print(f"no run in progress in {args.runs_dir}; {len(finished)} finished run(s)"
              + (" (leave out --running to list them)" if args.running else ":"))
    elif not args.running and finished:
        print(f"{len(active)} run(s) in progress, {len(finished)} finished:")
    for r in rows:
        elapsed = _hms(r["elapsed"]) if r.get("elapsed") is not None else "-"
        limit = _hms(r["time_limit"]) if r.get("time_limit") else "-"
        extra = f"  percentile {100 * r['percentile']:.1f}%" if r.get("percentile") is not None else ""
        if r["state"] == INTERRUPTED:
            extra += f"  at {_when(r['interrupted'])} ({r['interrupted_by']})"
        gpus = f"  gpu {','.join(r['gpus'])}" if r["gpus"] else ""
        page = Path(r["run_dir"]) / "run.html"
        task = f"{r['task']} r{r['repeat']}" if r.get("repeat") else r["task"]
        print(f"{task:<20} {r['agent']:<10} {r['state']:<11} {elapsed} / {limit}{gpus}{extra}{_scheduler(r)}  "
              f"{page if page.is_file() else r['run_dir']}")
    return 0
