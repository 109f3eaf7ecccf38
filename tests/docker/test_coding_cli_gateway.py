"""The coding CLIs through the model gateway (issue 17): the real CLI in its container talks only to a
gateway run's listener with the run's token; the gateway swaps in the real key, forwards to the scripted
provider, meters the usage and writes the trajectory.

The Docker runtime does not start a gateway itself yet, so the test plays that part: it opens a gateway
run, serves it on the bridge's gateway address, and gives the run's standard variables to the session
(the variables the runtime will give every agent).
"""

from __future__ import annotations

import json
import socket

import numpy  # noqa: F401  (imported before pytester snapshots sys.modules: numpy cannot be imported twice)
import pytest

from pytest_rexmle.agents.usage import compare_usage
from pytest_rexmle.data.synthetic import ensure_synthetic
from pytest_rexmle.gateway import Gateway, Limits
from pytest_rexmle.task import registry

from ..conftest import run_folders
from .conftest import bridge_gateway, session_containers
from .providers.anthropic import AnthropicScript
from .providers.chat import ChatScript
from .providers.gemini import GeminiScript
from .providers.responses import ResponsesScript
from .test_coding_cli_e2e import PROVIDER_VARIABLES, cli_image

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REAL_KEYS = {"OPENAI_API_KEY": "sk-real-openai-0123456789abcdef", "ANTHROPIC_API_KEY": "sk-ant-real-0123456789abcd",
             "GEMINI_API_KEY": "AIza-real-gemini-0123456789abcd"}
#: the variables of a gateway run the CLI adapters pass into the container
AGENT_VARIABLES = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "GEMINI_API_KEY",
                   "GOOGLE_GEMINI_BASE_URL", "REXMLE_VALIDATE_URL")
CASES = {  # agent: (scripted provider, the header the real key reaches it in, extra options)
    "claude-code": (AnthropicScript, "x-api-key", ["--agent-option=steps=8", "--agent-option=model=claude-scripted-1"]),
    "codex": (ResponsesScript, "authorization", ["--agent-option=model=gpt-scripted"]),
    "gemini-cli": (GeminiScript, "x-goog-api-key", ["--agent-option=steps=8", "--agent-option=model=gemini-scripted"]),
    "mini-swe-agent": (ChatScript, "authorization", ["--agent-option=steps=6", "--agent-option=model=scripted-chat"]),
}


@pytest.mark.parametrize("agent", list(CASES))
def test_cli_through_the_gateway_metered_and_keyless(agent, docker_bench, docker_client, test_image, tmp_path_factory,
                                                     tmp_path, session_id, shared_cache, monkeypatch):
    script, key_header, options = CASES[agent]
    image = cli_image(agent, docker_client, tmp_path_factory)
    twin = ensure_synthetic(registry().get("ldct-iqa"), shared_cache)
    host = bridge_gateway(docker_client)
    for name in PROVIDER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with script() as provider:
        upstream = f"http://127.0.0.1:{provider.port}"
        gateway = Gateway(None, environ={"OPENAI_BASE_URL": upstream + "/v1", "ANTHROPIC_BASE_URL": upstream,
                                         "GEMINI_BASE_URL": upstream, **REAL_KEYS},
                          limits=Limits(upstream_timeout=60.0), task_hosts=())
        try:
            run = gateway.open_run(f"{agent}-1", logs_dir=tmp_path / "gateway-logs", submission_dir=tmp_path / "sub",
                                   task_id="ldct-iqa")
            listener = socket.create_server((host, 0))
            run.serve(listener)
            env = run.environment(f"http://{host}:{listener.getsockname()[1]}")
            for name in AGENT_VARIABLES:
                monkeypatch.setenv(name, env[name])
            result = docker_bench(f"--agent={agent}", f"--agent-option=image={image}", *options,
                                  "--rexmle-time-limit=240", "-k", "ldct-iqa", timeout=400)
            record = run.close()
        finally:
            gateway.close()
        seen = list(provider.requests)
    result.assert_outcomes(passed=1)
    run_dir = run_folders(docker_bench.path, "ldct-iqa")[-1]
    assert json.loads((run_dir / "result.json").read_text())["status"] == "ok"
    assert (run_dir / "submission" / "submission.csv").read_text() == (twin.public / "sample_submission.csv").read_text()
    # the provider saw the real key, never the run's token; the container saw only the token
    real = next(v for k, v in REAL_KEYS.items() if v in json.dumps([r.headers for r in seen]))
    assert all(real in r.headers.get(key_header, "") for r in seen), provider.dump()
    assert not any(run.token in json.dumps(r.headers) for r in seen)
    for path in run_dir.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.stat().st_size < 5_000_000:
            data = path.read_bytes()
            assert not any(v.encode() in data for v in REAL_KEYS.values()), path
            assert run.token.encode() not in data, path  # scrubbed from the CLI's own files too
    # metered by the gateway, a request and a response line per model call, and the CLI's own report agrees
    usage = record["usage"]
    assert usage["source"] == "gateway" and usage["requests"] == len(seen) >= 2, usage
    calls = [json.loads(line) for line in (tmp_path / "gateway-logs" / "model-calls.jsonl").read_text().splitlines()]
    assert [c["phase"] for c in calls if c["call"] == 1] == ["request", "response"]
    assert sorted(c["call"] for c in calls if c["phase"] == "response") == list(range(1, len(seen) + 1))
    reported = json.loads((run_dir / "logs" / agent / agent / "reported_usage.json").read_text())
    comparison = compare_usage(reported, usage)
    print(f"{agent}: reported {reported} metered {usage} mismatch {comparison['mismatch']}")
    assert comparison["mismatch"] == {}, comparison
    assert session_containers(docker_client, session_id) == []
