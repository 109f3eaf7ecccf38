"""Adversarial checks of the local runtime: what an agent can see, write, and leave running."""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import pytest

from pytest_rexmle.runtime.base import RuntimeUnavailable
from pytest_rexmle.runtime.local import LocalRuntime

from .conftest import AGENTS, run_folders


def _latest_run(bench, task_id: str):
    folders = run_folders(bench.path, task_id)
    assert folders, f"no run folder for {task_id}"
    return folders[-1]


def test_hostile_agent_finds_no_answers_and_leaves_no_files(bench, needs_bwrap, shared_cache, tmp_path):
    from pytest_rexmle.data.synthetic import ensure_synthetic
    from pytest_rexmle.task import registry

    twin = ensure_synthetic(registry().get("ldct-iqa"), shared_cache)
    # a value that occurs in the private answers but nowhere in the public data
    answers = (twin.private / "answers.csv").read_text()
    public_text = (twin.public / "sample_submission.csv").read_text() + (twin.public / "train_labels.csv").read_text()
    assert "image_id,quality_score" in answers
    escape_target = tmp_path / "escaped.txt"
    cmd = f"HOSTILE_TARGET={escape_target} python agent.py {twin.private}"
    result = bench("--agent=command", f"--agent-option=dir={AGENTS / 'hostile'}", f"--agent-option=cmd={cmd}",
                   "-k", "ldct-iqa")
    result.assert_outcomes(failed=1)  # it writes no submission
    report = json.loads((_latest_run(bench, "ldct-iqa") / "workspace" / "hostile.json").read_text())
    assert report["found_names"] == [] or all("/usr/include" in p or "site-packages" in p for p in report["found_names"]), report["found_names"]
    assert not any("answers.csv" in p or "prepare_manifest" in p for p in report["found_names"])
    assert report["found_content"] == [], "the private folder's path string must not appear in any visible file"
    # a fresh PID namespace: bwrap's init as pid 1 and the agent's own processes, nothing of the host
    cmdlines = [cmd for _, cmd in report["processes"]]
    assert max(pid for pid, _ in report["processes"]) < 20, report["processes"]
    assert all(cmd.startswith("/usr/bin/bwrap ") or "agent.py" in cmd for cmd in cmdlines), cmdlines
    assert report["wrote"] == [], f"wrote outside the run folders: {report['wrote']}"
    assert not escape_target.exists()
    for leftover in ("/etc/rexmle-hostile", "/usr/rexmle-hostile", "/rexmle-hostile", "/root/rexmle-hostile"):
        assert not __import__("os").path.exists(leftover)
    assert not (twin.public / "rexmle-hostile").exists()
    del public_text


def _alive(marker: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def test_time_limit_kills_the_whole_tree_and_is_a_fail(bench, needs_bwrap):
    marker = f"sleeper-{uuid.uuid4().hex[:8]}"
    start = time.monotonic()
    result = bench("--agent=command", f"--agent-option=dir={AGENTS / 'sleeper'}",
                   f"--agent-option=cmd=python agent.py {marker}", "--rexmle-time-limit=2", "-k", "ldct-iqa")
    elapsed = time.monotonic() - start
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*FAIL [[]timeout[]] time limit of 2 s exceeded*"])
    # pytest start-up (~2 s) + the 2 s limit + the kill: well within "a few seconds of the limit"
    assert elapsed < 15, elapsed
    time.sleep(0.5)
    assert _alive(marker) == []
    record = json.loads((_latest_run(bench, "ldct-iqa") / "result.json").read_text())
    assert record["status"] == "timeout" and record["percentile"] == 0.0
    assert 2.0 <= record["timings"]["agent_seconds"] < 6.0


def test_contract_environment_and_read_only_data(bench, needs_bwrap):
    result = bench("--agent=command", f"--agent-option=dir={AGENTS / 'echo'}", "--agent-option=cmd=python agent.py",
                   "-k", "ldct-iqa", "--rexmle-time-limit=120")
    result.assert_outcomes(passed=1)
    run = _latest_run(bench, "ldct-iqa")
    echo = json.loads((run / "workspace" / "echo.json").read_text())
    from pytest_rexmle.task import tasks_root

    assert echo["env"].pop("REXMLE_TASKS_DIR") == str(tasks_root().resolve())
    assert echo["env"] == {"REXMLE_TASK": "ldct-iqa", "REXMLE_DATA_DIR": "/rexmle/data",
                           "REXMLE_WORKSPACE": "/rexmle/workspace", "REXMLE_SUBMISSION_DIR": "/rexmle/submission",
                           "REXMLE_INSTRUCTIONS": "/rexmle/instructions.md", "REXMLE_TIME_LIMIT": "120",
                           "CUDA_VISIBLE_DEVICES": ""}
    assert echo["cwd"] == "/rexmle/workspace/agent"
    assert echo["data_writable"] is False
    assert echo["instructions_mentions_validate"] is True
    assert "description.md" in echo["listing"] and "sample_submission.csv" in echo["listing"]
    assert (run / "submission" / "submission.csv").is_file()


def test_validator_runs_inside_the_sandbox(bench, needs_bwrap):
    cmd = ("cp $REXMLE_DATA_DIR/sample_submission.csv $REXMLE_SUBMISSION_DIR/submission.csv && "
           "rexmle validate --submission $REXMLE_SUBMISSION_DIR > $REXMLE_WORKSPACE/ok.txt; "
           "printf 'image_id,quality_score\\n' > $REXMLE_WORKSPACE/bad.csv; mkdir -p $REXMLE_WORKSPACE/bad; "
           "mv $REXMLE_WORKSPACE/bad.csv $REXMLE_WORKSPACE/bad/submission.csv; "
           "rexmle validate --submission $REXMLE_WORKSPACE/bad > $REXMLE_WORKSPACE/bad.txt; echo $? >> $REXMLE_WORKSPACE/bad.txt")
    bench("--agent=command", f"--agent-option=cmd={cmd}", "-k", "ldct-iqa").assert_outcomes(passed=1)
    run = _latest_run(bench, "ldct-iqa")
    assert (run / "workspace" / "ok.txt").read_text().startswith("OK: 15 test case(s)")
    bad = (run / "workspace" / "bad.txt").read_text().splitlines()
    assert bad[0].startswith("INVALID: submission.csv: missing test case(s) '1000'") and bad[-1] == "1"


def test_local_runtime_refuses_without_bubblewrap_unless_unsafe():
    runtime = LocalRuntime()
    runtime.bwrap = None
    with pytest.raises(RuntimeUnavailable, match="apt-get install bubblewrap.*--rexmle-unsafe-local"):
        runtime.check()
    unsafe = LocalRuntime(unsafe=True)
    unsafe.check()
    assert not unsafe.sandboxed


def test_unsafe_local_runs_without_a_sandbox(bench):
    result = bench("--agent=sample", "--rexmle-unsafe-local", "-k", "ldct-iqa")
    result.assert_outcomes(passed=1)
    meta = json.loads((_latest_run(bench, "ldct-iqa") / "run.json").read_text())
    assert meta["sandbox"] == "none"
