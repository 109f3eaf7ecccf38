"""Test-only pytest plugin (``-p tests.docker._wiring``): registers the docker runtime and the container
agents when the package's own registries do not list them yet, so benchmark subprocesses can use
``--rexmle-runtime=docker --agent=aide`` before (and after) the entry points are wired.
"""

from pytest_rexmle.agents import AGENTS
from pytest_rexmle.runtime import RUNTIMES

for registry, name, target in (
    (RUNTIMES, "docker", "pytest_rexmle.runtime.docker:DockerRuntime"),
    (AGENTS, "aide", "pytest_rexmle.agents.aide.adapter:AideAgent"),
    (AGENTS, "ml-master", "pytest_rexmle.agents.ml_master.adapter:MLMasterAgent"),
    (AGENTS, "rd-agent", "pytest_rexmle.agents.rd_agent.adapter:RDAgent"),
    (AGENTS, "claude-code", "pytest_rexmle.agents.claude_code.adapter:ClaudeCodeAgent"),
    (AGENTS, "codex", "pytest_rexmle.agents.codex.adapter:CodexAgent"),
    (AGENTS, "gemini-cli", "pytest_rexmle.agents.gemini_cli.adapter:GeminiCLIAgent"),
    (AGENTS, "mini-swe-agent", "pytest_rexmle.agents.mini_swe_agent.adapter:MiniSweAgent"),
):
    if name not in registry.names():
        registry._builtins[name] = target
