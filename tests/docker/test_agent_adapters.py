"""The container agents: AIDE end to end against a scripted LLM; ML-Master and R&D-Agent piece by piece.

Only the tests that start the Docker engine are marked ``slow``/``docker``; the adapters' commands, options
and start scripts are tested here without Docker, in the fast lane."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy  # noqa: F401  (imported before pytester snapshots sys.modules: numpy cannot be imported twice)
import pytest

from pytest_rexmle.agents.aide.adapter import AideAgent
from pytest_rexmle.agents.ml_master.adapter import MLMasterAgent
from pytest_rexmle.agents.rd_agent.adapter import RDAgent
from pytest_rexmle.data.synthetic import ensure_synthetic
from pytest_rexmle.errors import RexmleError
from pytest_rexmle.task import registry

from ..agent_images import IMAGES, KEY, agent_context, start_module
from ..conftest import run_folders
from .conftest import assert_no_file_holds, description_line, point_openai_at, session_containers
from .fake_llm import ScriptedLLM


def _contract(tmp_path: Path, module):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "description.md").write_text("# LDCT quality\nPredict the radiologists' score.\n")
    (data / "train.csv").write_text("a\n1\n")
    (tmp_path / "instructions.md").write_text("Run `rexmle validate`.\n")
    return module.Contract("ldct-iqa", data, tmp_path / "ws", tmp_path / "sub", tmp_path / "instructions.md", 7200.0)


# -- command, environment and options ------------------------------------------------------------------------

def test_aide_command_options_and_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://llm.local/v1")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    agent = AideAgent("aide", {"model": "gpt-4.1", "steps": "7", "image": "my/aide:1"})
    assert agent.image == "my/aide:1" and AideAgent("aide", {}).image == "rexmle/aide:latest"
    assert agent.command(agent_context(tmp_path)) == ["python3", "/opt/rexmle-agent/start.py", "--model",
                                                      "gpt-4.1", "--feedback-model", "gpt-4.1", "--steps", "7",
                                                      "--k-fold", "5"]
    env = agent.environment(agent_context(tmp_path))
    assert env == {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": "http://llm.local/v1"}
    assert set(agent.secret_environment()) == {"OPENAI_API_KEY", "OPENAI_BASE_URL"}
    assert KEY not in json.dumps(agent.public_options())
    with pytest.raises(RexmleError, match="steps must be a positive integer"):
        AideAgent("aide", {"steps": "many"})
    with pytest.raises(RexmleError, match="does not understand"):
        AideAgent("aide", {"api_key": KEY})


def test_ml_master_command_and_its_cli_mapping(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    agent = MLMasterAgent("ml-master", {"model": "gpt-5-mini", "steps": "40", "parallel": "2"})
    assert agent.image == "rexmle/ml-master:latest"
    argv = agent.command(agent_context(tmp_path))
    assert argv == ["python3", "/opt/rexmle-agent/start.py", "--model", "gpt-5-mini", "--feedback-model",
                    "gpt-4o-2024-08-06", "--steps", "40", "--parallel", "2"]
    start = start_module("ml-master")
    args = start.parse(argv[2:], start.FLAGS)
    contract = _contract(tmp_path, start)
    cmd = start.command(contract, args, tmp_path / "root", tmp_path / "root" / "task.md", budget=6000)
    assert cmd[1] == "/opt/ml-master/main_mcts.py"
    overrides = dict(a.split("=", 1) for a in cmd[2:])
    assert overrides["data_dir"] == str(contract.data) and overrides["desc_file"].endswith("task.md")
    assert overrides["agent.code.model"] == "gpt-5-mini" and overrides["agent.feedback.model"] == "gpt-4o-2024-08-06"
    assert overrides["agent.code.base_url"] == "https://api.openai.com/v1" and overrides["agent.code.api_key"] == KEY
    assert overrides["agent.steps"] == "40" and overrides["agent.time_limit"] == "6000"
    assert overrides["agent.steerable_reasoning"] == "false" and overrides["agent.check_format"] == "false"
    assert overrides["agent.search.parallel_search_num"] == "2" and overrides["exec.timeout"] == "2700"  # 0.375 * 7200
    assert start.format_time(3725) == "1hrs 2mins 5secs"
    # what its Config schema needs (dataset_dir is a non-optional Path) and its folder names
    assert overrides["dataset_dir"] == str(contract.data) and overrides["exp_name"] == start.EXP == "rexmle"
    assert overrides["copy_data"] == "False" and overrides["preprocess_data"] == "False"
    # its interpreter pins each parallel run to start_cpu_id .. +cpu_number: the cpus this process may use
    monkeypatch.setattr(start.os, "sched_getaffinity", lambda pid: {4, 5, 6, 9}, raising=False)
    assert start.cpus() == (4, 3)
    args = start.parse(["--parallel", "8"], start.FLAGS)
    overrides = dict(a.split("=", 1) for a in start.command(contract, args, tmp_path / "root",
                                                             tmp_path / "root" / "task.md", budget=6000)[2:])
    assert (overrides["start_cpu_id"], overrides["cpu_number"]) == ("4", "3")
    assert overrides["agent.search.parallel_search_num"] == "3"  # it refuses more parallel runs than cpus


def test_ml_master_refuses_a_feedback_model_its_backend_cannot_call():
    start = start_module("ml-master")
    assert start.feedback_model_ok("gpt-4o-2024-08-06") and start.feedback_model_ok("deepseek-v3")
    assert start.feedback_model_ok("Qwen3-235B") and not start.feedback_model_ok("o3-mini")
    assert not start.feedback_model_ok("claude-sonnet-4")
    assert start.main(["--feedback-model", "o3-mini"]) == 2
    with pytest.raises(RexmleError, match="feedback model must be"):  # refused before the session runs anything
        MLMasterAgent("ml-master", {"feedback_model": "gemini-3-pro-preview"})
    assert MLMasterAgent("ml-master", {"feedback_model": "Qwen3-235B-A22B"})


def test_ml_master_exports_its_best_submission_with_prediction_files(tmp_path):
    start = start_module("ml-master")
    ws = tmp_path / "root" / "workspaces" / "rexmle"  # <workspace_dir>/<exp_name>
    (ws / "submission" / "preds").mkdir(parents=True)
    (ws / "best_submission").mkdir()
    (ws / "submission" / "preds" / "case1.nii.gz").write_bytes(b"mask")
    (ws / "submission" / "submission_abc.csv").write_text("case_id,mask\ncase1,preds/case1.nii.gz\n")
    (ws / "best_submission" / "submission.csv").write_text("case_id,mask\ncase1,preds/case1.nii.gz\n")
    out = tmp_path / "out"
    assert start.collect(tmp_path / "root", out)
    assert (out / "submission.csv").read_text() == "case_id,mask\ncase1,preds/case1.nii.gz\n"
    assert (out / "preds" / "case1.nii.gz").read_bytes() == b"mask"
    # without a best_submission/ the newest saved node submission is used
    (ws / "best_submission" / "submission.csv").unlink()
    out2 = tmp_path / "out2"
    assert start.collect(tmp_path / "root", out2) and (out2 / "preds" / "case1.nii.gz").is_file()
    assert not start.collect(tmp_path / "nothing", tmp_path / "out3")


def test_rd_agent_command_environment_and_competition_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://llm.local/v1")
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    agent = RDAgent("rd-agent", {"model": "o3-mini", "steps": "3"})
    assert agent.image == "rexmle/rd-agent:latest" and agent.secret_environment()
    argv = agent.command(agent_context(tmp_path))
    assert argv == ["python3", "/opt/rexmle-agent/start.py", "--model", "o3-mini", "--embedding-model",
                    "text-embedding-3-small", "--loop-n", "3"]
    start = start_module("rd-agent")
    args = start.parse(argv[2:], start.FLAGS)
    contract = _contract(tmp_path, start)
    root = tmp_path / "root"
    folder = start.competition_folder(contract, root)
    assert folder == root / "ds_data" / "ldct-iqa"
    assert (folder / "train.csv").is_symlink() and (folder / "train.csv").resolve() == contract.data / "train.csv"
    description = (folder / "description.md").read_text()
    assert "Predict the radiologists' score." in description and "rexmle validate" in description
    assert "Save `submission.csv` there" in description
    env = start.environment(contract, args, root)
    assert env["DS_SCEN"] == "rdagent.scenarios.data_science.scen.DataScienceScen"
    assert env["DS_LOCAL_DATA_PATH"] == str(root / "ds_data") and env["DS_IF_USING_MLE_DATA"] == "False"
    assert env["DS_CODER_COSTEER_ENV_TYPE"] == "conda" and env["CHAT_MODEL"] == "o3-mini"
    assert env["OPENAI_API_BASE"] == "http://llm.local/v1" and env["OPENAI_API_KEY"] == KEY
    assert env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"  # no price-map download from inside the container
    # R&D-Agent's per-run limits fit into the run: 7200 s limit, 720 s reserve -> budget about 6480 s
    assert env["DS_DEBUG_TIMEOUT"] == "600" and 2400 <= int(env["DS_FULL_TIMEOUT"]) <= 2430
    assert start.command(contract, args, 1234.9)[1:] == ["data_science", "--competition", "ldct-iqa",
                                                          "--timeout", "1234s", "--loop-n", "3"]


def test_rd_agent_exports_the_newest_workspace_submission(tmp_path):
    start = start_module("rd-agent")
    root = tmp_path / "root"
    for name, when in (("old", 1_000_000), ("new", 2_000_000)):
        ws = root / "workspace" / name
        (ws / "p").mkdir(parents=True)
        (ws / "p" / "x.png").write_bytes(name.encode())
        (ws / "submission.csv").write_text("id,file\n1,p/x.png\n")
        os.utime(ws / "submission.csv", (when, when))
    out = tmp_path / "out"
    assert start.collect(root, out)  # no R&D-Agent log here: falls back to the newest workspace
    assert (out / "p" / "x.png").read_bytes() == b"new"


def test_adapter_scrubs_keys_and_skips_paths_outside(tmp_path, monkeypatch):
    start = start_module("aide")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "config.yaml").write_text(f"api_key: {KEY}\n")
    assert start.scrub_secrets(logs) == 1 and (logs / "config.yaml").read_text() == "api_key: ***\n"
    sub = tmp_path / "w"
    sub.mkdir()
    (tmp_path / "secret.txt").write_text("x")
    (sub / "submission.csv").write_text("id,f\n1,../secret.txt\n2,/etc/passwd\n")
    assert start.export_submission(sub / "submission.csv", tmp_path / "o")
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["submission.csv"]


def test_adapter_masks_keys_in_pickles_without_breaking_them(tmp_path, monkeypatch):
    import pickle

    start = start_module("rd-agent")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    (tmp_path / "settings.pkl").write_bytes(pickle.dumps({"openai_api_key": KEY, "model": "gpt-4o"}))
    assert start.scrub_secrets(tmp_path) == 1
    assert pickle.loads((tmp_path / "settings.pkl").read_bytes()) == {"openai_api_key": "*" * len(KEY),
                                                                      "model": "gpt-4o"}


def test_adapter_relays_the_agents_output_with_keys_masked(tmp_path, capfd):
    start = start_module("aide")
    env = {**os.environ, "OPENAI_API_KEY": KEY}
    code = start.run_with_deadline([sys.executable, "-c", f"import sys; print('settings: key={KEY!s}'); "
                                    f"print('warn {KEY!s}', file=sys.stderr)"], 30, tmp_path, env=env)
    out, err = capfd.readouterr()
    assert code == 0 and "settings: key=***" in out and "warn ***" in err and KEY not in out + err
    # the deadline still interrupts it, and the relay does not keep us waiting
    assert start.run_with_deadline([sys.executable, "-c", "import time; time.sleep(60)"], 1, tmp_path, env=env) is None


# -- AIDE end to end --------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.timeout(1800)  # the AIDE image is built by the first test that needs it
def test_aide_runs_end_to_end_against_a_scripted_llm(docker_bench, docker_client, aide_image, session_id,
                                                     shared_cache, monkeypatch):
    twin = ensure_synthetic(registry().get("ldct-iqa"), shared_cache)
    with ScriptedLLM() as llm:
        point_openai_at(llm, KEY, docker_client, monkeypatch)
        result = docker_bench("--agent=aide", "--agent-option=model=scripted-model", "--agent-option=steps=1",
                              f"--agent-option=image={aide_image}", "--rexmle-time-limit=240", "-k", "ldct-iqa",
                              timeout=400)
        requests = list(llm.requests)
    run = run_folders(docker_bench.path, "ldct-iqa")[-1]
    stderr = (run / "logs" / "agent.stderr.log").read_text(errors="replace")
    result.assert_outcomes(passed=1)
    assert requests, stderr[-3000:]
    first = requests[0]
    assert first["_path"] == "/v1/chat/completions" and first["model"] == "scripted-model"
    assert first["_auth"] == f"Bearer {KEY}"
    prompt = "\n".join(m["content"] for m in first["messages"] if m.get("content"))
    assert description_line(twin) in prompt  # the organisers' task description
    assert "rexmle validate" in prompt and "Save `submission.csv` in `./working`" in prompt
    # aideml 0.2.2 asks for plan + code as plain text and for the review through the submit_review tool
    assert "```" not in prompt.split("# Task description")[0]
    assert any(not r.get("tools") for r in requests)
    assert [r["tools"][0]["function"]["name"] for r in requests if r.get("tools")][:1] == ["submit_review"]
    # the submission came out of AIDE's ./working and was graded
    assert (run / "submission" / "submission.csv").read_text() == (twin.public / "sample_submission.csv").read_text()
    record = json.loads((run / "result.json").read_text())
    assert record["status"] == "ok"
    # AIDE's own logs are kept next to ours; no key in any file of the run folder
    assert (run / "logs" / "aide" / "logs" / "0-rexmle" / "journal.json").is_file()
    assert (run / "logs" / "aide" / "logs" / "0-rexmle" / "best_solution.py").is_file()
    # AIDE's journal is in the run's ATIF trajectory as the agent's own account: one node, its code and output
    from pytest_rexmle.report.atif import load as load_atif

    (journal,) = load_atif(run / "trajectory.atif.json").subagent_trajectories
    assert journal.extra["reported_by"] == "agent"
    assert journal.extra["source_file"] == "logs/aide/logs/0-rexmle/journal.json"
    (node,) = journal.steps
    assert node.tool_calls[0].function_name == "execute_code" and node.tool_calls[0].arguments["code"]
    assert node.observation.results[0].source_call_id == node.tool_calls[0].tool_call_id
    assert "[rexmle-adapter] exported" in stderr
    assert_no_file_holds(run, KEY)
    meta = json.loads((run / "run.json").read_text())
    assert meta["image"] == aide_image and meta["exit_code"] == 0
    assert session_containers(docker_client, session_id) == []


# -- image recipes ----------------------------------------------------------------------------------------

def test_build_context_takes_a_local_checkout_only_where_the_recipe_does(tmp_path):
    from pytest_rexmle.agents.image_build import RECIPES, build_context, context_digest, recipes_root

    checkout = tmp_path / "checkout"
    (checkout / ".git").mkdir(parents=True)
    (checkout / ".git" / "HEAD").write_text("ref: main\n")
    (checkout / "main_mcts.py").write_text("print('stand-in')\n")
    ctx = build_context(recipes_root(), RECIPES["ml-master"], tmp_path / "a", source=checkout)
    assert (ctx / "ml_master" / "source" / "main_mcts.py").read_text() == "print('stand-in')\n"
    assert not (ctx / "ml_master" / "source" / ".git").exists()  # VCS data stays out of the context
    assert (ctx / "common" / "rexmle_adapter.py").is_file() and (ctx / "extra-ca.pem").read_bytes() == b""
    plain = build_context(recipes_root(), RECIPES["ml-master"], tmp_path / "b")
    assert list((plain / "ml_master" / "source").iterdir()) == []  # empty: the Dockerfile clones the pin
    # the recipe hash follows the checkout, the build args and the base image
    one = context_digest(ctx, {"BASE": "x"}, "sha256:1")
    assert one == context_digest(ctx, {"BASE": "x"}, "sha256:1")
    assert one != context_digest(plain, {"BASE": "x"}, "sha256:1")
    assert one != context_digest(ctx, {"BASE": "y"}, "sha256:1") != context_digest(ctx, {"BASE": "x"}, "sha256:2")
    with pytest.raises(RexmleError, match="--source applies to ml-master"):
        build_context(recipes_root(), RECIPES["aide"], tmp_path / "c", source=checkout)
    with pytest.raises(RexmleError, match="not a folder"):
        build_context(recipes_root(), RECIPES["ml-master"], tmp_path / "d", source=tmp_path / "missing")


def test_recipes_pin_what_they_install():
    ml_master = (IMAGES / "ml_master" / "Dockerfile").read_text()
    ref = next(line.split("=", 1)[1] for line in ml_master.splitlines() if line.startswith("ARG ML_MASTER_REF="))
    assert len(ref) == 40 and all(c in "0123456789abcdef" for c in ref)  # a commit, not a branch
    assert "COPY ml_master/source/" in ml_master
    rd_agent = (IMAGES / "rd_agent" / "Dockerfile").read_text()
    version = next(line.split("=", 1)[1] for line in rd_agent.splitlines() if line.startswith("ARG RDAGENT_VERSION="))
    assert version.count(".") == 2 and version.replace(".", "").isdigit()
    lock = [line for line in (IMAGES / "rd_agent" / "rdagent-lock.txt").read_text().splitlines()
            if line and not line.startswith("#")]
    assert f"rdagent=={version}" in lock and all("==" in line for line in lock)  # every package pinned exactly
    assert len({line.split("==")[0].lower() for line in lock}) == len(lock)
    aide = (IMAGES / "aide" / "Dockerfile").read_text()
    assert "ARG AIDEML_VERSION=0.2.2" in aide


@pytest.mark.slow
@pytest.mark.docker
def test_building_on_a_base_the_engine_lacks_is_a_clear_error(docker_client):
    from pytest_rexmle.agents.image_build import build_image

    with pytest.raises(RexmleError, match="not in the local Docker engine .nothing is pulled."):
        build_image("aide", tag="rexmle/never-built:latest", base="rexmle/no-such-base:0", client=docker_client,
                    log=lambda line: None)
