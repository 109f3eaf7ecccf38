"""ML-Master end to end: its image built from a local checkout (``--source``), driven by a scripted LLM.

Two checkouts. ``ml_master_standin/`` (always, CI included): a small stand-in of its entry point that
mimics only the command line, config keys, model calls and folder layout the adapter relies on (see that
file); it proves the adapter and the image recipe, not ML-Master's search. The real code (when
$REXMLE_ML_MASTER_SOURCE names a checkout of sjtu-sai-agents/ML-Master at the Dockerfile's
ML_MASTER_REF, e.g. ``git archive dbc25a6 | tar -x -C DIR``): skipped otherwise, since CI has no copy of
ML-Master (GitHub is not reachable there and none of its code is kept in this repository). Both runs
answer ML-Master's real requests: the coding model over streamed chat completions, the reviews through
the forced ``submit_review`` tool (with ``has_csv_submission``), a ``gpt-*`` feedback model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy  # noqa: F401  (imported before pytester snapshots sys.modules: numpy cannot be imported twice)
import pytest

from pytest_rexmle.data.synthetic import ensure_synthetic
from pytest_rexmle.task import registry

from ..agent_images import KEY
from ..conftest import run_folders
from .conftest import agent_image, assert_atif_is_the_meters, assert_no_file_holds, description_line, session_containers
from .fake_llm import ML_MASTER_SCRIPT, ScriptedLLM

REAL_SOURCE = os.environ.get("REXMLE_ML_MASTER_SOURCE", "")


@pytest.fixture(scope="session")
def ml_master_image(docker_client, tmp_path_factory) -> str:
    """rexmle/ml-master:latest, agents/ml_master/Dockerfile on the real base, built from ML_MASTER_SOURCE (the
    stand-in; the real checkout when $REXMLE_ML_MASTER_SOURCE names one)."""
    return agent_image("ml-master", docker_client, tmp_path_factory)


@pytest.fixture(scope="session")
def ml_master_real_image(ml_master_image) -> str:
    """The same image when $REXMLE_ML_MASTER_SOURCE names a real ML-Master checkout (its --source)."""
    if not REAL_SOURCE:
        pytest.skip("REXMLE_ML_MASTER_SOURCE is not set: no checkout of the real ML-Master here (CI has none; "
                    "GitHub is unreachable and its code is not kept in this repository)")
    if not (Path(REAL_SOURCE) / "main_mcts.py").is_file():
        pytest.fail(f"REXMLE_ML_MASTER_SOURCE={REAL_SOURCE}: no main_mcts.py there")
    return ml_master_image


def test_ml_master_image_holds_the_given_checkout(docker_client, ml_master_image):
    out = docker_client.containers.run(ml_master_image, ["sh", "-c", "cat /opt/ml-master/.rexmle-source; "
                                                         "ls /opt/ml-master /opt/rexmle-agent"], remove=True)
    text = out.decode()
    assert text.startswith("local checkout (--source)")
    assert "main_mcts.py" in text and "start.py" in text and "rexmle_adapter.py" in text


def _run_end_to_end(docker_bench, docker_client, image: str, shared_cache, monkeypatch, session_id,
                    time_limit: int, gateway_logs: Path | None = None) -> dict:
    """One ML-Master run on ldct-iqa against the scripted LLM; with ``gateway_logs``, through a model gateway
    run (a loopback listener demanding the run's token; the scripted LLM is its upstream)."""
    twin = ensure_synthetic(registry().get("ldct-iqa"), shared_cache)
    # the scripted LLM (and the gateway) listen on loopback only; the agent shares the host's network
    gateway = gateway_run = gateway_record = None
    with ScriptedLLM(ML_MASTER_SCRIPT, host="127.0.0.1") as llm:
        monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
        if gateway_logs is None:
            monkeypatch.setenv("OPENAI_API_KEY", KEY)
            monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{llm.port}/v1")
        else:
            from pytest_rexmle.gateway import Gateway, Limits

            gateway = Gateway(None, environ={"OPENAI_BASE_URL": f"http://127.0.0.1:{llm.port}/v1",
                                             "OPENAI_API_KEY": KEY},
                              limits=Limits(upstream_timeout=60.0), task_hosts=())
            gateway_run = gateway.open_run("ml-master-1", logs_dir=gateway_logs,
                                           submission_dir=gateway_logs.parent / "sub", task_id="ldct-iqa")
            host, port = gateway_run.host_address()
            env = gateway_run.environment(f"http://{host}:{port}")
            for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "REXMLE_VALIDATE_URL"):
                monkeypatch.setenv(name, env[name])
        try:
            result = docker_bench("--agent=ml-master", "--rexmle-network=host",
                                  "--agent-option=model=scripted-coder",
                                  "--agent-option=feedback_model=gpt-4o-2024-08-06", "--agent-option=steps=2",
                                  "--agent-option=parallel=1", f"--agent-option=image={image}",
                                  f"--rexmle-time-limit={time_limit}", "-k", "ldct-iqa", timeout=time_limit + 200)
            if gateway_run is not None:
                gateway_record = gateway_run.close()
        finally:
            if gateway is not None:
                gateway.close()
        requests = list(llm.requests)
    run = run_folders(docker_bench.path, "ldct-iqa")[-1]
    stderr = (run / "logs" / "agent.stderr.log").read_text(errors="replace")
    out_log = run / "logs" / "agent.stdout.log"
    stdout = out_log.read_text(errors="replace") if out_log.exists() else ""
    result.assert_outcomes(passed=1)
    assert not llm.errors
    # two steps: a streamed code request to the coding model, a submit_review call to the feedback model, each
    coder = [r for r in requests if not r.get("tools")]
    reviewer = [r for r in requests if r.get("tools")]
    assert len(coder) == 2 and len(reviewer) == 2, (stdout + stderr)[-4000:]
    assert {r["model"] for r in coder} == {"scripted-coder"} and all(r.get("stream") is True for r in coder)
    assert all(r.get("chat_template_kwargs") == {"thinking": True} for r in coder)  # its extra_body, sent as is
    assert [m["role"] for m in coder[0]["messages"]] == ["system", "user"]
    assert {r["model"] for r in reviewer} == {"gpt-4o-2024-08-06"}
    assert all(r["tools"][0]["function"]["name"] == "submit_review" for r in reviewer)
    assert all(r["tool_choice"] == {"type": "function", "function": {"name": "submit_review"}} for r in reviewer)
    assert "has_csv_submission" in reviewer[0]["tools"][0]["function"]["parameters"]["properties"]
    assert all(r["_path"] == "/v1/chat/completions" and r["_auth"] == f"Bearer {KEY}" for r in requests)
    prompt = "\n".join(m["content"] for m in coder[0]["messages"])
    assert description_line(twin) in prompt and "rexmle validate" in prompt
    assert "Save `submission.csv` in `./submission/`" in prompt
    assert "<TOTAL_STEPS_REMAINING: 2>" in prompt and "mins" in prompt  # agent.steps / agent.time_limit reached it
    # the best node's submission came out of best_submission/ and was graded
    assert (run / "submission" / "submission.csv").read_text() == (twin.public / "sample_submission.csv").read_text()
    record = json.loads((run / "result.json").read_text())
    assert record["status"] == "ok" and record.get("percentile") is not None
    logs = run / "logs" / "ml-master" / "logs" / "rexmle"
    log_text = (logs / "ml-master.log").read_text(errors="replace")
    assert "current node count is 1" in log_text and "marked as buggy" not in log_text  # 2 nodes, none buggy
    config = (logs / "config_mcts.yaml").read_text()
    assert "***" in config  # ML-Master saves its keys; the adapter scrubs them
    # it fails printing its final solution tree (exit status 1): the adapter collects the submission anyway
    assert "TypeError: unsupported format string passed to NoneType.__format__" in stderr
    assert "ML-Master ended with exit code 1" in stderr
    assert "[rexmle-adapter] exported" in stderr
    # the gateway's run token is scrubbed like a key
    assert_no_file_holds(run, KEY, *([gateway_run.token] if gateway_run is not None else []))
    capability = json.loads((run / "capability.json").read_text())
    assert len(capability["results"]) == 13
    meta = json.loads((run / "run.json").read_text())
    assert meta["image"] == image and meta["exit_code"] == 0
    assert_atif_is_the_meters(run, meta)
    assert session_containers(docker_client, session_id) == []
    return {"run": run, "requests": requests, "log": log_text, "stderr": stderr, "gateway": gateway_record}


def test_ml_master_runs_end_to_end_against_a_scripted_llm(docker_bench, docker_client, ml_master_image, session_id,
                                                          shared_cache, monkeypatch):
    _run_end_to_end(docker_bench, docker_client, ml_master_image, shared_cache, monkeypatch, session_id, 240)


def test_real_ml_master_runs_end_to_end_against_a_scripted_llm(docker_bench, docker_client, ml_master_real_image,
                                                               session_id, shared_cache, monkeypatch):
    """The real main_mcts.py: MCTS draft nodes, its interpreter, its review parsing and best_submission/."""
    out = _run_end_to_end(docker_bench, docker_client, ml_master_real_image, shared_cache, monkeypatch, session_id,
                          420)
    assert "Starting run \"rexmle\"" in out["log"] and "is the best node so far" in out["log"]


def test_real_ml_master_through_the_model_gateway(docker_bench, docker_client, ml_master_real_image, session_id,
                                                  shared_cache, monkeypatch, tmp_path):
    """The real code again, its only peer a gateway run: it holds the run's token, the LLM sees the real key
    (checked in _run_end_to_end), and the gateway meters and records its four calls."""
    out = _run_end_to_end(docker_bench, docker_client, ml_master_real_image, shared_cache, monkeypatch, session_id,
                          420, gateway_logs=tmp_path / "gateway-logs")
    usage = out["gateway"]["usage"]
    assert usage["source"] == "gateway" and usage["requests"] == len(out["requests"]) == 4, usage
    assert set(usage["by_model"]) == {"scripted-coder", "gpt-4o-2024-08-06"}, usage
    calls = [json.loads(line) for line in (tmp_path / "gateway-logs" / "model-calls.jsonl").read_text().splitlines()]
    assert len(calls) == 4
    # its coding calls stream without asking for stream_options.include_usage, so a provider sends no usage
    # chunk and the gateway can count those calls but not their tokens (the scripted LLM sends none either)
    assert sum(c["stream"] for c in calls) == 2 and usage["by_model"]["gpt-4o-2024-08-06"]["input_tokens"] == 20
