"""Benchmark: a campaign of short runs through Slurm versus the local runtime with ``-n 2``.

Run ``python benchmarks/bench_slurm.py`` on a machine with a Slurm cluster (``sudo .ci/slurm-setup.sh``
starts a one-node one). It runs the ``sample`` agent on every challenge ``--repeats`` times (default
5 × 20 = 100 runs, synthetic data) twice, each in a fresh folder:

* ``slurm``: one plain pytest process with ``--rexmle-runtime=slurm`` (every run submitted at session
  start, one job each);
* ``local -n 2``: the same runs in the bubblewrap sandbox on two xdist workers.

It reports, from the run folders and ``sacct``:

* submission rate: jobs / (last ``sbatch`` answered − first run prepared), in jobs/s;
* harness overhead per run, over the job's own time (sacct Start→End): the submit latency (run
  prepared → ``sbatch`` answered), the node-side start-up (job time − the agent's own duration:
  Python, unpickling, sandbox set-up) and the notice latency (job end → the harness recorded it);
* the campaign's wall clock for both, and the queue wait that dominates it on a small cluster;
* the Slurm session's controller: CPU seconds, peak resident memory, the most run harnesses alive at once
  and the ``sacct``/``squeue`` calls per poll interval (shims on PATH count them).

``--sleep S`` replaces the sample agent by a command agent that sleeps S seconds (jobs that only sleep,
``--rexmle-repeat`` for the repeats): what the login node pays per run without the graders' work. Every
campaign then checks that no job of it is left in the queue and that every run is in the report and in
JUnit exactly once.

Otherwise repeats come from a small test module in the campaign folder that requests ``rexmle_result`` under
``@pytest.mark.parametrize("repeat", ...)``, so one session holds every run. Not a test: pytest never
collects it (it lives outside ``tests/``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPEAT_MODULE = '''
import pytest


@pytest.mark.parametrize("repeat", range({repeats}))
def test_repeat(rexmle_result, repeat):
    assert rexmle_result.status == "ok"
'''


def shims(folder: Path) -> Path:
    """``sacct`` and ``squeue`` first on PATH, each appending its caller's pid and arguments to ``calls.log``."""
    folder.mkdir(parents=True, exist_ok=True)
    for tool in ("sacct", "squeue"):
        real = subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True, text=True).stdout.strip()
        (folder / tool).write_text(f'#!/bin/sh\necho "$PPID {tool} $*" >> {folder}/calls.log\nexec {real} "$@"\n')
        (folder / tool).chmod(0o755)
    return folder


def _proc(pid: int) -> tuple[float, int, int] | None:
    """(CPU seconds, resident KiB, ppid) of a live process, from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                   if line.startswith("VmRSS:"))
    except (OSError, StopIteration, IndexError, ValueError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks, rss, int(fields[1])


def _harnesses(parent: int) -> int:
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"pytest_rexmle.schedule.perform" in cmd and (info := _proc(int(entry.name))) and info[2] == parent:
                count += 1
    return count


def campaign(folder: Path, runtime_args: list[str], repeats: int, cache: Path, sleep: float | None = None
             ) -> tuple[float, dict]:
    """One session in ``folder``; returns its wall time and what was seen of the controller meanwhile: its
    CPU seconds and peak resident memory, the most run harnesses it had at once, and every sacct/squeue
    call (a shim on PATH counts them, the node's own calls for stray jobs aside)."""
    folder.mkdir(parents=True)
    if sleep is None:
        (folder / "test_campaign.py").write_text(REPEAT_MODULE.format(repeats=repeats))
        agent = ["--agent=sample", "test_campaign.py", "-k", "test_repeat"]
    else:
        agent = ["--agent=command", f"--agent-option=cmd=sleep {sleep:g}", f"--rexmle-repeat={repeats}"]
    calls = shims(folder / "shims")
    env = {**os.environ, "REXMLE_CACHE_DIR": str(cache), "REXMLE_SLURM_POLL_SECONDS": "5",
           "PATH": f"{calls}{os.pathsep}{os.environ['PATH']}"}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--junitxml=junit.xml",
            "--rexmle-data=synthetic", "--rexmle-judge=none", *runtime_args, *agent]
    start = time.monotonic()
    log = open(folder / "session.log", "w")
    proc = subprocess.Popen(argv, cwd=folder, stdout=log, stderr=subprocess.STDOUT, env=env)
    seen = {"cpu_s": 0.0, "peak_rss_mib": 0.0, "harnesses_max": 0}
    while proc.poll() is None:
        if (info := _proc(proc.pid)) is not None:
            seen["cpu_s"], seen["peak_rss_mib"] = info[0], max(seen["peak_rss_mib"], info[1] / 1024)
        seen["harnesses_max"] = max(seen["harnesses_max"], _harnesses(proc.pid))
        time.sleep(0.5)
    wall = time.monotonic() - start
    log.close()
    lines = (calls / "calls.log").read_text().splitlines() if (calls / "calls.log").exists() else []
    own = [line for line in lines if " squeue -h -u " not in line]
    seen.update(calls=len(own), calls_per_poll=len(own) / max(1.0, wall / 5.0),
                callers=len({line.split(" ", 1)[0] for line in own}))
    seen.update(exactly_once(folder, 20 * repeats))
    text = (folder / "session.log").read_text().strip().splitlines()
    print(f"  {' '.join(runtime_args) or 'local'}: {text[-1] if text else '(no output)'} ({wall:.1f} s)", flush=True)
    return wall, seen


def exactly_once(folder: Path, runs: int) -> dict:
    """Jobs of the campaign still queued (its run folders' jobs that squeue still lists), and whether every run
    is in the report and in JUnit exactly once."""
    import xml.etree.ElementTree as ET

    doc = json.loads((folder / ".rexmle" / "report" / "latest" / "rexmle-report.json").read_text())
    rows = [row["run_dir"] for row in doc["tasks"]]
    cases = [(c.get("classname"), c.get("name")) for c in ET.parse(folder / "junit.xml").iter("testcase")]
    jobs = {str(r["slurm"]["job_id"]) for r in records(folder) if r.get("slurm")}
    queued = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.split()
    return {"report_rows": len(rows), "report_once": len(set(rows)) == len(rows) == runs, "junit_cases": len(cases),
            "junit_once": len(set(cases)) == len(cases) == runs, "jobs_left": len(jobs & set(queued))}


def records(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((folder / ".rexmle" / "runs").glob("*/*/*/run.json"))]


def sacct_times(job_ids: list[str]) -> dict[str, tuple[float, float]]:
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "JobID,Start,End", "-j", ",".join(job_ids)],
                         capture_output=True, text=True, check=True).stdout
    times = {}
    for line in out.splitlines():
        job, start, end = line.split("|")
        if start[:1].isdigit() and end[:1].isdigit():
            times[job] = (datetime.fromisoformat(start).timestamp(), datetime.fromisoformat(end).timestamp())
    return times


def ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs per challenge (default 5: 100 runs)")
    parser.add_argument("--keep", action="store_true", help="keep the campaign folders")
    parser.add_argument("--slurm-only", action="store_true", help="skip the local -n 2 campaign")
    parser.add_argument("--sleep", type=float, help="jobs that sleep this many seconds (a command agent), not sample")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rexmle-bench-slurm-", dir=os.environ.get("REXMLE_BENCH_DIR")))
    cache = root / "cache"
    print(f"campaign folders under {root}")
    # warm the synthetic twins once, so neither campaign pays for generating them
    os.environ["REXMLE_CACHE_DIR"] = str(cache)
    from pytest_rexmle.data.synthetic import ensure_synthetic
    from pytest_rexmle.task import registry

    for task in registry():
        ensure_synthetic(task, seed=0)  # what the sessions' rexmle_data fixture asks for
    slurm_wall, controller = campaign(root / "slurm", ["--rexmle-runtime=slurm"], args.repeats, cache, args.sleep)
    local_wall = (campaign(root / "local", ["-n", "2"], args.repeats, cache, args.sleep)[0] if not args.slurm_only
                  else float("nan"))

    runs = [r for r in records(root / "slurm") if r.get("slurm")]
    job_ids = [r["slurm"]["job_id"] for r in runs]
    times = sacct_times(job_ids)
    prepared = [ts(r["started"]) for r in runs]
    submitted = [ts(r["slurm"]["submitted"]) for r in runs]
    rate = len(runs) / max(1e-9, max(submitted) - min(prepared))
    submit_latency = [s - p for s, p in zip(submitted, prepared, strict=True)]
    job_time, node_startup, notice, queue = [], [], [], []
    for r, sub in zip(runs, submitted, strict=True):
        job = times.get(r["slurm"]["job_id"])
        if job is None or "finished" not in r:
            continue
        job_time.append(job[1] - job[0])
        node_startup.append(job[1] - job[0] - r["duration"])
        notice.append(ts(r["finished"]) - job[1])
        queue.append(job[0] - sub)
    local_runs = records(root / "local")
    print()
    print(f"runs: slurm {len(runs)} (sacct times for {len(job_time)}), local {len(local_runs)}")
    print(f"submission rate: {rate:.1f} jobs/s ({len(runs)} jobs in {max(submitted) - min(prepared):.1f} s, "
          f"median sbatch latency {median(submit_latency) * 1000:.0f} ms)")
    print(f"job's own time (sacct start→end): median {median(job_time):.1f} s")
    print(f"harness overhead per run: node start-up {median(node_startup):.1f} s (job time − agent time), "
          f"notice {median(notice):.1f} s (job end → recorded), submit {median(submit_latency):.2f} s")
    print(f"queue wait: median {median(queue):.1f} s, max {max(queue, default=float('nan')):.1f} s")
    print(f"campaign wall clock: slurm {slurm_wall:.1f} s, local -n 2 {local_wall:.1f} s "
          f"(ratio {slurm_wall / local_wall:.2f})")
    print(f"controller (the pytest process): {controller['cpu_s']:.1f} s CPU, peak RSS {controller['peak_rss_mib']:.0f} "
          f"MiB, at most {controller['harnesses_max']} run harness(es) at once; {controller['calls']} sacct/squeue "
          f"calls from {controller['callers']} process(es), {controller['calls_per_poll']:.2f} per 5 s poll interval")
    print(f"jobs left in the queue: {controller['jobs_left']}; report rows {controller['report_rows']} (each run once: "
          f"{controller['report_once']}), JUnit cases {controller['junit_cases']} (once: {controller['junit_once']})")
    if not args.keep:
        subprocess.run(["rm", "-rf", str(root)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
