"""The coding-CLI agents end to end: the real CLI from its registry, in its image built FROM the offline
test base, driven by a scripted loopback provider speaking that CLI's protocol.

Each provider has the CLI run one shell command through the CLI's *own* tool (Claude Code's Bash, Codex's
shell, Gemini CLI's run_shell_command, mini-swe-agent's bash): copy the sample submission into
$REXMLE_SUBMISSION_DIR and run ``rexmle validate``. The test then checks what the CLI really sent
(path, key, model, the task's description in the prompt, the validator's "OK" coming back as the tool's
result), that the run was graded ``ok``, that the CLI's own files and usage report are in the run's
logs, that no key is in any file of the run folder, and that no container is left.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy  # noqa: F401  (imported before pytester snapshots sys.modules: numpy cannot be imported twice)
import pytest

from pytest_rexmle.agents.usage import compare_usage
from pytest_rexmle.data.synthetic import ensure_synthetic
from pytest_rexmle.task import registry

from ..conftest import run_folders
from .conftest import _locked_build, session_containers
from .providers.anthropic import OUTPUT_TOKENS, AnthropicScript
from .providers.chat import PROMPT_TOKENS, ChatScript
from .providers.gemini import GeminiScript
from .providers.misbehaving import AsksAndStops, AsksThroughItsTool, Loops, OverBudget
from .providers.responses import INPUT_TOKENS as RESPONSES_INPUT_TOKENS, ResponsesScript
from .test_agent_adapters import KEY, _bridge_gateway

pytestmark = [pytest.mark.docker, pytest.mark.slow]

#: every provider variable a CLI could read: cleared first, so only what a test sets reaches the agent
PROVIDER_VARIABLES = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL",
                      "GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL", "OPENROUTER_API_KEY",
                      "DEEPSEEK_API_KEY", "REXMLE_VALIDATE_URL")


def cli_image(name: str, test_image: str, docker_client, tmp_path_factory) -> str:
    """agents/<name>/Dockerfile FROM the offline test image, tagged rexmle/test-<name> (cached by recipe hash)."""
    from pytest_rexmle.agents.image_build import build_image

    tag = f"rexmle/test-{name}:latest"
    ca = "/etc/ssl/certs/ca-certificates.crt"
    _locked_build(tmp_path_factory, f"{name}-image",
                  lambda: build_image(name, tag=tag, base=test_image, client=docker_client,
                                      ca_bundle=ca if Path(ca).is_file() else None, log=lambda line: None))
    return tag


@pytest.fixture
def provider_env(monkeypatch):
    for name in PROVIDER_VARIABLES:
        monkeypatch.delenv(name, raising=False)

    def set_env(**values: str) -> None:
        for name, value in values.items():
            monkeypatch.setenv(name, value)

    return set_env


def assert_graded_ok(run: Path, twin, image: str, session_id: str, docker_client) -> dict:
    """What every CLI run must leave: the copied sample submission graded ok, no key anywhere, nothing running."""
    assert (run / "submission" / "submission.csv").read_text() == (twin.public / "sample_submission.csv").read_text()
    record = json.loads((run / "result.json").read_text())
    assert record["status"] == "ok", record
    for path in run.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.stat().st_size < 5_000_000:
            assert KEY.encode() not in path.read_bytes(), path
    meta = json.loads((run / "run.json").read_text())
    assert meta["image"] == image and meta["exit_code"] == 0
    assert session_containers(docker_client, session_id) == []
    return record


def description_line(twin) -> str:
    return next(line for line in (twin.public / "description.md").read_text().splitlines() if line.strip())


# -- Claude Code ------------------------------------------------------------------------------------------

def test_claude_code_runs_end_to_end_against_a_scripted_anthropic_api(docker_bench, docker_client, test_image,
                                                                      tmp_path_factory, session_id, shared_cache,
                                                                      provider_env):
    image = cli_image("claude-code", test_image, docker_client, tmp_path_factory)
    twin = ensure_synthetic(registry().get("ldct-iqa"), shared_cache)
    with AnthropicScript() as llm:
        provider_env(ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=f"http://{_bridge_gateway(docker_client)}:{llm.port}")
        result = docker_bench("--agent=claude-code", "--agent-option=model=claude-scripted-1",
                              "--agent-option=steps=8", f"--agent-option=image={image}", "--rexmle-time-limit=240",
                              "-k", "ldct-iqa", timeout=400)
        agent_requests = llm.agent_requests()
    run = run_folders(docker_bench.path, "ldct-iqa")[-1]
    stderr = (run / "logs" / "agent.stderr.log").read_text(errors="replace")
    result.assert_outcomes(passed=1)
    assert not llm.errors, llm.errors
    assert len(agent_requests) == 2, llm.dump()
    first, second = agent_requests
    assert first.path == "/v1/messages" and first.headers.get("x-api-key") == KEY
    assert first.body["model"] == "claude-scripted-1" and first.streaming  # Claude Code streams its turns
    prompt = json.dumps(first.body["messages"], ensure_ascii=False)
    assert description_line(twin) in prompt and "rexmle validate" in prompt
    # the Bash tool really ran: the validator's verdict came back to the model as the tool's result
    results = AnthropicScript.tool_results(second)
    assert len(results) == 1 and "OK: " in json.dumps(results[0]["content"]), llm.dump()
    assert_graded_ok(run, twin, image, session_id, docker_client)
    # Claude Code's own files and its own usage report are kept in the run's logs
    kept = run / "logs" / "claude-code" / "claude-code"
    assert (kept / "prompt.md").is_file() and (kept / "stdout.jsonl").is_file()
    assert any((kept / "config").rglob("*.jsonl")), "no Claude Code session transcript kept"
    reported = json.loads((kept / "reported_usage.json").read_text())
    assert reported["source"] == "claude-code result event" and reported["turns"] == 2
    assert reported["output_tokens"] == 2 * OUTPUT_TOKENS, reported
    # the stand-in counts what it served, as the gateway meters: Claude Code's own report agrees with it
    assert compare_usage(reported, llm.served)["mismatch"] == {}
    # kept beside the gateway's count in the run's logs (the default network: every call went through it)
    comparison = json.loads((run / "logs" / "claude-code" / "usage_comparison.json").read_text())
    metered = comparison["metered_by_gateway"]
    assert comparison["reported_by_agent"] == reported and metered["source"] == "gateway", comparison
    assert metered["requests"] == 2 and metered["output_tokens"] == 2 * OUTPUT_TOKENS, metered
    assert comparison["mismatch"] == {}, comparison
    assert "[rexmle-adapter] claude-code ended" in stderr


# -- mini-swe-agent ---------------------------------------------------------------------------------------

def test_mini_swe_agent_runs_end_to_end_against_scripted_chat_completions(docker_bench, docker_client, test_image,
                                                                          tmp_path_factory, session_id,
                                                                          shared_cache, provider_env):
    image = cli_image("mini-swe-agent", test_image, docker_client, tmp_path_factory)
    twin = ensure_synthetic(registry().get("ldct-iqa"), shared_cache)
    with ChatScript() as llm:
        provider_env(OPENAI_API_KEY=KEY, OPENAI_BASE_URL=f"http://{_bridge_gateway(docker_client)}:{llm.port}/v1")
        result = docker_bench("--agent=mini-swe-agent", "--agent-option=model=scripted-chat",
                              "--agent-option=steps=6", f"--agent-option=image={image}", "--rexmle-time-limit=240",
                              "-k", "ldct-iqa", timeout=400)
        agent_requests = llm.agent_requests()
    run = run_folders(docker_bench.path, "ldct-iqa")[-1]
    result.assert_outcomes(passed=1)
    assert not llm.errors, llm.errors
    assert len(agent_requests) == 2, llm.dump()
    first, second = agent_requests
    assert first.path == "/v1/chat/completions" and first.headers.get("authorization") == f"Bearer {KEY}"
    assert first.body["model"] == "scripted-chat"  # LiteLLM's openai/ prefix is stripped on the wire
    prompt = json.dumps(first.body["messages"], ensure_ascii=False)
    assert description_line(twin) in prompt and "rexmle validate" in prompt
    # mini-swe-agent's bash tool really ran the command: the validator's verdict came back as the tool message
    observations = ChatScript.tool_messages(second)
    assert len(observations) == 1 and "OK: " in json.dumps(observations[0]["content"]), llm.dump()
    assert_graded_ok(run, twin, image, session_id, docker_client)
    kept = run / "logs" / "mini-swe-agent" / "mini-swe-agent"
    trajectory = json.loads((kept / "trajectory.json").read_text())
    assert trajectory["info"]["exit_status"] == "Submitted"
    reported = json.loads((kept / "reported_usage.json").read_text())
    assert reported["calls"] == 2 and reported["input_tokens"] == 2 * PROMPT_TOKENS, reported


# -- Codex CLI --------------------------------------------------------------------------------------------

def test_codex_runs_end_to_end_against_a_scripted_responses_api(docker_bench, docker_client, test_image,
                                                                tmp_path_factory, session_id, shared_cache,
                                                                provider_env):
    image = cli_image("codex", test_image, docker_client, tmp_path_factory)
    twin = ensure_synthetic(registry().get("ldct-iqa"), shared_cache)
    with ResponsesScript() as llm:
        provider_env(OPENAI_API_KEY=KEY, OPENAI_BASE_URL=f"http://{_bridge_gateway(docker_client)}:{llm.port}/v1")
        result = docker_bench("--agent=codex", "--agent-option=model=gpt-scripted", f"--agent-option=image={image}",
                              "--rexmle-time-limit=240", "-k", "ldct-iqa", timeout=400)
        agent_requests = llm.agent_requests()
    print(f"codex offered {sorted(t.get('name', t.get('type')) for t in agent_requests[0].body.get('tools') or [])}, "
          f"the script used {llm.tool_used}")
    run = run_folders(docker_bench.path, "ldct-iqa")[-1]
    result.assert_outcomes(passed=1)
    assert not llm.errors, llm.errors
    assert len(agent_requests) == 2, llm.dump()
    first, second = agent_requests
    assert first.path == "/v1/responses" and first.headers.get("authorization") == f"Bearer {KEY}"
    assert first.body["model"] == "gpt-scripted" and first.streaming  # Codex always streams
    prompt = json.dumps(first.body["input"], ensure_ascii=False)
    assert description_line(twin) in prompt and "rexmle validate" in prompt
    # Codex's shell tool really ran the command: the validator's verdict came back as the call's output
    outputs = ResponsesScript.call_outputs(second)
    assert len(outputs) == 1 and "OK: " in json.dumps(outputs[0]["output"]), llm.dump()
    assert_graded_ok(run, twin, image, session_id, docker_client)
    kept = run / "logs" / "codex" / "codex"
    assert any((kept / "home" / "sessions").rglob("rollout-*.jsonl")), "no Codex session rollout kept"
    reported = json.loads((kept / "reported_usage.json").read_text())
    assert reported["input_tokens"] == 2 * RESPONSES_INPUT_TOKENS and reported["turns"] == 1, reported


# -- Gemini CLI -------------------------------------------------------------------------------------------

def test_gemini_cli_runs_end_to_end_against_a_scripted_gemini_api(docker_bench, docker_client, test_image,
                                                                  tmp_path_factory, session_id, shared_cache,
                                                                  provider_env):
    image = cli_image("gemini-cli", test_image, docker_client, tmp_path_factory)
    twin = ensure_synthetic(registry().get("ldct-iqa"), shared_cache)
    with GeminiScript() as llm:
        provider_env(GEMINI_API_KEY=KEY, GOOGLE_GEMINI_BASE_URL=f"http://{_bridge_gateway(docker_client)}:{llm.port}")
        result = docker_bench("--agent=gemini-cli", "--agent-option=model=gemini-scripted", "--agent-option=steps=8",
                              f"--agent-option=image={image}", "--rexmle-time-limit=240", "-k", "ldct-iqa",
                              timeout=400)
        agent_requests = llm.agent_requests()
    print("gemini-cli sent:", [(r.path, r.query) for r in llm.requests])
    run = run_folders(docker_bench.path, "ldct-iqa")[-1]
    result.assert_outcomes(passed=1)
    assert not llm.errors, llm.errors
    assert len(agent_requests) == 2, llm.dump()
    first, second = agent_requests
    assert first.path == "/v1beta/models/gemini-scripted:streamGenerateContent" and first.streaming
    assert first.headers.get("x-goog-api-key") == KEY
    prompt = json.dumps(first.body["contents"], ensure_ascii=False)
    assert description_line(twin) in prompt and "rexmle validate" in prompt
    # Gemini CLI's shell tool really ran the command: the validator's verdict came back as the function response
    responses = GeminiScript.function_responses(second)
    assert len(responses) == 1 and "OK: " in json.dumps(responses[0]["response"]), llm.dump()
    assert_graded_ok(run, twin, image, session_id, docker_client)
    kept = run / "logs" / "gemini-cli" / "gemini-cli"
    assert any((kept / "home" / ".gemini").rglob("session-*.json*")), "no Gemini CLI chat session kept"
    reported = json.loads((kept / "reported_usage.json").read_text())
    assert reported["status"] == "success" and reported["tool_calls"] == 1, reported


# -- a CLI that misbehaves is a FAIL with the reason, and nothing is left running ---------------------------

@pytest.mark.parametrize("script, options, expected", [
    (AsksAndStops, ["--agent-option=steps=8"], "claude-code left no submission: it exited with code 0"),
    (Loops, ["--agent-option=steps=3"], "claude-code left no submission: it exited with code 1"),
    (OverBudget, ["--agent-option=steps=8"], "claude-code left no submission: its budget ran out"),
], ids=["asks-and-stops", "loops", "over-budget"])
def test_a_misbehaving_cli_is_a_fail_with_its_reason(script, options, expected, docker_bench, docker_client,
                                                     test_image, tmp_path_factory, session_id, shared_cache,
                                                     provider_env):
    image = cli_image("claude-code", test_image, docker_client, tmp_path_factory)
    with script() as llm:
        provider_env(ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=f"http://{_bridge_gateway(docker_client)}:{llm.port}")
        result = docker_bench("--agent=claude-code", *options, f"--agent-option=image={image}",
                              "--rexmle-time-limit=60", "-k", "ldct-iqa", timeout=300)
        turns = len(llm.agent_requests())
    run = run_folders(docker_bench.path, "ldct-iqa")[-1]
    result.assert_outcomes(failed=1)
    record = json.loads((run / "result.json").read_text())
    assert record["status"] == "missing" and expected in record["reason"], record["reason"]
    if script is Loops:
        assert turns == 3, llm.dump()  # --max-turns stopped it, not the budget
    if script is OverBudget:
        assert 40 <= record["timings"]["agent_seconds"] < 60  # interrupted at the budget, before the hard limit
    assert not (run / "submission" / "submission.csv").exists()
    assert session_containers(docker_client, session_id) == []


# -- two CLIs in one session -------------------------------------------------------------------------------

def test_two_cli_agents_in_one_session_each_against_its_own_provider(docker_bench, docker_client, test_image,
                                                                     tmp_path_factory, session_id, shared_cache,
                                                                     provider_env):
    claude = cli_image("claude-code", test_image, docker_client, tmp_path_factory)
    mini = cli_image("mini-swe-agent", test_image, docker_client, tmp_path_factory)
    twin = ensure_synthetic(registry().get("ldct-iqa"), shared_cache)
    host = _bridge_gateway(docker_client)
    with AnthropicScript() as anthropic, ChatScript() as chat:
        provider_env(ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=f"http://{host}:{anthropic.port}",
                     OPENAI_API_KEY=KEY, OPENAI_BASE_URL=f"http://{host}:{chat.port}/v1")
        result = docker_bench("--agent=claude-code", "--agent=mini-swe-agent", "--agent-option=steps=8",
                              f"--agent-option=claude-code:image={claude}", f"--agent-option=mini-swe-agent:image={mini}",
                              "--agent-option=mini-swe-agent:model=scripted-chat", "--rexmle-time-limit=240",
                              "-k", "ldct-iqa", timeout=500)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*agent claude-code: score *% over 1 challenge(s), 0 FAIL",
                                 "*agent mini-swe-agent: score *% over 1 challenge(s), 0 FAIL"])
    assert len(anthropic.agent_requests()) == 2 and len(chat.agent_requests()) == 2
    runs = run_folders(docker_bench.path, "ldct-iqa")
    assert sorted(r.parent.name.rsplit("-", 1)[0] for r in runs) == ["claude-code", "mini-swe-agent"]
    for run in runs:
        agent = run.parent.name.rsplit("-", 1)[0]
        assert_graded_ok(run, twin, claude if agent == "claude-code" else mini, session_id, docker_client)
        assert json.loads((run / "result.json").read_text())["agent"] == agent


def test_codex_asking_through_its_own_tool_gets_no_answer_and_fails(docker_bench, docker_client, test_image,
                                                                   tmp_path_factory, session_id, provider_env):
    """Codex 0.169.0 offers ``request_user_input`` even in ``exec``; called there it answers the model with an
    error (nobody is asking), the model stops, and the run is a FAIL with the reason."""
    image = cli_image("codex", test_image, docker_client, tmp_path_factory)
    with AsksThroughItsTool() as llm:
        provider_env(OPENAI_API_KEY=KEY, OPENAI_BASE_URL=f"http://{_bridge_gateway(docker_client)}:{llm.port}/v1")
        result = docker_bench("--agent=codex", "--agent-option=model=gpt-scripted", f"--agent-option=image={image}",
                              "--rexmle-time-limit=120",
                              "-k", "ldct-iqa", timeout=300)
    run = run_folders(docker_bench.path, "ldct-iqa")[-1]
    result.assert_outcomes(failed=1)
    outputs = [o["output"] for r in llm.requests for o in llm.call_outputs(r)]
    assert llm.asked and outputs == ["request_user_input is unavailable in Default mode"], llm.dump()
    record = json.loads((run / "result.json").read_text())
    assert "codex left no submission: it exited with code 0" in record["reason"], record["reason"]
    assert session_containers(docker_client, session_id) == []
