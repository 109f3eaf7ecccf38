"""The README's headline, ``pytest --agent=ml-master -k topcow``, as a new user types it (issue 28).

Before: a usage error telling the user to pass ``--rexmle-runtime=docker`` (which the harness can see for
itself); with it, one harness ERROR and a 15-line traceback per challenge for the image nobody built; and
without data, the same three-line skip six times plus a campaign line claiming runs that never ran.
"""

from __future__ import annotations

import json

import pytest

from .conftest import report_json, run_folders

TOPCOW = ("topcow-cta-cls", "topcow-cta-det", "topcow-cta-seg", "topcow-mra-cls", "topcow-mra-det", "topcow-mra-seg")


def _engine():
    try:
        import docker

        client = docker.from_env(timeout=30)
        client.ping()
        return client
    except Exception:
        return None


def _output(result) -> str:
    return result.stdout.str() + result.stderr.str()


def test_without_any_runtime_for_an_image_agent_one_message_names_what_is_missing(bench, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/rexmle-test/docker.sock")
    result = bench("--agent=ml-master", "-k", "topcow")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    out = _output(result)
    assert "agent 'ml-master' runs only from an image, and no runtime here can run one" in out
    assert "docker: " in out and "the engine did not answer" in out
    assert "--rexmle-runtime=docker" not in out  # the fix is an engine, not an option the harness could pick
    assert "Traceback" not in out and "test_task" not in out


def test_a_missing_image_that_cannot_be_built_stops_the_session_once(bench):
    from pytest_rexmle.agents.image_build import BASE_TAG, local_image

    client = _engine()
    if client is None:
        pytest.skip("no Docker engine: the session stops before the image check (test above)")
    if local_image(client, "rexmle/ml-master:latest") is not None or local_image(client, BASE_TAG) is not None:
        pytest.skip("rexmle/ml-master or its base is built here: the session would build or run it")
    result = bench("--agent=ml-master", "-k", "topcow")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    out = _output(result)
    assert out.count("rexmle images build --agent ml-master") == 1
    assert "agent 'ml-master' runs in the Docker image rexmle/ml-master:latest, which is not built" in out
    assert "docker pull pytorch/pytorch:" in out  # what the chain of recipes ends at, nothing pulled meanwhile
    assert "Traceback" not in out and "HarnessError" not in out and "ERROR ::" not in out
    assert not (bench.path / ".rexmle" / "runs" / "topcow-cta-seg").exists()


def test_an_image_no_recipe_builds_is_named_with_its_agent(tmp_path):
    from pytest_rexmle.agents import get_agent
    from pytest_rexmle.agents.image_ready import ensure_images
    from pytest_rexmle.errors import RexmleError
    from pytest_rexmle.runtime.docker import DockerRuntime

    if _engine() is None:
        pytest.skip("no Docker engine")
    agent = get_agent("command", {"cmd": "true", "image": "rexmle/no-recipe-builds-this:never"})
    with pytest.raises(RexmleError, match="agent 'command' runs in the Docker image rexmle/no-recipe-builds-this"
                                          ":never, which this engine does not have and no recipe here builds"):
        ensure_images([agent], DockerRuntime())


def test_an_agent_that_runs_on_the_host_keeps_the_local_default(bench):
    result = bench("--agent=sample", "-k", "ldct-iqa")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["rexmle: agent=sample runtime=local data=synthetic*"])
    assert "chosen:" not in result.stdout.str()  # nothing to explain: the default
    run = json.loads((run_folders(bench.path, "ldct-iqa")[-1] / "run.json").read_text())
    assert run["runtime"] == "local" and run["runtime_reason"].startswith("the default")


def test_missing_data_is_said_once_grouped_by_release_and_no_campaign_line(bench):
    result = bench("--agent=sample", "-k", "topcow or isles22", "--rexmle-data=prepared",
                   f"--rexmle-data-dir={bench.path / 'no-data'}")
    result.assert_outcomes(skipped=7)
    out = result.stdout.str()
    data_dir = bench.path / "no-data"
    assert out.count("data not prepared in") == 1
    result.stdout.fnmatch_lines([
        f"rexmle: data not prepared in {data_dir} for 7 selected task(s); they are skipped.*",
        f"  isles22 (1.7 GB download, 1 task(s)): rexmle prepare isles22 --data-dir {data_dir}",
        f"  topcow (14.4 GB download, 6 task(s)): rexmle prepare {' '.join(TOPCOW)} --data-dir {data_dir}"])
    assert "campaign:" not in out
    doc = report_json(bench.path)
    assert doc["campaign"]["n_runs"] == 0
    reasons = {r["task_id"]: r["reason"] for r in doc["tasks"]}
    assert reasons["topcow-mra-seg"].endswith("data not prepared: rexmle prepare topcow-mra-seg")
    assert not (bench.path / ".rexmle" / "runs" / "topcow-mra-seg").exists()  # no run started for it


def test_the_recipes_chain_ends_at_dockers_pytorch_image_and_the_message_names_both_commands():
    """Engine-independent half of the test above (which skips where rexmle/base is built)."""
    from pytest_rexmle.agents.image_build import RECIPES, from_image
    from pytest_rexmle.agents.image_ready import _cannot_build, recipe_for

    assert recipe_for("rexmle/ml-master") is RECIPES["ml-master"] is recipe_for("rexmle/ml-master:latest")
    assert from_image(RECIPES["ml-master"]) == "rexmle/base:latest"
    assert from_image(RECIPES["claude-code"]) == "rexmle/base:latest"  # a shared recipe of common/ (image.toml)
    torch = from_image(RECIPES["base"])
    assert torch == "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
    assert from_image(RECIPES["base"], {"TORCH_IMAGE": "lab/torch:1"}) == "lab/torch:1"
    message = _cannot_build("ml-master", "rexmle/ml-master:latest", torch)
    assert message.endswith(f"  docker pull {torch}\n  rexmle images build --agent ml-master")
