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

``--runs N`` (a multiple of 20) measures a campaign's cost instead: the 20 challenges ``--rexmle-repeat``ed to N
runs of a command agent that sleeps ``--sleep`` seconds, in one process or with ``--xdist K`` workers. From
``/proc`` it reads the controller's CPU seconds and peak resident memory (and its xdist workers' CPU), and
it checks every run is in the report and in JUnit exactly once. ``--kill-at M`` kills the whole session
(``kill -9`` of its process group) once M runs have finished, then runs it again with ``--rexmle-resume``:
a finished run that the resumed session did not reuse is lost, an item with two finished runs duplicated.

Exit status 1 when a bound is missed. Not a test: pytest never collects it (it lives outside ``tests/``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

sys.path.insert(0, str(REPO / "benchmarks"))
from bench_slurm import _proc  # noqa: E402

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


def watched(folder: Path, argv: list[str], env: dict, kill_at: int | None = None) -> dict:
    """One session in ``folder`` watched from /proc every half second: the controller's CPU and peak memory,
    its xdist workers' CPU (children that are not a run's harness); ``kill_at``: SIGKILL to its process
    group once the board says that many runs have finished."""
    start = time.monotonic()
    with open(folder / "session.log", "a") as log:
        proc = subprocess.Popen(argv, cwd=folder, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    seen: dict = {"cpu_s": 0.0, "peak_rss_mib": 0.0, "workers_cpu_s": {}, "killed": False}
    while proc.poll() is None:
        if (info := _proc(proc.pid)) is not None:
            seen["cpu_s"], seen["peak_rss_mib"] = info[0], max(seen["peak_rss_mib"], info[1] / 1024)
        for pid in _children(proc.pid):
            if (info := _proc(pid)) is not None:
                seen["workers_cpu_s"][pid] = info[0]
        if kill_at is not None and _finished(folder) >= kill_at:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            seen["killed"] = True
            break
        time.sleep(0.5)
    seen["wall_s"] = time.monotonic() - start
    seen["workers_cpu_s"] = sum(seen["workers_cpu_s"].values())
    return seen


def _children(parent: int) -> list[int]:
    """xdist workers: the session's children that are not a run's harness."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes()
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == parent and b"pytest_rexmle.schedule.perform" not in cmd:
                out.append(int(entry.name))
    return out


def _finished(folder: Path) -> int:
    status = sorted((folder / ".rexmle" / "runs" / ".schedule").glob("*/status.json"))
    try:
        return int(json.loads(status[-1].read_text()).get("finished") or 0) if status else 0
    except (OSError, ValueError):
        return 0


def finished_runs(folder: Path) -> dict[str, list[str]]:
    """Each item's finished run folders, by its run.json's task and repeat."""
    out: dict[str, list[str]] = {}
    for path in (folder / ".rexmle" / "runs").glob("*/*/*/run.json"):
        meta = json.loads(path.read_text())
        if meta.get("finished"):
            out.setdefault(f"{meta['task']}#{meta.get('repeat') or 1}", []).append(str(path.parent))
    return out


def scale(root: Path, runs: int, sleep: float, xdist: int, kill_at: int | None, cache: Path) -> bool:
    """A campaign of ``runs`` sleeping runs; with ``kill_at`` killed and resumed. True when every check held."""
    folder = root / f"scale-{runs}"
    folder.mkdir(parents=True)
    env = {**os.environ, "REXMLE_CACHE_DIR": str(cache)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the session's imports from cached byte code, as a user's are
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--agent=command",
            f"--agent-option=cmd=sleep {sleep:g}", "--rexmle-data=synthetic", "--rexmle-judge=none",
            f"--rexmle-repeat={runs // 20}", "--junitxml=junit.xml", *(["-n", str(xdist)] if xdist else [])]
    sessions = [watched(folder, argv, env, kill_at)]
    before = finished_runs(folder) if kill_at is not None else {}
    if kill_at is not None:
        sessions.append(watched(folder, [*argv, "--rexmle-resume"], env))
    doc = json.loads((folder / ".rexmle" / "report" / "latest" / "rexmle-report.json").read_text())
    reported = [row["run_dir"] for row in doc["tasks"]]
    import xml.etree.ElementTree as ET

    cases = [(c.get("classname"), c.get("name")) for c in ET.parse(folder / "junit.xml").iter("testcase")]
    after = finished_runs(folder)
    lost = sum(1 for item, dirs in before.items() for d in dirs if d not in reported)
    duplicated = sum(len(dirs) - 1 for dirs in after.values() if len(dirs) > 1)
    name = f"{runs} runs, {'-n ' + str(xdist) if xdist else 'one process'}" + (f", kill -9 at {kill_at}" if kill_at else "")
    print(f"{name}: {(folder / 'session.log').read_text().strip().splitlines()[-1]}")
    for i, seen in enumerate(sessions):
        label = "resumed" if i else ("killed" if seen["killed"] else "session")
        print(f"  {label}: wall {seen['wall_s']:.0f} s; controller CPU {seen['cpu_s']:.1f} s "
              f"({1000 * seen['cpu_s'] / runs:.0f} ms per run), peak RSS {seen['peak_rss_mib']:.0f} MiB; "
              f"xdist workers' CPU {seen['workers_cpu_s']:.1f} s")
    if kill_at is not None:
        print(f"  finished before the kill: {sum(len(d) for d in before.values())}; lost {lost}, duplicated {duplicated}")
    once = len(reported) == len(set(reported)) == runs and len(cases) == len(set(cases)) == runs
    print(f"  report rows {len(reported)} ({len(set(reported))} distinct run folders), JUnit cases {len(cases)} "
          f"({len(set(cases))} distinct), finished run folders {sum(len(d) for d in after.values())}")
    return once and lost == 0 and duplicated == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every duration (default 1)")
    parser.add_argument("--bound", type=float, default=1.05)
    parser.add_argument("--keep", action="store_true", help="keep the session folders")
    parser.add_argument("--runs", type=int, help="measure a campaign of this many sleeping runs (a multiple of 20)")
    parser.add_argument("--sleep", type=float, default=0.2, help="--runs: each agent's seconds (default 0.2)")
    parser.add_argument("--xdist", type=int, default=0, help="--runs: xdist workers (default: one process)")
    parser.add_argument("--kill-at", type=int, help="--runs: kill -9 the session after this many runs, then resume")
    parser.add_argument("--cache", type=Path, help="the synthetic twins' cache (default: a fresh one)")
    args = parser.parse_args()
    seconds = durations(args.scale)
    root = Path(tempfile.mkdtemp(prefix="rexmle-bench-campaign-", dir=os.environ.get("REXMLE_BENCH_DIR")))
    cache = args.cache or root / "cache"
    ok = True
    try:
        if args.runs:
            if args.runs % 20:
                parser.error("--runs: a multiple of the 20 challenges")
            return 0 if scale(root, args.runs, args.sleep, args.xdist, args.kill_at, cache) else 1
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
