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
* the campaign's wall clock for both, and the queue wait that dominates it on a small cluster.

Repeats come from a small test module in the campaign folder that requests ``rexmle_result`` under
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


def campaign(folder: Path, runtime_args: list[str], repeats: int, cache: Path) -> float:
    folder.mkdir(parents=True)
    (folder / "test_campaign.py").write_text(REPEAT_MODULE.format(repeats=repeats))
    env = {**os.environ, "REXMLE_CACHE_DIR": str(cache), "REXMLE_SLURM_POLL_SECONDS": "1"}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--agent=sample",
            "--rexmle-data=synthetic", "--rexmle-judge=none", *runtime_args, "test_campaign.py", "-k", "test_repeat"]
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=folder, capture_output=True, text=True, env=env)
    wall = time.monotonic() - start
    (folder / "session.log").write_text(proc.stdout + proc.stderr)
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-500:]
    print(f"  {' '.join(runtime_args) or 'local'}: {tail} ({wall:.1f} s)", flush=True)
    return wall


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
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rexmle-bench-slurm-", dir=os.environ.get("REXMLE_BENCH_DIR")))
    cache = root / "cache"
    print(f"campaign folders under {root}")
    # warm the synthetic twins once, so neither campaign pays for generating them
    os.environ["REXMLE_CACHE_DIR"] = str(cache)
    from pytest_rexmle.data.taskdata import synthetic_data
    from pytest_rexmle.task import registry

    for task in registry():
        synthetic_data(task, seed=0)  # what the sessions' rexmle_data fixture asks for
    slurm_wall = campaign(root / "slurm", ["--rexmle-runtime=slurm"], args.repeats, cache)
    local_wall = campaign(root / "local", ["-n", "2"], args.repeats, cache)

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
    if not args.keep:
        subprocess.run(["rm", "-rf", str(root)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
