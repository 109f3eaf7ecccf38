"""Benchmark: does the session's executor keep every slot busy while runs wait?

Run ``python benchmarks/bench_campaign.py`` (bubblewrap or Landlock as for any session). It runs a
campaign of 20 runs — the 20 challenges with a command agent that branches on ``$REXMLE_TASK``: four
long runs, four medium, eight short and four that fail at once — on four placeholder GPU ids
(``--rexmle-gpus=0,1,2,3``; nothing uses a GPU), once in one pytest process and once with ``-n 2``.
Each challenge declares a budget in a copy of the task registry (longest for the long runs), so the
executor can start the longest first.

For each session it reads the report's ``campaign`` figures and prints:

* the makespan against the list-scheduling ideal of the same session's measured slot times (each run's
  harness process from start to exit: the per-run start overhead is inside) — goal ≤ 1.05;
* the same against the ideal of the agents' own durations (``run.json``), and the mean per-run start
  overhead (slot time − agent time) that separates the two;
* slot-seconds left idle while a run that fitted was waiting (the executor's latency between one run's
  exit and the next start), in all and per start.

Exit status 1 when a bound is missed. Not a test: pytest never collects it (it lives outside ``tests/``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pytest_rexmle.schedule.figures import list_schedule  # noqa: E402
from pytest_rexmle.task import registry  # noqa: E402

LONG, MEDIUM, SHORT = 10, 5, 2   # seconds of each kind; four failing runs exit at once
GPUS = ["0", "1", "2", "3"]


def durations(scale: float) -> dict[str, float | None]:
    """Seconds per challenge (None: fails at once): 4 long, 4 medium, 8 short, 4 failing, spread over the
    collection order (every 7th challenge, modulo 20) so that budgets, not names, order them."""
    ids = sorted(t.id for t in registry())
    kinds: list[float | None] = [LONG] * 4 + [MEDIUM] * 4 + [SHORT] * 8 + [None] * 4
    out = {ids[(7 * i) % len(ids)]: kind for i, kind in enumerate(kinds)}
    return {t: (None if v is None else v * scale) for t, v in out.items()}


def tasks_copy(root: Path, seconds: dict[str, float | None]) -> Path:
    """The competitions' task folders (for ``REXMLE_COMPETITIONS_DIR``) with each challenge's budget set from its
    expected duration (failing runs: the least)."""
    tasks = root / "competitions"
    shutil.copytree(REPO / "pytest_rexmle" / "competitions", tasks, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    for task_id, value in seconds.items():
        (path,) = tasks.glob(f"*/tasks/{task_id}/task.yaml")
        data = yaml.safe_load(path.read_text())
        data["time_limit_hours"] = round(((value or 0.5) * 60 + 60) / 3600, 4)  # a minute per expected second
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    return tasks


def agent_command(seconds: dict[str, float | None]) -> str:
    cases = " ".join(f'{t}) {"exit 1" if v is None else f"sleep {v:g}"};;' for t, v in seconds.items())
    return f'case "$REXMLE_TASK" in {cases} esac'


def session(folder: Path, seconds: dict[str, float | None], xdist: list[str], cache: Path) -> dict:
    folder.mkdir(parents=True)
    env = {**os.environ, "REXMLE_CACHE_DIR": str(cache), "REXMLE_COMPETITIONS_DIR": str(tasks_copy(folder, seconds))}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--agent=command",
            f"--agent-option=cmd={agent_command(seconds)}", "--rexmle-data=synthetic", "--rexmle-judge=none",
            f"--rexmle-gpus={','.join(GPUS)}", *xdist]
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=folder, capture_output=True, text=True, env=env)
    wall = time.monotonic() - start
    (folder / "session.log").write_text(proc.stdout + proc.stderr)
    doc = json.loads((folder / ".rexmle" / "report" / "latest" / "rexmle-report.json").read_text())
    campaign = doc["campaign"]
    agent = []
    for run in campaign["runs"]:
        meta = json.loads((Path(_run_dir(folder, run["task"])) / "run.json").read_text())
        agent.append(meta["duration"])
    return {"wall": wall, "campaign": campaign, "agent": agent, "tail": proc.stdout.strip().splitlines()[-1]}


def _run_dir(folder: Path, task_id: str) -> Path:
    return sorted((folder / ".rexmle" / "runs" / task_id).glob("*/*/"))[-1]


def report(name: str, result: dict, bound: float) -> bool:
    c = result["campaign"]
    slot_times = [r["seconds"] for r in c["runs"]]
    ideal_slots = list_schedule([(s, 1) for s in slot_times], len(GPUS))
    ideal_agent = list_schedule([(a, 1) for a in result["agent"]], len(GPUS))
    overhead = sum(s - a for s, a in zip(slot_times, result["agent"], strict=False)) / len(slot_times)
    ratio = c["makespan_s"] / ideal_slots
    per_start = c["idle_while_waiting_s"] / max(1, c["n_runs"] - len(GPUS))
    print(f"{name}: {result['tail']} (session wall {result['wall']:.1f} s)")
    print(f"  makespan {c['makespan_s']:.2f} s; ideal {ideal_slots:.2f} s of slot times -> ratio {ratio:.3f} "
          f"(goal <= {bound}); ideal of agent times {ideal_agent:.2f} s -> {c['makespan_s'] / ideal_agent:.3f}; "
          f"start overhead {overhead:.2f} s per run")
    print(f"  sum of run times {c['run_seconds_sum']:.1f} s; GPU-idle while a run waited {c['idle_while_waiting_s']:.3f} s "
          f"({1000 * per_start:.1f} ms per start); GPUs allocated {100 * c['gpu_allocated_fraction']:.0f}%")
    assert c["n_runs"] == 20, c["n_runs"]
    return ratio <= bound and per_start < 0.1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every duration (default 1)")
    parser.add_argument("--bound", type=float, default=1.05)
    parser.add_argument("--keep", action="store_true", help="keep the session folders")
    args = parser.parse_args()
    seconds = durations(args.scale)
    root = Path(tempfile.mkdtemp(prefix="rexmle-bench-campaign-"))
    cache = root / "cache"
    ok = True
    try:
        for name, xdist in (("one process", []), ("-n 2", ["-n", "2"])):
            ok &= report(name, session(root / name.replace(" ", "-"), seconds, xdist, cache), args.bound)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"sessions kept in {root}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
