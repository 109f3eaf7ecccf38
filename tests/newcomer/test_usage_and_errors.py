"""Newcomer problems of the usage kind: a wrong agent/runtime pair is a usage error at start, and a
harness breakage before grading is an ERROR with its real message and traceback — in the report, the
JUnit file and the score line — never an agent FAIL."""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

from ..conftest import report_json, require_service


@pytest.mark.parametrize("agent", ["aide", "ml-master", "rd-agent"])
def test_image_agent_on_the_local_runtime_without_its_image_is_a_usage_error(bench, agent, tmp_path, monkeypatch):
    """It used to run and end as an agent FAIL ("can't open file '/opt/rexmle-agent/start.py'"); the local
    runtime now runs an image agent from its imported image (tests/images/), and says how to import it. An
    empty cache of its own: the session's shared one may hold the images tests/images imported."""
    monkeypatch.setenv("REXMLE_CACHE_DIR", str(tmp_path / "empty-cache"))
    result = bench(f"--agent={agent}", "--rexmle-runtime=local", "-k", "ldct-iqa")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*the local runtime cannot run image 'rexmle/{agent}:latest' here*"])
    assert "rexmle images import" in result.stderr.str() or "only bubblewrap" in result.stderr.str()
    assert not (bench.path / ".rexmle" / "runs").exists(), "nothing may run before the usage error"


def test_every_bundled_agent_declares_its_isolation():
    from pytest_rexmle.agents import get_agent

    declared = {name: get_agent(name, {"cmd": "true"} if name == "command" else {}).supported_isolation
                for name in ("sample", "command", "aide", "ml-master", "rd-agent")}
    assert declared == {"sample": None, "command": None, "aide": ("docker", "local"), "ml-master": ("docker", "local"),
                        "rd-agent": ("docker", "local")}


def test_scheduler_runtime_is_judged_by_its_inner_isolation():
    """A Slurm-like runtime answers ``isolation`` with its inner provider: docker inside is fine."""
    from pytest_rexmle.agents import get_agent
    from pytest_rexmle.errors import RexmleError

    aide = get_agent("aide", {})
    aide.check_isolation("docker", "slurm")
    aide.check_isolation("local", "slurm")  # the node's bubblewrap enters the imported image
    with pytest.raises(RexmleError, match="runtime 'slurm' isolates with 'landlock'"):
        aide.check_isolation("landlock", "slurm")


def _junit_error(path) -> ET.Element:
    case = next(ET.parse(path).getroot().iter("testcase"))
    error = case.find("error")
    assert error is not None, ET.tostring(case, encoding="unicode")[:2000]
    return error


def test_setup_breakage_is_an_error_with_message_and_traceback(bench, tmp_path):
    """Before: counted as a FAIL, reason "not run: harness error during setup: <file>:<line>: <Type>",
    traceback null."""
    blocker = tmp_path / "runs-is-a-file"
    blocker.write_text("not a folder\n")
    result = bench("--agent=sample", "-k", "ldct-iqa", f"--rexmle-runs-dir={blocker}", "--junitxml=out.xml")
    result.assert_outcomes(errors=1)
    record = report_json(bench.path)["tasks"][0]
    assert record["status"] == "error" and record["percentile"] == 0.0
    assert "NotADirectoryError" in record["reason"] and str(blocker) in record["reason"]
    assert "Traceback" in record["traceback"] or "def " in record["traceback"]
    assert "NotADirectoryError" in record["traceback"]
    doc = report_json(bench.path)
    assert (doc["n_fail"], doc["n_error"]) == (0, 1)
    result.stdout.fnmatch_lines(["*partial score: 0.0% over 1 task(s), 0 FAIL, 1 ERROR (harness, not the agent)"])
    assert "NotADirectoryError" in _junit_error(bench.path / "out.xml").get("message")


def test_missing_docker_image_stops_the_session_once_not_a_fail(bench, monkeypatch):
    """Issue 28: one message before any run (it used to be a harness ERROR with a traceback per item)."""
    docker = shutil.which("docker")
    ok = docker is not None and subprocess.run([docker, "info"], capture_output=True).returncode == 0
    require_service(ok, "REXMLE_REQUIRE_DOCKER", "a Docker engine")
    monkeypatch.setenv("REXMLE_DOCKER_IMAGE", "rexmle/no-such-image-for-this-test:latest")
    result = bench("--agent=sample", "--rexmle-runtime=docker", "-k", "ldct-iqa", "--junitxml=out.xml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    out = result.stdout.str() + result.stderr.str()
    assert out.count("rexmle/no-such-image-for-this-test:latest") == 1
    assert "which this engine does not have and no recipe here builds" in out and "Traceback" not in out
    assert not (bench.path / ".rexmle" / "runs" / "ldct-iqa").exists()  # nothing ran, nothing counted as a FAIL
