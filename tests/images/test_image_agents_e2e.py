"""The real Claude Code image, exported from Docker and imported into the cache, run by the local runtime with
no Docker engine reachable (``DOCKER_HOST`` names a dead socket): the scripted Anthropic provider on the
host's loopback answers through the session's gateway, the run is graded ``ok``, ``run.json`` names the
image's digest and how it ran, and the key is in no file of the run."""

from __future__ import annotations

import json
import os

import pytest

from pytest_rexmle.data.synthetic import ensure_synthetic
from pytest_rexmle.task import registry

from ..agent_images import KEY
from ..conftest import REPO, run_folders
from ..docker.conftest import assert_no_file_holds, description_line
from ..docker.providers.anthropic import AnthropicScript
from ..docker.test_coding_cli_e2e import PROVIDER_VARIABLES

#: Docker only to export the images beforehand (the runs themselves never reach it); bubblewrap runs them
pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.sandbox, pytest.mark.usefixtures("needs_bwrap")]


@pytest.fixture
def no_docker(monkeypatch, tmp_path):
    """Any Docker call during the run would fail: the engine's socket is a path where nothing listens."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    for name in PROVIDER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))


@pytest.fixture(params=["local", "slurm"])
def image_runtime(request):
    """The runtime flag, and for Slurm a cluster that answers (the one-node cluster of .ci/slurm-setup.sh)."""
    if request.param == "slurm":
        request.getfixturevalue("needs_slurm")
        monkeypatch = request.getfixturevalue("monkeypatch")
        monkeypatch.setenv("REXMLE_SLURM_POLL_SECONDS", "1")
        monkeypatch.setenv("REXMLE_SLURM_PROBE_SECONDS", "600")
        # what a job inherits from an outer step: the node's nested steps must not see it
        monkeypatch.setenv("SLURM_CPU_BIND", "quiet,mask_cpu:0x1")
    return request.param


def test_claude_code_runs_from_its_imported_image_without_docker(imported, bench, shared_cache, no_docker, monkeypatch,
                                                                image_runtime):
    tag, image = imported("claude-code")
    twin = ensure_synthetic(registry().get("ldct-iqa"), shared_cache)
    with AnthropicScript() as llm:
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{llm.port}")
        result = bench("--agent=claude-code", f"--rexmle-runtime={image_runtime}", f"--agent-option=image={tag}",
                       "--agent-option=model=claude-scripted-1", "--agent-option=steps=8",
                       "--rexmle-time-limit=240", "-k", "ldct-iqa", timeout=400)
        requests = llm.agent_requests()
    run = run_folders(bench.path, "ldct-iqa")[-1]
    stderr = (run / "logs" / "agent.stderr.log").read_text(errors="replace")
    result.assert_outcomes(passed=1)
    assert not llm.errors and len(requests) == 2, (llm.dump(), stderr[-3000:])
    first = requests[0]
    assert first.path == "/v1/messages" and first.streaming and first.body["model"] == "claude-scripted-1"
    assert first.headers.get("x-api-key") == KEY  # the gateway's upstream key; the agent held a run token
    assert description_line(twin) in json.dumps(first.body["messages"], ensure_ascii=False)
    assert "OK: " in json.dumps(AnthropicScript.tool_results(requests[1]))  # Claude Code's Bash ran rexmle validate
    assert json.loads((run / "result.json").read_text())["status"] == "ok"
    meta = json.loads((run / "run.json").read_text())
    assert meta["image_id"] == image.digest and meta["image"] == tag
    assert meta["image_runner"] == "bwrap-rootfs" and meta["sandbox"] == "bwrap" and meta["network"] == "gateway"
    assert meta["exit_code"] == 0
    if image_runtime == "slurm":  # ran as a job on the node, through the node's bubblewrap
        assert meta["slurm"]["job_id"] and meta["node"] and meta["slurm_binding_stripped"] == ["SLURM_CPU_BIND"]
    assert_no_file_holds(run, KEY)
    assert "[rexmle-adapter] claude-code ended" in stderr


def test_slurm_refuses_an_image_never_imported_before_any_job(bench, needs_slurm, monkeypatch):
    result = bench("--agent=aide", "--rexmle-runtime=slurm", "--agent-option=image=lab/never-imported:1",
                   "-k", "ldct-iqa")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*the slurm runtime cannot run image 'lab/never-imported:1': it is not in the "
                                 "image cache*rexmle images import FILE*"])
    assert not (bench.path / ".rexmle" / "runs" / "ldct-iqa").exists()


def test_aide_runs_on_a_slurm_node_from_its_imported_image(imported, bench, shared_cache, no_docker, monkeypatch,
                                                           needs_slurm):
    """``pytest --agent=aide --rexmle-runtime=slurm``: the real aideml of the image, on the node, no engine."""
    from ..docker.fake_llm import ScriptedLLM

    tag, image = imported("aide")
    twin = ensure_synthetic(registry().get("ldct-iqa"), shared_cache)
    monkeypatch.setenv("REXMLE_SLURM_POLL_SECONDS", "1")
    monkeypatch.setenv("REXMLE_SLURM_PROBE_SECONDS", "600")
    with ScriptedLLM() as llm:
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{llm.port}/v1")
        result = bench("--agent=aide", "--rexmle-runtime=slurm", f"--agent-option=image={tag}",
                       "--agent-option=model=scripted-model", "--agent-option=steps=1", "--rexmle-time-limit=240",
                       "-k", "ldct-iqa", timeout=500)
        requests = list(llm.requests)
    run = run_folders(bench.path, "ldct-iqa")[-1]
    stderr = (run / "logs" / "agent.stderr.log").read_text(errors="replace")
    result.assert_outcomes(passed=1)
    assert requests and requests[0]["model"] == "scripted-model" and requests[0]["_auth"] == f"Bearer {KEY}", stderr[-3000:]
    assert (run / "submission" / "submission.csv").read_text() == (twin.public / "sample_submission.csv").read_text()
    assert json.loads((run / "result.json").read_text())["status"] == "ok"
    assert (run / "logs" / "aide" / "logs" / "0-rexmle" / "journal.json").is_file()
    meta = json.loads((run / "run.json").read_text())
    assert meta["image_id"] == image.digest and meta["image_runner"] == "bwrap-rootfs" and meta["slurm"]["job_id"]
    assert_no_file_holds(run, KEY)
