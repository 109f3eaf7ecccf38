"""``rexmle status``: what the runs folder says about runs in progress and finished ones.

A benchmark session can run for days on several xdist workers; rather than interleave progress lines
with pytest's output, every run keeps ``run.json`` (start, limit) and, once graded, ``result.json``.
Reading them gives progress from any shell, also while the session runs.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone
from pathlib import Path


def _hms(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def collect(runs_dir: Path, now: datetime | None = None) -> list[dict]:
    """One row per run folder, newest first within each task."""
    now = now or datetime.now(timezone.utc)
    rows = []
    for meta_path in sorted(runs_dir.glob("*/*/*/run.json")):
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError):
            continue
        run_dir = meta_path.parent
        result_path = run_dir / "result.json"
        row = {"task": meta.get("task"), "agent": meta.get("agent"), "run_dir": str(run_dir),
               "time_limit": meta.get("time_limit"), "gpus": meta.get("gpus") or []}
        if result_path.is_file():
            result = json.loads(result_path.read_text())
            row.update(state=result.get("status"), percentile=result.get("percentile"),
                       elapsed=(result.get("timings") or {}).get("agent_seconds"))
        elif "finished" in meta:
            row.update(state="grading", elapsed=meta.get("duration"))
        else:
            started = datetime.fromisoformat(meta["started"])
            row.update(state="running", elapsed=(now - started).total_seconds())
        rows.append(row)
    return rows


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs-dir", default=".rexmle/runs", help="the session's runs folder (default .rexmle/runs)")
    parser.add_argument("--running", action="store_true", help="only runs still in progress")
    parser.add_argument("--json", action="store_true")


def run_status(args: argparse.Namespace) -> int:
    rows = collect(Path(args.runs_dir))
    if args.running:
        rows = [r for r in rows if r["state"] == "running"]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"no runs in {args.runs_dir}")
        return 0
    for r in rows:
        elapsed = _hms(r["elapsed"]) if r.get("elapsed") is not None else "-"
        limit = _hms(r["time_limit"]) if r.get("time_limit") else "-"
        extra = f"  percentile {100 * r['percentile']:.1f}%" if r.get("percentile") is not None else ""
        gpus = f"  gpu {','.join(r['gpus'])}" if r["gpus"] else ""
        print(f"{r['task']:<20} {r['agent']:<10} {r['state']:<8} {elapsed} / {limit}{gpus}{extra}  {r['run_dir']}")
    return 0
