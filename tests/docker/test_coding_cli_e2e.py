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
from dataclasses import dataclass
from pathlib import Path

import numpy  # noqa: F401  (imported before pytester snapshots sys.modules: numpy cannot be imported twice)
import pytest

from pytest_rexmle.agents.usage import compare_usage
from pytest_rexmle.data.synthetic import ensure_synthetic
from pytest_rexmle.report.atif import load as load_atif
from pytest_rexmle.task import registry

from ..agent_images import KEY
from ..conftest import run_folders
from .conftest import agent_image, assert_no_file_holds, bridge_gateway, description_line, session_containers
from .providers.anthropic import OUTPUT_TOKENS, AnthropicScript
from .providers.chat import PROMPT_TOKENS, ChatScript
from .providers.gemini import GeminiScript
from .providers.misbehaving import AsksAndStops, AsksThroughItsTool, Loops, OverBudget
from .providers.responses import INPUT_TOKENS as RESPONSES_INPUT_TOKENS
from .providers.responses import ResponsesScript

pytestmark = [pytest.mark.docker, pytest.mark.slow]

#: every provider variable a CLI could read: cleared first, so only what a test sets reaches the agent
PROVIDER_VARIABLES = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL",
                      "GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL", "OPENROUTER_API_KEY",
                      "DEEPSEEK_API_KEY", "REXMLE_VALIDATE_URL")


def cli_image(name: str, docker_client, tmp_path_factory) -> str:
    """rexmle/<name>:latest, the CLI's real recipe on the real base (cached by recipe hash)."""
    return agent_image(name, docker_client, tmp_path_factory)


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
    assert_no_file_holds(run, KEY)
    meta = json.loads((run / "run.json").read_text())
    assert meta["image"] == image and meta["exit_code"] == 0
    assert session_containers(docker_client, session_id) == []
    assert_trajectory_is_the_meters(run, meta)
    return record


def assert_trajectory_is_the_meters(run: Path, meta: dict) -> None:
    """trajectory.atif.json validates against ATIF v1.7's rules, its totals are the gateway's meter, and the
    CLI's tool call is a step whose observation is the result the CLI carried back to the model."""
    trajectory = load_atif(run / "trajectory.atif.json")
    usage, final = meta["usage"], trajectory.final_metrics
    assert (final.total_prompt_tokens, final.total_completion_tokens, final.total_cached_tokens) == \
        (usage["input_tokens"], usage["output_tokens"], usage["cached_tokens"]), (final, usage)
    steps = [s for s in trajectory.steps if s.source == "agent"]
    assert len(steps) >= 2 and sum(s.metrics.prompt_tokens for s in steps) == usage["input_tokens"]
    assert any(s.tool_calls and s.observation and s.observation.results for s in steps), trajectory.steps
    assert_agent_log_is_embedded(trajectory, meta["agent"])


def assert_agent_log_is_embedded(trajectory, agent: str) -> None:
    """The CLI's own log is embedded as a trajectory reported by the agent, apart from the gateway's totals,
    and it holds the shell command the CLI ran with the validator's verdict as that call's observation."""
    assert "the agent's claims, not observed by the harness" in trajectory.notes
    (reported,) = [t for t in trajectory.subagent_trajectories or () if t.agent.name == agent]
    assert reported.extra["reported_by"] == "agent" and reported.extra["source_file"].startswith(f"logs/{agent}/")
    ran = [(call, result) for step in reported.steps for call in step.tool_calls or ()
           for result in (step.observation.results if step.observation else ())
           if result.source_call_id == call.tool_call_id]
    assert any("rexmle validate" in json.dumps(call.arguments) and "OK: " in json.dumps(result.content)
               for call, result in ran), reported.steps


@dataclass
class CliRun:
    """One CLI's session on ldct-iqa against its scripted provider, and what it left."""
    result: object
    llm: object
    agent_requests: list
    run: Path
    twin: object
    image: str

    def two_turns(self):
        """The run passed and the CLI asked its provider exactly twice (its command, then the final answer)."""
        self.result.assert_outcomes(passed=1)
        assert not self.llm.errors, self.llm.errors
        assert len(self.agent_requests) == 2, self.llm.dump()
        return self.agent_requests

    def assert_told_the_task(self, messages) -> None:
        """The task's description and the validator's command reached the model in the CLI's first request."""
        prompt = json.dumps(messages, ensure_ascii=False)
        assert description_line(self.twin) in prompt and "rexmle validate" in prompt

    def assert_tool_ran(self, results: list, field: str) -> None:
        """The CLI's own tool really ran the command: the validator's verdict came back to the model as the
        tool's one result."""
        assert len(results) == 1 and "OK: " in json.dumps(results[0][field]), self.llm.dump()

    def kept(self, agent: str) -> Path:
        """Where the run's logs keep the CLI's own files."""
        return self.run / "logs" / agent / agent

    def reported_usage(self, agent: str) -> dict:
        return json.loads((self.kept(agent) / "reported_usage.json").read_text())


@pytest.fixture
def cli_session(docker_bench, docker_client, test_image, tmp_path_factory, shared_cache, provider_env):
    """``cli_session(agent, script, key_variable, url_variable, *options)``: the agent's image built, its
    provider variables pointing at ``script`` (a scripted provider) on the host, one ldct-iqa session run."""
    def run(agent: str, script, key_variable: str, url_variable: str, *options: str, url_path: str = "",
            time_limit: int = 240, timeout: int = 400) -> CliRun:
        image = cli_image(agent, docker_client, tmp_path_factory)
        twin = ensure_synthetic(registry().get("ldct-iqa"), shared_cache)
        with script() as llm:
            provider_env(**{key_variable: KEY,
                            url_variable: f"http://{bridge_gateway(docker_client)}:{llm.port}{url_path}"})
            result = docker_bench(f"--agent={agent}", *options, f"--agent-option=image={image}",
                                  f"--rexmle-time-limit={time_limit}", "-k", "ldct-iqa", timeout=timeout)
            agent_requests = llm.agent_requests()
        return CliRun(result, llm, agent_requests, run_folders(docker_bench.path, "ldct-iqa")[-1], twin, image)

    return run


# -- Claude Code ------------------------------------------------------------------------------------------

def test_claude_code_runs_end_to_end_against_a_scripted_anthropic_api(cli_session, session_id, docker_client):
    cli = cli_session("claude-code", AnthropicScript, "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL",
                      "--agent-option=model=claude-scripted-1", "--agent-option=steps=8")
    run, llm = cli.run, cli.llm
    stderr = (run / "logs" / "agent.stderr.log").read_text(errors="replace")
    first, second = cli.two_turns()
    assert first.path == "/v1/messages" and first.headers.get("x-api-key") == KEY
    assert first.body["model"] == "claude-scripted-1" and first.streaming  # Claude Code streams its turns
    cli.assert_told_the_task(first.body["messages"])
    cli.assert_tool_ran(AnthropicScript.tool_results(second), "content")  # through Claude Code's Bash tool
    assert_graded_ok(run, cli.twin, cli.image, session_id, docker_client)
    # Claude Code's own files and its own usage report are kept in the run's logs
    kept = cli.kept("claude-code")
    assert (kept / "prompt.md").is_file() and (kept / "stdout.jsonl").is_file()
    assert any((kept / "config").rglob("*.jsonl")), "no Claude Code session transcript kept"
    reported = cli.reported_usage("claude-code")
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

def test_mini_swe_agent_runs_end_to_end_against_scripted_chat_completions(cli_session, session_id, docker_client):
    cli = cli_session("mini-swe-agent", ChatScript, "OPENAI_API_KEY", "OPENAI_BASE_URL",
                      "--agent-option=model=scripted-chat", "--agent-option=steps=6", url_path="/v1")
    first, second = cli.two_turns()
    assert first.path == "/v1/chat/completions" and first.headers.get("authorization") == f"Bearer {KEY}"
    assert first.body["model"] == "scripted-chat"  # LiteLLM's openai/ prefix is stripped on the wire
    cli.assert_told_the_task(first.body["messages"])
    cli.assert_tool_ran(ChatScript.tool_messages(second), "content")  # mini-swe-agent's bash: the tool message
    assert_graded_ok(cli.run, cli.twin, cli.image, session_id, docker_client)
    trajectory = json.loads((cli.kept("mini-swe-agent") / "trajectory.json").read_text())
    assert trajectory["info"]["exit_status"] == "Submitted"
    reported = cli.reported_usage("mini-swe-agent")
    assert reported["calls"] == 2 and reported["input_tokens"] == 2 * PROMPT_TOKENS, reported


# -- Codex CLI --------------------------------------------------------------------------------------------

def test_codex_runs_end_to_end_against_a_scripted_responses_api(cli_session, session_id, docker_client):
    cli = cli_session("codex", ResponsesScript, "OPENAI_API_KEY", "OPENAI_BASE_URL",
                      "--agent-option=model=gpt-scripted", url_path="/v1")
    offered = sorted(t.get('name', t.get('type')) for t in cli.agent_requests[0].body.get('tools') or [])
    print(f"codex offered {offered}, "
          f"the script used {cli.llm.tool_used}")
    first, second = cli.two_turns()
    assert first.path == "/v1/responses" and first.headers.get("authorization") == f"Bearer {KEY}"
    assert first.body["model"] == "gpt-scripted" and first.streaming  # Codex always streams
    cli.assert_told_the_task(first.body["input"])
    cli.assert_tool_ran(ResponsesScript.call_outputs(second), "output")  # Codex's shell tool: the call's output
    assert_graded_ok(cli.run, cli.twin, cli.image, session_id, docker_client)
    assert any((cli.kept("codex") / "home" / "sessions").rglob("rollout-*.jsonl")), "no Codex session rollout kept"
    reported = cli.reported_usage("codex")
    assert reported["input_tokens"] == 2 * RESPONSES_INPUT_TOKENS and reported["turns"] == 1, reported


# -- Gemini CLI -------------------------------------------------------------------------------------------

def test_gemini_cli_runs_end_to_end_against_a_scripted_gemini_api(cli_session, session_id, docker_client):
    cli = cli_session("gemini-cli", GeminiScript, "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL",
                      "--agent-option=model=gemini-scripted", "--agent-option=steps=8")
    print("gemini-cli sent:", [(r.path, r.query) for r in cli.llm.requests])
    first, second = cli.two_turns()
    assert first.path == "/v1beta/models/gemini-scripted:streamGenerateContent" and first.streaming
    assert first.headers.get("x-goog-api-key") == KEY
    cli.assert_told_the_task(first.body["contents"])
    cli.assert_tool_ran(GeminiScript.function_responses(second), "response")  # its shell tool: the function response
    assert_graded_ok(cli.run, cli.twin, cli.image, session_id, docker_client)
    sessions = (cli.kept("gemini-cli") / "home" / ".gemini").rglob("session-*.json*")
    assert any(sessions), "no Gemini CLI chat session kept"
    reported = cli.reported_usage("gemini-cli")
    assert reported["status"] == "success" and reported["tool_calls"] == 1, reported


# -- a CLI that misbehaves is a FAIL with the reason, and nothing is left running ---------------------------

@pytest.mark.parametrize("script, options, expected", [
    (AsksAndStops, ["--agent-option=steps=8"], "claude-code left no submission: it exited with code 0"),
    (Loops, ["--agent-option=steps=3"], "claude-code left no submission: it exited with code 1"),
    (OverBudget, ["--agent-option=steps=8"], "claude-code left no submission: its budget ran out"),
], ids=["asks-and-stops", "loops", "over-budget"])
def test_a_misbehaving_cli_is_a_fail_with_its_reason(script, options, expected, cli_session, docker_client,
                                                     session_id):
    cli = cli_session("claude-code", script, "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", *options, time_limit=60,
                      timeout=300)
    result, llm, run, turns = cli.result, cli.llm, cli.run, len(cli.agent_requests)
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
    claude = cli_image("claude-code", docker_client, tmp_path_factory)
    mini = cli_image("mini-swe-agent", docker_client, tmp_path_factory)
    twin = ensure_synthetic(registry().get("ldct-iqa"), shared_cache)
    host = bridge_gateway(docker_client)
    with AnthropicScript() as anthropic, ChatScript() as chat:
        provider_env(ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=f"http://{host}:{anthropic.port}",
                     OPENAI_API_KEY=KEY, OPENAI_BASE_URL=f"http://{host}:{chat.port}/v1")
        result = docker_bench("--agent=claude-code", "--agent=mini-swe-agent", "--agent-option=steps=8",
                              f"--agent-option=claude-code:image={claude}", f"--agent-option=mini-swe-agent:image={mini}",
                              "--agent-option=mini-swe-agent:model=scripted-chat", "--rexmle-time-limit=240",
                              "-k", "ldct-iqa", timeout=500)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*agent claude-code: score *% over 1 task(s), 0 FAIL",
                                 "*agent mini-swe-agent: score *% over 1 task(s), 0 FAIL"])
    assert len(anthropic.agent_requests()) == 2 and len(chat.agent_requests()) == 2
    runs = run_folders(docker_bench.path, "ldct-iqa")
    assert sorted(r.parent.name.rsplit("-", 1)[0] for r in runs) == ["claude-code", "mini-swe-agent"]
    for run in runs:
        agent = run.parent.name.rsplit("-", 1)[0]
        assert_graded_ok(run, twin, claude if agent == "claude-code" else mini, session_id, docker_client)
        assert json.loads((run / "result.json").read_text())["agent"] == agent


def test_codex_asking_through_its_own_tool_gets_no_answer_and_fails(cli_session, docker_client, session_id):
    """Codex 0.169.0 offers ``request_user_input`` even in ``exec``; called there it answers the model with an
    error (nobody is asking), the model stops, and the run is a FAIL with the reason."""
    cli = cli_session("codex", AsksThroughItsTool, "OPENAI_API_KEY", "OPENAI_BASE_URL",
                      "--agent-option=model=gpt-scripted", url_path="/v1", time_limit=120, timeout=300)
    result, llm, run = cli.result, cli.llm, cli.run
    result.assert_outcomes(failed=1)
    outputs = [o["output"] for r in llm.requests for o in llm.call_outputs(r)]
    assert llm.asked and outputs == ["request_user_input is unavailable in Default mode"], llm.dump()
    record = json.loads((run / "result.json").read_text())
    assert "codex left no submission: it exited with code 0" in record["reason"], record["reason"]
    assert session_containers(docker_client, session_id) == []
