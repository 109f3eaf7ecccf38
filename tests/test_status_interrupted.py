"""``rexmle status`` after a session is stopped: Ctrl-C, SIGTERM and ``kill -9`` (issue 20 item 2).

Before: the stopped run stayed "running" with its elapsed time growing (``--running`` listed it too), even
after a resumed session had finished. Each case starts a real benchmark session whose agent sleeps, stops
it once the run has started, and asks the real ``rexmle status``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pytest_rexmle.run.owner import owner_record
from pytest_rexmle.status import collect

from .conftest import SAME_UID_MARK, need_agent_sandbox
from .procs import terminal_sigint


def _start_session(folder: Path, cache: Path, marker: str) -> subprocess.Popen:
    env = {**os.environ, "REXMLE_CACHE_DIR": str(cache)}
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rexmle-data=synthetic", "--agent=command",
           f"--agent-option=cmd=python3 -c 'import time; time.sleep(90)' {marker}", "--rexmle-time-limit=600",
           "--rexmle-judge=none", "-k", "ldct-iqa", "-q"]
    return subprocess.Popen(cmd, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=terminal_sigint)


def _wait_for_run(folder: Path, session: subprocess.Popen, timeout: float = 180) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted((folder / ".rexmle" / "runs" / "ldct-iqa").glob("*/*/run.json"))
        if found and (found[-1].parent / "logs").is_dir():
            time.sleep(2)  # the agent is started right after run.json is written
            return found[-1].parent
        if session.poll() is not None:
            output = session.stdout.read().decode(errors="replace")
            if SAME_UID_MARK in output:  # only Landlock as this user's own uid here: refused for a command agent
                need_agent_sandbox()
            pytest.fail(f"session ended before its run started:\n{output}")
        time.sleep(0.5)
    pytest.fail("no run started in time")


def _status(runs: Path, *extra: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "pytest_rexmle", "status", "--runs-dir", str(runs), *extra],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# a stopped session each; the fast lane keeps Ctrl-C (the others differ only in the signal and its label)
@pytest.mark.parametrize("sig, cause", [(signal.SIGINT, "Ctrl-C"),
                                        pytest.param(signal.SIGTERM, "SIGTERM", marks=pytest.mark.slow),
                                        pytest.param(signal.SIGKILL, "harness gone", marks=pytest.mark.slow)],
                         ids=["ctrl-c", "sigterm", "kill-9"])
def test_stopped_session_shows_interrupted_with_when(tmp_path, shared_cache, sig, cause):
    marker = f"rexmle-status-{uuid.uuid4().hex[:8]}"
    session = _start_session(tmp_path, shared_cache, marker)
    try:
        run = _wait_for_run(tmp_path, session)
        stopped = datetime.now(UTC)
        session.send_signal(sig)  # the harness process only, as kill(1) does; Ctrl-C's KeyboardInterrupt
        session.wait(timeout=120)
    finally:
        if session.poll() is None:
            session.kill()
            session.wait(timeout=30)
    runs = tmp_path / ".rexmle" / "runs"
    deadline = time.monotonic() + 60  # the run's own harness (a child of the session) may still be cleaning up
    while (rows := collect(runs)) and rows[0]["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(rows) == 1
    row = rows[0]
    assert row["state"] == "interrupted", row
    assert cause in row["interrupted_by"]
    when = datetime.fromisoformat(row["interrupted"])
    assert stopped - timedelta(seconds=30) <= when <= datetime.now(UTC)
    first = row["elapsed"]
    assert 0 <= first < 200
    time.sleep(1.5)
    assert collect(runs)[0]["elapsed"] == first, "elapsed time stops at the interruption"
    text = _status(runs)
    line = next(line for line in text.splitlines() if line.startswith("ldct-iqa"))
    assert " interrupted " in line and f"({row['interrupted_by']})" in line and str(run) in line
    assert "no run in progress" in _status(runs, "--running")
    meta = json.loads((run / "run.json").read_text())
    if sig == signal.SIGINT:
        assert meta["interrupted_by"] == "KeyboardInterrupt"
    assert "result.json" not in os.listdir(run)


def test_a_live_owner_is_still_running(tmp_path):
    """The same run.json with this (live) process as owner reads as running, elapsed from its start."""
    run = tmp_path / "isles22" / "sample-abc" / "20260101T110000-1"
    run.mkdir(parents=True)
    started = datetime.now(UTC) - timedelta(minutes=5)
    meta = {"task": "isles22", "agent": "sample", "time_limit": 600, "started": started.isoformat(),
            "owner": owner_record()}
    (run / "run.json").write_text(json.dumps(meta))
    assert collect(tmp_path)[0]["state"] == "running"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (run / "run.json").write_text(json.dumps({**meta, "owner": {**owner_record(), "pid": dead.pid, "start": "1"}}))
    row = collect(tmp_path)[0]
    assert row["state"] == "interrupted" and row["interrupted_by"].startswith("harness gone")


def test_status_names_each_repeat(tmp_path):
    """--rexmle-repeat: each run's line says which repeat it is; a value that is no count is not shown."""
    started = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
    for stamp, repeat in (("20260101T110000-1", 1), ("20260101T110000-2", 2), ("20260101T110000-3", "2; rm -rf")):
        run = tmp_path / "isles22" / "sample-abc" / stamp
        run.mkdir(parents=True)
        (run / "run.json").write_text(json.dumps({"task": "isles22", "agent": "sample", "time_limit": 600,
                                                  "started": started, "owner": owner_record(),
                                                  "repeat": repeat, "repeats": 3}))
    assert sorted(str(r["repeat"]) for r in collect(tmp_path)) == ["1", "2", "None"]
    lines = [line for line in _status(tmp_path).splitlines() if line.startswith("isles22")]
    assert sorted(line.split()[1] for line in lines if line.split()[1].startswith("r")) == ["r1", "r2"]
    assert len(lines) == 3 and "rm -rf" not in "".join(lines)
