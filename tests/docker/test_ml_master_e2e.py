"""ML-Master end to end: its image built from a local checkout (``--source``), driven by a scripted LLM.

The real ML-Master cannot be cloned here (no GitHub), so the checkout is ``ml_master_standin/``: a small
stand-in of its entry point that mimics only the command line, config keys and folder layout the adapter
relies on (see that file). What this proves is the adapter and the image recipe — overrides accepted,
keys reaching the endpoints but no file, the best submission exported, graded and ranked — not
ML-Master's search.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy  # noqa: F401  (imported before pytester snapshots sys.modules: numpy cannot be imported twice)
import pytest

from pytest_rexmle.data.synthetic import ensure_synthetic
from pytest_rexmle.task import registry

from ..conftest import run_folders
from .conftest import _locked_build, session_containers
from .fake_llm import ML_MASTER_SCRIPT, ScriptedLLM
from .test_agent_adapters import KEY, _bridge_gateway

STANDIN = Path(__file__).resolve().parent / "ml_master_standin"
ML_MASTER_TEST_IMAGE = "rexmle/test-ml-master:latest"


@pytest.fixture(scope="session")
def ml_master_image(test_image, docker_client, tmp_path_factory) -> str:
    """images/ml-master/Dockerfile FROM the offline test image, with the stand-in as --source."""
    from pytest_rexmle.images import build_image

    _locked_build(tmp_path_factory, "ml-master-image",
                  lambda: build_image("ml-master", tag=ML_MASTER_TEST_IMAGE, base=test_image, client=docker_client,
                                      source=STANDIN, log=lambda line: None))
    return ML_MASTER_TEST_IMAGE


def test_ml_master_image_holds_the_given_checkout(docker_client, ml_master_image):
    out = docker_client.containers.run(ml_master_image, ["sh", "-c", "cat /opt/ml-master/.rexmle-source; "
                                                         "ls /opt/ml-master /opt/rexmle-agent"], remove=True)
    text = out.decode()
    assert text.startswith("local checkout (--source)")
    assert "main_mcts.py" in text and "start.py" in text and "rexmle_adapter.py" in text


def test_ml_master_runs_end_to_end_against_a_scripted_llm(docker_bench, docker_client, ml_master_image, session_id,
                                                          shared_cache, monkeypatch):
    twin = ensure_synthetic(registry().get("ldct-iqa"), shared_cache)
    description_line = next(line for line in (twin.public / "description.md").read_text().splitlines() if line.strip())
    with ScriptedLLM(ML_MASTER_SCRIPT) as llm:
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://{_bridge_gateway(docker_client)}:{llm.port}/v1")
        monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
        result = docker_bench("--agent=ml-master", "--agent-option=model=scripted-coder",
                              "--agent-option=feedback_model=scripted-reviewer", "--agent-option=steps=2",
                              "--agent-option=parallel=1", f"--agent-option=image={ml_master_image}",
                              "--rexmle-time-limit=240", "-k", "ldct-iqa", timeout=400)
        requests = list(llm.requests)
    run = run_folders(docker_bench.path, "ldct-iqa")[-1]
    stderr = (run / "logs" / "agent.stderr.log").read_text(errors="replace")
    result.assert_outcomes(passed=1)
    assert not llm.errors
    # two steps: a code request to the coding model, a submit_review call to the feedback model, each
    coder = [r for r in requests if not r.get("tools")]
    reviewer = [r for r in requests if r.get("tools")]
    assert len(coder) == 2 and len(reviewer) == 2, stderr[-3000:]
    assert {r["model"] for r in coder} == {"scripted-coder"} and {r["model"] for r in reviewer} == {"scripted-reviewer"}
    assert all(r["_path"] == "/v1/chat/completions" and r["_auth"] == f"Bearer {KEY}" for r in requests)
    prompt = coder[0]["messages"][0]["content"]
    assert description_line in prompt and "rexmle validate" in prompt
    assert "Save `submission.csv` in `./submission/`" in prompt
    assert '"STEP_LIMIT": "2"' in prompt and "mins" in prompt  # run.sh's TIME_LIMIT / STEP_LIMIT reached it
    # the best node's submission came out of best_submission/ and was graded
    assert (run / "submission" / "submission.csv").read_text() == (twin.public / "sample_submission.csv").read_text()
    record = json.loads((run / "result.json").read_text())
    assert record["status"] == "ok" and record.get("percentile") is not None
    logs = run / "logs" / "ml-master" / "logs" / "0-rexmle"
    journal = json.loads((logs / "journal.json").read_text())
    assert [n["is_bug"] for n in journal["nodes"]] == [False, False]
    config = json.loads((logs / "config.json").read_text())
    assert config["agent"]["code"]["api_key"] == "***"  # ML-Master saves its keys; the adapter scrubs them
    assert config["agent"]["check_format"] is False and config["agent"]["search"]["parallel_search_num"] == 1
    assert "[rexmle-adapter] exported" in stderr
    for path in run.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.stat().st_size < 5_000_000:
            assert KEY.encode() not in path.read_bytes(), path
    capability = json.loads((run / "capability.json").read_text())
    assert len(capability["results"]) == 13
    meta = json.loads((run / "run.json").read_text())
    assert meta["image"] == ml_master_image and meta["exit_code"] == 0
    assert session_containers(docker_client, session_id) == []
