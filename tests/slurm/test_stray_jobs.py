"""Issue 23.2's backstop: a Slurm job owned by a run's uid is cancelled when the run ends, and recorded.

Submitting from inside a run is refused at the socket (tests/security: munge's socket is out of reach on
every mechanism). If that ever failed, the job would be the run's uid's, which no one else ever owns: the
local runtime cancels every job of it at the run's end and records the ids in run.json.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import time

import pytest

from pytest_rexmle.runtime.sandbox.uids import cancel_jobs_of


def _job_state(job: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True).stdout.strip()
    return out or "GONE"


def test_jobs_of_a_runs_uid_are_cancelled_and_named(needs_slurm):
    if os.geteuid() != 0:
        pytest.skip("submitting a job as another uid (sbatch --uid) needs a root harness")
    # a system account nothing else on this machine submits as (sbatch --uid needs a passwd entry)
    games = pwd.getpwnam("games")
    submitted = subprocess.run(["sbatch", "--parsable", f"--uid={games.pw_uid}", f"--gid={games.pw_gid}",
                                "--chdir=/tmp", "-o", "/dev/null", "-t", "5", "--wrap", "sleep 240"],
                               capture_output=True, text=True, timeout=30)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    try:
        assert _job_state(job) in ("PENDING", "RUNNING", "CONFIGURING")
        assert cancel_jobs_of(games.pw_uid) == [job]
        deadline = time.monotonic() + 30
        while _job_state(job) not in ("GONE", "CANCELLED") and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _job_state(job) in ("GONE", "CANCELLED")
        assert cancel_jobs_of(games.pw_uid) == []  # nothing left of that uid
    finally:
        subprocess.run(["scancel", job], capture_output=True)


def test_never_for_root_or_the_harness_itself():
    assert cancel_jobs_of(0) == [] and cancel_jobs_of(os.geteuid()) == []
