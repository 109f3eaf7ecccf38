"""Adversarial checks of the local runtime: what an agent can see, write, and leave running."""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest

from pytest_rexmle.runtime.base import RuntimeUnavailable
from pytest_rexmle.runtime.local import LocalRuntime

from .conftest import AGENTS, run_folders
from .sandbox.conftest import require_mechanism


@pytest.fixture(params=["bwrap", "landlock"])
def sandbox(request) -> str:
    """Each end-to-end check runs under both local sandbox mechanisms (forced with --rexmle-sandbox)."""
    require_mechanism(request.param)
    return request.param


def _latest_run(bench, task_id: str):
    folders = run_folders(bench.path, task_id)
    assert folders, f"no run folder for {task_id}"
    return folders[-1]


@pytest.mark.slow  # an attack session per mechanism
def test_hostile_agent_finds_no_answers_and_leaves_no_files(bench, sandbox, shared_cache, tmp_path):
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
                   "-k", "ldct-iqa", f"--rexmle-sandbox={sandbox}")
    result.assert_outcomes(failed=1)  # it writes no submission
    report = json.loads((_latest_run(bench, "ldct-iqa") / "workspace" / "hostile.json").read_text())
    assert report["found_content"] == [], "the private folder's path string must not appear in any readable file"
    assert report["wrote"] == [], f"wrote outside the run folders: {report['wrote']}"
    if sandbox == "landlock":  # Landlock hides no name (documented); contents and writes are what it guards
        assert not escape_target.exists() and not (twin.public / "rexmle-hostile").exists()
        return
    assert report["found_names"] == [] or all("/usr/include" in p or "site-packages" in p for p in report["found_names"]), report["found_names"]
    assert not any("answers.csv" in p or "prepare_manifest" in p for p in report["found_names"])
    # a fresh PID namespace: bwrap's init as pid 1 and the agent's own processes, nothing of the host
    cmdlines = [cmd for _, cmd in report["processes"]]
    assert max(pid for pid, _ in report["processes"]) < 20, report["processes"]
    assert all(cmd.startswith("/usr/bin/bwrap ") or "agent.py" in cmd for cmd in cmdlines), cmdlines
    assert not escape_target.exists()
    for leftover in ("/etc/rexmle-hostile", "/usr/rexmle-hostile", "/rexmle-hostile", "/root/rexmle-hostile"):
        assert not __import__("os").path.exists(leftover)
    assert not (twin.public / "rexmle-hostile").exists()
    del public_text


def _alive(marker: str) -> list[str]:
    from .procs import processes_matching  # /proc, not pgrep: procps is not on a minimal system

    return processes_matching(marker)


def test_time_limit_kills_the_whole_tree_and_is_a_fail(bench, sandbox):
    marker = f"sleeper-{uuid.uuid4().hex[:8]}"
    start = time.monotonic()
    result = bench("--agent=command", f"--agent-option=dir={AGENTS / 'sleeper'}",
                   f"--agent-option=cmd=python agent.py {marker}", "--rexmle-time-limit=2", "-k", "ldct-iqa",
                   f"--rexmle-sandbox={sandbox}")
    elapsed = time.monotonic() - start
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*FAIL [[]timeout[]] time limit of 2 s exceeded*"])
    # pytest start-up and report (several seconds on a loaded 2-core CI box) + the 2 s limit + the kill;
    # the precise check is agent_seconds below
    assert elapsed < 40, elapsed
    time.sleep(0.5)
    assert _alive(marker) == []
    record = json.loads((_latest_run(bench, "ldct-iqa") / "result.json").read_text())
    assert record["status"] == "timeout" and record["percentile"] == 0.0
    assert 2.0 <= record["timings"]["agent_seconds"] < 6.0


def test_contract_environment_and_read_only_data(bench, sandbox):
    result = bench("--agent=command", f"--agent-option=dir={AGENTS / 'echo'}", "--agent-option=cmd=python agent.py",
                   "-k", "ldct-iqa", "--rexmle-time-limit=120", f"--rexmle-sandbox={sandbox}")
    result.assert_outcomes(passed=1)
    run = _latest_run(bench, "ldct-iqa")
    echo = json.loads((run / "workspace" / "echo.json").read_text())
    # `rexmle validate` asks the gateway (tests/sandbox/test_validate_inside.py): no task registry inside
    assert "REXMLE_COMPETITIONS_DIR" not in echo["env"]
    # the default network: the session's gateway, on the sandbox's own loopback, reached with the run's token
    # on the sandbox's own loopback; where no network namespace can be made (Landlock in a default container)
    # the gateway's port on the host's loopback, the one port the agent may reach
    gateway = echo["env"].pop("REXMLE_GATEWAY")
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", gateway) and (gateway.endswith(":8484") or sandbox == "landlock")
    assert echo["env"].pop("REXMLE_VALIDATE_URL") == f"{gateway}/rexmle/validate"
    assert echo["env"].pop("REXMLE_GATEWAY_TOKEN").startswith("rexmle-")
    # bubblewrap shows the contract at /rexmle/...; Landlock has no mount namespace, so the real paths of
    # the run's neutral stage (runtime/staging.py), where the folders were while it ran
    stage = json.loads((run / "run.json").read_text())["stage"]
    inside = ({"data": "/rexmle/data", "workspace": "/rexmle/workspace", "submission": "/rexmle/submission",
               "instructions": "/rexmle/instructions.md"} if sandbox == "bwrap" else
              {"data": f"{stage}/data", "workspace": f"{stage}/workspace", "submission": f"{stage}/submission",
               "instructions": f"{stage}/instructions.md"})
    assert echo["env"] == {"REXMLE_TASK": "ldct-iqa", "REXMLE_DATA_DIR": inside["data"],
                           "REXMLE_WORKSPACE": inside["workspace"], "REXMLE_SUBMISSION_DIR": inside["submission"],
                           "REXMLE_INSTRUCTIONS": inside["instructions"], "REXMLE_TIME_LIMIT": "120",
                           "CUDA_VISIBLE_DEVICES": ""}
    assert echo["cwd"] == inside["workspace"] + "/agent"
    assert echo["user"] == "agent"          # getpass.getuser() names the per-run uid (torch.optim imports it)
    assert echo["data_writable"] is False
    assert echo["instructions_mentions_validate"] is True
    assert "description.md" in echo["listing"] and "sample_submission.csv" in echo["listing"]
    assert (run / "submission" / "submission.csv").is_file()


def test_local_runtime_refuses_an_unusable_forced_sandbox_unless_unsafe(tmp_path):
    runtime = LocalRuntime(sandbox="bwrap", bwrap=str(tmp_path / "no-such-bwrap"))
    with pytest.raises(RuntimeUnavailable, match="bwrap.*apt-get install bubblewrap.*--rexmle-unsafe-local"):
        runtime.check()
    unsafe = LocalRuntime(unsafe=True, sandbox="bwrap", bwrap=str(tmp_path / "no-such-bwrap"))
    unsafe.check()
    assert unsafe.mechanism() == "none"


def test_forced_sandbox_that_cannot_work_is_one_usage_error(bench, tmp_path, monkeypatch):
    """With bubblewrap off PATH, --rexmle-sandbox=bwrap stops the session once, before any item runs."""
    import os
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.path.dirname(sys.executable)}")
    result = bench("--agent=sample", "--rexmle-sandbox=bwrap")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.errlines.count("ERROR: the local runtime cannot isolate the agent here "
                                 "(--rexmle-sandbox=bwrap does not work: bwrap: bubblewrap is not installed "
                                 "(apt-get install bubblewrap)). Install bubblewrap (`apt-get install bubblewrap`) "
                                 "where user namespaces are allowed, or use a kernel with Landlock and `pip install "
                                 "landlockpy`; --rexmle-sandbox=auto|bwrap|landlock picks one; pass "
                                 "--rexmle-unsafe-local to run without isolation at your own risk") == 1, result.errlines
    assert "passed" not in result.stdout.str() and "failed" not in result.stdout.str()


def test_unsafe_local_runs_without_a_sandbox(bench):
    result = bench("--agent=sample", "--rexmle-unsafe-local", "-k", "ldct-iqa")
    result.assert_outcomes(passed=1)
    meta = json.loads((_latest_run(bench, "ldct-iqa") / "run.json").read_text())
    assert meta["sandbox"] == "none"


def test_exceeded_limit_is_a_fail_naming_it_and_the_report_names_the_sandbox(bench):
    from .conftest import report_json

    cmd = "python -c \"open('big.bin', 'wb').write(b'0' * (3 * 2**20))\""
    result = bench("--agent=command", f"--agent-option=cmd={cmd}", "--rexmle-limit=file_size=1M", "-k", "ldct-iqa")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*FAIL*file size limit of 1 MiB exceeded*"])
    meta = json.loads((_latest_run(bench, "ldct-iqa") / "run.json").read_text())
    assert meta["limit_exceeded"] == "file_size" and meta["limits"]["file_size"] == 2**20
    assert meta["sandbox"] in ("bwrap", "landlock")
    assert report_json(bench.path)["settings"]["sandbox"] == meta["sandbox"]


def test_unknown_limit_is_one_usage_error(bench):
    result = bench("--agent=sample", "--rexmle-limit=memroy=1G")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--rexmle-limit: unknown limit 'memroy'; known: memory, processes, file_size, disk, tmp*"])
