"""A Slurm campaign costs the submitting host a few processes, not one waiting process per job (issue 39.3).

Every job is submitted by a short harness (at most ``BATCH_CHILDREN`` at once) that exits once the job is
queued; the executor's one watcher asks ``sacct`` for every job in one call per poll; a job that ended gets
a short harness that records it. A session killed with SIGKILL leaves no process to cancel its jobs, so each
job stops itself when the session's heartbeat stands still.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import time
from pathlib import Path

from pytest_rexmle.schedule.executor import BATCH_CHILDREN

from ..conftest import report_json
from ..procs import processes_matching
from .test_slurm_runtime import _job_ids, _slow_sample, _spawn, _wait_for, _wait_until_gone, slurm_env  # noqa: F401  (fixture)

SUBMIT = "cp $REXMLE_DATA_DIR/sample_submission.csv $REXMLE_SUBMISSION_DIR/submission.csv"


def _counting_shims(folder: Path) -> Path:
    """``sacct`` and ``squeue`` first on PATH, each appending a line to ``calls.log`` before the real one."""
    folder.mkdir()
    for tool in ("sacct", "squeue"):
        real = shutil.which(tool)
        assert real is not None
        shim = folder / tool
        shim.write_text(f'#!/bin/sh\necho "$PPID {tool} $*" >> {folder}/calls.log\nexec {real} "$@"\n')
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return folder


def _harnesses_of(parent: int) -> list[str]:
    """The run harnesses the session started (its children running ``perform``): a harness's own forks for
    ``sbatch`` carry the same command line until they exec, so the parent is what tells them apart."""
    found = []
    for line in processes_matching("pytest_rexmle.schedule.perform"):
        pid = line.split(" ", 1)[0]
        try:
            stat_line = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if int(stat_line.rsplit(")", 1)[1].split()[1]) == parent:
            found.append(line)
    return found


def test_a_campaign_keeps_a_few_harness_processes_and_one_sacct_per_poll(bench, slurm_env, needs_bwrap, tmp_path,  # noqa: F811
                                                                         monkeypatch):
    shims = _counting_shims(tmp_path / "shims")
    monkeypatch.setenv("PATH", f"{shims}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("REXMLE_SLURM_POLL_SECONDS", "2")
    started = time.monotonic()
    session = _spawn(bench, *_slow_sample(4), "--rexmle-judge=none")
    most = 0
    try:
        while session.poll() is None and time.monotonic() - started < 900:
            most = max(most, len(_harnesses_of(session.pid)))
            time.sleep(0.2)
    finally:
        if session.poll() is None:
            os.killpg(session.pid, signal.SIGKILL)
    elapsed = time.monotonic() - started
    assert session.returncode == 0, next(bench.path.glob("session-*.log")).read_text()[-3000:]
    rows = report_json(bench.path)["tasks"]
    assert len(rows) == 20 and {r["status"] for r in rows} == {"ok"}
    assert 1 <= most <= BATCH_CHILDREN, f"{most} run harnesses alive at once"
    # (the shims reach the jobs too: a job's own check for stray jobs of its agent's uid runs on the node)
    calls = [line for line in (shims / "calls.log").read_text().splitlines() if " squeue -h -u " not in line]
    # every sacct/squeue is the session's own: its start's probe, then the watcher's one per 2 s poll; a harness
    # that records an ended job takes the watcher's answer instead of asking again
    callers = {line.split(" ", 1)[0] for line in calls}
    assert callers == {str(session.pid)}, [line for line in calls if not line.startswith(f"{session.pid} ")][:5]
    assert len(calls) <= elapsed / 2 + 3, (len(calls), elapsed)


def test_a_killed_sessions_jobs_stop_themselves(bench, slurm_env, needs_bwrap, monkeypatch):  # noqa: F811
    monkeypatch.setenv("REXMLE_SESSION_STALE_SECONDS", "20")
    session = _spawn(bench, "--agent=command", f"--agent-option=cmd=sleep 613; {SUBMIT}", "--rexmle-time-limit=900",
                     "-k", "ldct-iqa or topcow-cta-cls")
    try:
        jobs = _wait_for(lambda: len(_job_ids(bench.path)) == 2 and _job_ids(bench.path), 240, "two submitted jobs")
        _wait_for(lambda: processes_matching("sleep 613"), 180, "an agent to start on the node")
        os.killpg(session.pid, signal.SIGKILL)
        session.wait(timeout=30)
    finally:
        session.kill()
    assert _wait_until_gone(jobs, seconds=120) == [], "the jobs of a killed session must stop within the stale time"
    _wait_for(lambda: processes_matching("sleep 613") == [], 60, "the stopped jobs' agents to end")
