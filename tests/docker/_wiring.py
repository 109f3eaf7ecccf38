"""Test-only pytest plugin (``-p tests.docker._wiring``): registers the container agents when the package's
own registry does not list them yet, so benchmark subprocesses can use ``--agent=aide`` before (and after)
they are wired. Runtimes need nothing here: their one registration rule is the entry points.
"""

from pytest_rexmle.agents import AGENTS

for registry, name, target in (
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
