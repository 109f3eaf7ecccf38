"""The Slurm runtime on a real cluster (``.ci/slurm-setup.sh`` starts a one-node one; no fake scheduler).

Every benchmark here runs as real ``sbatch`` jobs; job states come from ``sacct``/``squeue``. Tests that
interrupt a session run pytest as a plain subprocess so they can signal it while its jobs are in flight.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from ..conftest import AGENTS, report_json, run_folders
from ..procs import terminal_sigint

REFERENCE_TASKS = ("ldct-iqa", "topcow-cta-det", "isles22")


@pytest.fixture
def slurm_env(monkeypatch, needs_slurm):
    monkeypatch.setenv("REXMLE_SLURM_POLL_SECONDS", "1")
    monkeypatch.setenv("REXMLE_SLURM_PROBE_SECONDS", "600")  # a busy test cluster must not skip the probe


def _records(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((folder / ".rexmle" / "runs").glob("*/*/*/run.json"))]


def _job_ids(folder: Path) -> list[str]:
    return [r["slurm"]["job_id"] for r in _records(folder) if r.get("slurm")]


def _queued(job_ids: list[str]) -> list[str]:
    """The given jobs that squeue still lists (pending, running or completing)."""
    if not job_ids:
        return []
    out = subprocess.run(["squeue", "-h", "-o", "%i %T", "-j", ",".join(job_ids)], capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if line.strip()]


def _wait_until_gone(job_ids: list[str], seconds: float = 60) -> list[str]:
    deadline = time.monotonic() + seconds
    while (left := _queued(job_ids)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def _sacct_state(job_id: str) -> str:
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "State", "-j", job_id], capture_output=True, text=True)
    return out.stdout.strip().split(" ")[0]


def _jobs_from(workdir: Path, since: str) -> list[str]:
    """Every job (any state) submitted from ``workdir`` since ``since``: how many jobs a test really made."""
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-S", since, "-o", "JobID,JobName,WorkDir"],
                         capture_output=True, text=True, check=True).stdout
    return [line.split("|")[0] for line in out.splitlines()
            if line.count("|") == 2 and line.split("|")[2] == str(workdir) and line.split("|")[1] != "rexmle-probe"]


def _alive(marker: str) -> list[str]:
    from ..procs import processes_matching  # /proc, not pgrep: procps is not on a minimal system

    return processes_matching(marker)


def _spawn(bench, *args: str) -> subprocess.Popen:
    """pytest in the background in the bench folder (same options as ``bench``), for signalling."""
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rexmle-data=synthetic",
            "--rexmle-runtime=slurm", *args]
    log = open(bench.path / f"session-{uuid.uuid4().hex[:6]}.log", "wb")
    return subprocess.Popen(argv, cwd=bench.path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=terminal_sigint)


def _wait_for(predicate, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}")


def _running(job_ids: list[str]) -> bool:
    return bool(job_ids) and all(_sacct_state(j) == "RUNNING" for j in job_ids)


def test_reference_tasks_give_the_same_results_as_the_local_runtime(bench, slurm_env, needs_bwrap):
    select = " or ".join(REFERENCE_TASKS)
    bench("--agent=sample", "-k", select).assert_outcomes(passed=3)
    local = {r["task_id"]: r for r in report_json(bench.path)["tasks"]}
    # a few seconds of agent time, so the items wait long enough to print the scheduler's progress
    result = bench("--agent=sample", "--agent-option=delay=5", "--rexmle-runtime=slurm", "-k", select)
    result.assert_outcomes(passed=3)
    result.stdout.re_match_lines([r"slurm: \d+ (submitted|pending|running)"])  # progress while the session waits
    slurm = {r["task_id"]: r for r in report_json(bench.path)["tasks"]}
    assert sorted(slurm) == sorted(REFERENCE_TASKS)
    for task in REFERENCE_TASKS:
        assert slurm[task]["status"] == local[task]["status"] == "ok"
        assert slurm[task]["metrics"] == local[task]["metrics"], task
        assert slurm[task]["percentile"] == local[task]["percentile"], task
        assert slurm[task]["positions"] == local[task]["positions"], task
    records = [r for r in _records(bench.path) if r["runtime"] == "slurm"]
    assert len(records) == 3
    for record in records:
        assert _sacct_state(record["slurm"]["job_id"]) == "COMPLETED"
        assert record["node"] and record["sandbox"] == "bwrap" and record["exit_code"] == 0
        # the spec carries --rexmle-network to the node's inner runtime: the default, the node's gateway
        assert record["network"] == "gateway" and record["usage"]["source"] == "gateway"
    # a campaign: every job was submitted before the first one had finished
    assert max(r["started"] for r in records) < min(r["finished"] for r in records)


def test_hostile_agent_on_a_node_finds_no_answers_and_leaves_nothing(bench, slurm_env, needs_bwrap, shared_cache,
                                                                      tmp_path):
    from pytest_rexmle.data.synthetic import ensure_synthetic
    from pytest_rexmle.task import registry

    twin = ensure_synthetic(registry().get("ldct-iqa"), shared_cache)
    escape_target = tmp_path / "escaped.txt"
    cmd = f"HOSTILE_TARGET={escape_target} python agent.py {twin.private}"
    result = bench("--agent=command", f"--agent-option=dir={AGENTS / 'hostile'}", f"--agent-option=cmd={cmd}",
                   "--rexmle-runtime=slurm", "-k", "ldct-iqa")
    result.assert_outcomes(failed=1)  # it writes no submission
    run = run_folders(bench.path, "ldct-iqa")[-1]
    report = json.loads((run / "workspace" / "hostile.json").read_text())
    assert all("/usr/include" in p or "site-packages" in p for p in report["found_names"]), report["found_names"]
    assert not any("answers.csv" in p or "prepare_manifest" in p for p in report["found_names"])
    assert report["found_content"] == [], "the private folder's path must not appear in any visible file"
    assert max(pid for pid, _ in report["processes"]) < 20, report["processes"]  # its own PID namespace
    assert report["wrote"] == [] and not escape_target.exists()
    for leftover in ("/etc/rexmle-hostile", "/usr/rexmle-hostile", "/rexmle-hostile", "/root/rexmle-hostile"):
        assert not os.path.exists(leftover)
    assert not (twin.public / "rexmle-hostile").exists()
    record = json.loads((run / "run.json").read_text())
    # the inner runtime staged the run on the node (runtime/staging.py): its mounts named no run folder
    assert record["host_paths_hidden"] is True and not (run / "stage.json").exists(), record
    job = record["slurm"]["job_id"]
    assert _wait_until_gone([job]) == []
    assert _alive(f"agent.py {twin.private}") == []


def test_sleeper_past_its_limit_is_a_fail_and_leaves_no_job_or_process(bench, slurm_env, needs_bwrap):
    marker = f"sleeper-{uuid.uuid4().hex[:8]}"
    result = bench("--agent=command", f"--agent-option=dir={AGENTS / 'sleeper'}",
                   f"--agent-option=cmd=python agent.py {marker}", "--rexmle-time-limit=3",
                   "--rexmle-runtime=slurm", "--rexmle-slurm-partition=debug", "--rexmle-slurm-option=mem=300M",
                   "-k", "ldct-iqa")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*FAIL [[]timeout[]] time limit of 3 s exceeded*"])
    run = run_folders(bench.path, "ldct-iqa")[-1]
    record = json.loads((run / "result.json").read_text())
    assert record["status"] == "timeout" and record["percentile"] == 0.0
    assert 3.0 <= record["timings"]["agent_seconds"] < 10.0
    job = json.loads((run / "run.json").read_text())["slurm"]["job_id"]
    assert _wait_until_gone([job]) == []
    assert _sacct_state(job) == "COMPLETED"  # the inner sandbox, not Slurm, enforced the agent's limit
    # the options reached sbatch; Slurm's --time is the agent's limit plus the 5-minute margin, in minutes
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "Partition,ReqMem,Timelimit", "-j", job],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "debug|300M|00:06:00", out
    assert _alive(marker) == []


def test_job_cancelled_by_slurm_is_a_fail_with_the_slurm_state(bench, slurm_env, needs_bwrap):
    marker = f"sleeper-{uuid.uuid4().hex[:8]}"
    session = _spawn(bench, "--agent=command", f"--agent-option=dir={AGENTS / 'sleeper'}",
                     f"--agent-option=cmd=python agent.py {marker}", "--rexmle-time-limit=600", "-k", "ldct-iqa")
    try:
        jobs = _wait_for(lambda: _running(_job_ids(bench.path)) and _job_ids(bench.path), 240, "a running job")
        _wait_for(lambda: _alive(marker), 60, "the agent to start on the node")
        subprocess.run(["scancel", *jobs], check=True)
        assert session.wait(timeout=180) == 1  # the item fails; the session itself ends normally
    finally:
        session.kill()
    run = run_folders(bench.path, "ldct-iqa")[-1]
    record = json.loads((run / "result.json").read_text())
    assert record["status"] == "missing"
    assert f"Slurm job {jobs[0]} ended CANCELLED" in record["reason"], record["reason"]
    assert _wait_until_gone(jobs) == []
    # slurmd ends a cancelled job's processes (SIGTERM, then SIGKILL after KillWait): soon, but not at once on a
    # loaded machine; the sleeper's own limit is far longer, so a process that survives still fails this
    _wait_for(lambda: _alive(marker) == [], 180, "the cancelled job's processes to end")


def _slow_sample(seconds: int) -> list[str]:
    """The sample agent, waiting before it submits its baseline."""
    return ["--agent=sample", f"--agent-option=delay={seconds}"]


def _detach_kill_9_and_resume(bench, select: list[str]) -> list[str]:
    """A detached session of three runs killed with SIGKILL once its three jobs are queued, then resumed:
    the jobs outlive the session, the resumed session passes all three and submits nothing again.
    Returns the three jobs."""
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 2))
    session = _spawn(bench, *_slow_sample(15), "--rexmle-slurm-detach", *select)
    try:
        jobs = _wait_for(lambda: len(_job_ids(bench.path)) == 3 and _job_ids(bench.path), 240, "three submitted jobs")
        os.killpg(session.pid, signal.SIGKILL)
        session.wait(timeout=30)
    finally:
        session.kill()
    assert len(_queued(jobs)) == 3, "detached jobs must survive the session"
    result = bench(*_slow_sample(15), "--rexmle-runtime=slurm", "--rexmle-resume", *select, timeout=600)
    result.assert_outcomes(passed=3)
    assert sorted(_jobs_from(bench.path, since)) == sorted(jobs), "resume must not submit anything again"
    return jobs


def test_detach_kill_9_and_resume_reattaches_without_resubmitting(bench, slurm_env, needs_bwrap):
    jobs = _detach_kill_9_and_resume(bench, ["-k", "ldct-iqa or topcow-cta-cls or topcow-mra-cls"])
    report = report_json(bench.path)
    assert {r["task_id"]: r["status"] for r in report["tasks"]} == dict.fromkeys(
        ("ldct-iqa", "topcow-cta-cls", "topcow-mra-cls"), "ok")
    for task in ("ldct-iqa", "topcow-cta-cls", "topcow-mra-cls"):
        folders = run_folders(bench.path, task)
        assert len(folders) == 1, folders  # no second run folder either
        meta = json.loads((folders[0] / "run.json").read_text())
        assert meta["slurm"]["job_id"] in jobs and "reattached" in meta and "finished" in meta


def test_each_repeat_reattaches_to_its_own_job(bench, slurm_env, needs_bwrap):
    """--rexmle-repeat: a detached campaign killed with SIGKILL, then resumed: each repeat re-attaches to its
    own job (before, every repeat's key was the same and all of them took the newest job)."""
    jobs = _detach_kill_9_and_resume(bench, ["--rexmle-repeat=3", "-k", "ldct-iqa"])
    report = report_json(bench.path)
    folders = {Path(r["run_dir"]) for r in report["tasks"]}
    assert len(folders) == 3 and set(run_folders(bench.path, "ldct-iqa")) == folders
    metas = [json.loads((f / "run.json").read_text()) for f in folders]
    assert sorted(m["slurm"]["job_id"] for m in metas) == sorted(jobs)  # one job per repeat, each its own
    assert all("reattached" in m and "finished" in m for m in metas)
    assert sorted(m["repeat"] for m in metas) == [1, 2, 3]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_cancels_every_job_of_the_session(bench, slurm_env, needs_bwrap, signum):
    marker = f"sleeper-{uuid.uuid4().hex[:8]}"
    session = _spawn(bench, "--agent=command", f"--agent-option=dir={AGENTS / 'sleeper'}",
                     f"--agent-option=cmd=python agent.py {marker}", "--rexmle-time-limit=600",
                     "-k", "ldct-iqa or topcow-cta-cls or topcow-mra-cls")
    try:
        jobs = _wait_for(lambda: len(_job_ids(bench.path)) == 3 and _job_ids(bench.path), 240, "three submitted jobs")
        _wait_for(lambda: _alive(marker), 120, "an agent to start on the node")
        assert len(_queued(jobs)) == 3
        session.send_signal(signum)
        session.wait(timeout=120)
        assert _wait_until_gone(jobs) == [], f"{signal.Signals(signum).name} must cancel every job of the session"
        assert {_sacct_state(j) for j in jobs} == {"CANCELLED"}
        # slurmd ends a cancelled job's processes (SIGTERM, then SIGKILL after KillWait): gone soon after; 180 s
        # for a loaded 2-core CI machine (60 s once ran out there), well short of the sleepers' own 600 s
        _wait_for(lambda: _alive(marker) == [], 180, "the cancelled jobs' processes to end")
    finally:
        session.kill()
        _cancel_leftovers(bench.path)


def _cancel_leftovers(workdir: Path) -> None:
    """A failed test must not leave 10-minute sleepers holding the one-node cluster for the next tests."""
    leftovers = _job_ids(workdir)
    if leftovers:
        subprocess.run(["scancel", *leftovers], capture_output=True, check=False)


def test_rexmle_status_shows_slurm_states(bench, slurm_env, needs_bwrap):
    session = _spawn(bench, *_slow_sample(30), "--rexmle-slurm-detach",
                     "-k", "ldct-iqa or topcow-cta-cls or topcow-mra-cls")
    try:
        jobs = _wait_for(lambda: len(_job_ids(bench.path)) == 3 and _job_ids(bench.path), 240, "three submitted jobs")
        _wait_for(lambda: any(_sacct_state(j) == "RUNNING" for j in jobs), 120, "a running job")
        out = subprocess.run([sys.executable, "-m", "pytest_rexmle", "status", "--json",
                              "--runs-dir", str(bench.path / ".rexmle" / "runs")],
                             capture_output=True, text=True, check=True).stdout
        rows = json.loads(out)
    finally:
        os.killpg(session.pid, signal.SIGKILL)
        session.wait(timeout=30)
        subprocess.run(["scancel", *_job_ids(bench.path)], capture_output=True)
    live = [r["scheduler"] for r in rows if r.get("scheduler")]
    assert sorted(s["job_id"] for s in live) == sorted(jobs)
    states = {s["state"] for s in live}
    assert "RUNNING" in states and states <= {"RUNNING", "PENDING"}, states
    for s in live:
        if s["state"] == "RUNNING":
            assert s["node"] and s["limit"]
        else:
            assert s["reason"]


@pytest.mark.parametrize("what", ["data", "runs"])
def test_a_path_the_nodes_do_not_share_stops_the_session_with_its_name(bench, slurm_env, tmp_path, what):
    """pytest runs in its own mount namespace with a tmpfs the Slurm daemons cannot see: a host-only folder."""
    if os.geteuid() != 0:
        pytest.skip("needs root for a private mount namespace")
    from ..procs import require_unshare

    require_unshare("--mount", "--propagation", "private")
    private = tmp_path / "host-only"
    private.mkdir()
    option = f"--rexmle-data-dir={private}/data" if what == "data" else f"--rexmle-runs-dir={private}/runs"
    script = (f"mount -t tmpfs none {private} && mkdir -p {private}/data && exec {sys.executable} -m pytest "
              f"-p no:cacheprovider --agent=sample --rexmle-runtime=slurm --rexmle-data=prepared {option} -k ldct-iqa")
    # a session of its own, not an xdist worker's (workers leave the probe to their controller)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], cwd=bench.path,
                          capture_output=True, text=True, timeout=700, env=env)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # a usage error, before any item
    if what == "data":
        assert "compute nodes do not see these paths" in proc.stderr and f"data root {private}/data" in proc.stderr
    else:
        assert f"the runs folder {private}/runs is not shared with the compute nodes" in proc.stderr, proc.stderr
    assert "test_task" not in proc.stdout


def test_xdist_workers_submit_their_own_items(bench, slurm_env, needs_bwrap):
    result = bench("--agent=sample", "--rexmle-runtime=slurm", "-n", "2", "-k", "ldct-iqa or topcow-cta-cls")
    result.assert_outcomes(passed=2)
    records = _records(bench.path)
    assert len(records) == 2 and all(_sacct_state(r["slurm"]["job_id"]) == "COMPLETED" for r in records)
    assert {c["task_id"] for c in report_json(bench.path)["tasks"]} == {"ldct-iqa", "topcow-cta-cls"}


def test_gpu_allocation_reaches_the_agent_and_is_recorded(bench, slurm_env, needs_bwrap):
    """Needs a cluster with GPU gres; CI gives its one node placeholder GPUs (REXMLE_SLURM_FAKE_GPUS)."""
    from ..conftest import require_service

    gres = subprocess.run(["sinfo", "-h", "-o", "%G"], capture_output=True, text=True).stdout
    require_service("gpu" in gres, "REXMLE_REQUIRE_SLURM_GPUS", "a Slurm node with GPU gres")
    bench("--agent=sample", "--rexmle-runtime=slurm", "--rexmle-gpus=none",
          "-k", "ldct-iqa or topcow-cta-cls").assert_outcomes(passed=2)
    seen = set()
    for task in ("ldct-iqa", "topcow-cta-cls"):
        run = run_folders(bench.path, task)[-1]
        # the sample agent's log line names what CUDA_VISIBLE_DEVICES held inside
        visible = (run / "logs" / "agent.stdout.log").read_text().rsplit("(GPUs: ", 1)[1].split(")")[0]
        meta = json.loads((run / "run.json").read_text())
        result = json.loads((run / "result.json").read_text())
        job = meta["slurm"]["job_id"]
        alloc = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "AllocTRES", "-j", job],
                               capture_output=True, text=True, check=True).stdout
        assert "gres/gpu=1" in alloc, alloc  # the task's one GPU was requested and allocated
        # the node's GPU as Slurm allocated it is recorded; inside, the sandbox shows it alone, as CUDA device 0
        assert visible == "0" and meta["gpus"][0] in {"0", "1"} and len(meta["gpus"]) == 1
        assert result["gpu"] == meta["gpus"][0]
        # the hardware facts are the node's own, read by the job there (one node here: the same machine)
        assert meta["node_hardware"]["gpu_count"] == 1 and meta["compute"]["gpu_count"] == 1
        assert meta["compute"]["cpu_model"] == meta["node_hardware"]["cpu_model"]
        seen.add(meta["gpus"][0])
    assert seen


def test_a_queued_job_accounting_has_not_seen_is_still_known(needs_slurm, tmp_path):
    """sacct lags sbatch: the controller's view keeps a just-submitted job from looking unknown (which made
    resume submit it twice and progress skip it)."""
    from pytest_rexmle.runtime.slurm import SlurmRuntime, _controller_state

    job_id = subprocess.run(["sbatch", "--parsable", "--hold", "-o", "/dev/null", "--wrap", "true"],
                            capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
    try:
        held = _controller_state(job_id)
        assert held is not None and held["state"] == "PENDING" and "Held" in held["reason"], held
        rows = SlurmRuntime.live_states([{"slurm": {"job_id": job_id}, "run_dir": str(tmp_path)}])
        assert rows[str(tmp_path)]["job_id"] == job_id and rows[str(tmp_path)]["state"] == "PENDING"
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)
    assert _controller_state("999999999") is None
