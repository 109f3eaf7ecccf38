"""Start Codex CLI (``codex exec``, npm @openai/codex) headless under the ReX-MLE contract.

Mapping: ``codex exec --json`` (one task, non-interactive; JSON-lines events whose ``turn.completed``
carry Codex's own token usage) with ``--dangerously-bypass-approvals-and-sandbox`` (no approval prompts
and no Codex sandbox of its own: the container is the sandbox, and Codex's Landlock/seccomp sandbox
cannot start inside it anyway), ``--skip-git-repo-check`` (the workspace is no git repository),
``-C $REXMLE_WORKSPACE`` and ``-m`` from the ``model`` option. The provider is declared on the command
line as a Responses-API provider at OPENAI_BASE_URL (default api.openai.com) whose key is
OPENAI_API_KEY, so only the standard variables are read. ``web_search="disabled"``: Codex would otherwise
offer the provider's own web search in every request, which the gateway refuses. CODEX_HOME (config, sessions with the full
rollout, logs) is ``$REXMLE_WORKSPACE/codex/home``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

from cli_agent import begin, conclude, json_lines, run_cli
from rexmle_adapter import Contract, parse

FLAGS = {"model": ""}  # codex exec has no turn limit: the time budget bounds it
NAME = "codex"
DEFAULT_BASE_URL = "https://api.openai.com/v1"


def command(args: argparse.Namespace, contract: Contract, text: str, base_url: str) -> list[str]:
    provider = {"name": "ReX-MLE provider", "base_url": base_url, "env_key": "OPENAI_API_KEY",
                "wire_api": "responses"}
    argv = [shutil.which("codex") or "codex", "exec", "--json", "--dangerously-bypass-approvals-and-sandbox",
            "--skip-git-repo-check", "-C", str(contract.workspace), "-c", "model_provider=rexmle",
            # no provider-side web search: the gateway refuses it (the provider would fetch outside the
            # egress policy); Codex offers it in every request unless told not to
            "-c", 'web_search="disabled"']
    for key, value in provider.items():
        argv += ["-c", f"model_providers.rexmle.{key}={json.dumps(value)}"]  # JSON strings are TOML's
    if args.model:
        argv += ["-m", args.model]
    return argv + [text]


def reported_usage(events: list[dict]) -> dict:
    """Codex's own account: the sum of its ``turn.completed`` usage events."""
    turns = [e.get("usage") or {} for e in events if e.get("type") == "turn.completed"]
    if not turns:
        return {}
    total = {key: sum(int(u.get(key) or 0) for u in turns)
             for key in ("input_tokens", "cached_input_tokens", "output_tokens")}
    return {"source": "codex turn.completed events", "turns": len(turns), **total}


def main(argv: list[str]) -> int:
    args = parse(argv, FLAGS)
    contract, folder, text = begin(NAME)
    home = folder / "home"
    home.mkdir(exist_ok=True)
    base_url = os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
    code = run_cli(command(args, contract, text, base_url), contract, folder,
                   {"CODEX_HOME": str(home), "RUST_LOG": os.environ.get("RUST_LOG", "warn")})
    usage = reported_usage(json_lines(folder / "stdout.jsonl"))
    return conclude(NAME, contract, code, folder, usage)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
