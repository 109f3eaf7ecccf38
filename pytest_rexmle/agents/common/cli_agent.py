"""Shared part of the start scripts of the coding-CLI agents (claude-code, codex, gemini-cli, mini-swe-agent).

A coding CLI is a general agent that works in a shell: unlike AIDE or ML-Master it needs no mapping of
its own search onto our folders. It is told the task (the organisers' description and the harness
instructions), told to write the submission itself into $REXMLE_SUBMISSION_DIR and to check it, and
is run headless: the prompt on the command line, stdin closed (a CLI that waits for a human reads EOF
and ends), its permission prompts skipped (the container is the sandbox), and a deadline a little
shorter than the harness's hard limit. Its own settings, sessions and transcripts live under
``$REXMLE_WORKSPACE/<agent>/`` so that the host-side adapter copies them into the run's logs.

Ending: a CLI that stops without a submission, loops until its turn limit, or runs out of budget
exits non-zero here with that reason on stderr, which the harness reports in the FAIL.
Standard library only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlsplit

from rexmle_adapter import Contract, has_submission, log, run_with_deadline, scrub_secrets, task_description


def prompt(contract: Contract) -> str:
    """The task as every CLI is told it, with where to write the submission and how to check it."""
    lines = [
        f"Write `submission.csv` yourself into `{contract.submission}` (the graded folder), with the columns "
        "and ids of `sample_submission.csv` in the data folder, and write every prediction file it refers to "
        "into that folder too, named in the CSV by its path relative to it.",
        f"Check it with `rexmle validate --submission {contract.submission}` (the same as `rexmle-validate`; "
        "it asks the session's gateway, which checks the format only, never against answers) and fix what it reports.",
    ]
    url = os.environ.get("REXMLE_VALIDATE_URL")
    if url:
        lines.append(f"The same check is also served over HTTP at {url}.")
    lines.append("Nobody will answer questions: work autonomously, and do not stop before a submission that "
                 "validates is in place. Leave a first valid submission early, then improve it.")
    return task_description(contract, "\n".join(lines))


#: the variables naming the model endpoints (the gateway's, in a gated run) and the validation service
ENDPOINT_VARIABLES = ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "REXMLE_VALIDATE_URL")


def begin(name: str) -> tuple[Contract, Path, str]:
    """What every CLI's start script does first: the run's contract, the CLI's folder
    ``$REXMLE_WORKSPACE/<name>`` (its home for settings, sessions and transcripts, kept as logs)
    and the prompt (already saved there as prompt.md, for the record)."""
    contract = Contract.from_env()
    folder = contract.workspace / name
    folder.mkdir(parents=True, exist_ok=True)
    text = prompt(contract)
    (folder / "prompt.md").write_text(text, encoding="utf-8")
    return contract, folder, text


def direct_endpoints(environ: dict[str, str]) -> dict[str, str]:
    """NO_PROXY/no_proxy extended by the endpoints' hosts, when a proxy is set.

    Why: in a gated run HTTP(S)_PROXY and the model endpoints are the same gateway; a CLI that sends its
    model calls through the proxy too (Node and Rust HTTP clients honour HTTPS_PROXY) would reach the
    gateway's egress proxy instead of its model route. The endpoints are reached directly."""
    if not any(environ.get(k) for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")):
        return {}
    hosts = [urlsplit(environ[k]).hostname for k in ENDPOINT_VARIABLES if environ.get(k)]
    current = [h for h in (environ.get("NO_PROXY") or environ.get("no_proxy") or "").split(",") if h.strip()]
    merged = ",".join(dict.fromkeys([*current, *(h for h in hosts if h)]))
    return {"NO_PROXY": merged, "no_proxy": merged} if merged else {}


def run_cli(argv: list[str], contract: Contract, folder: Path, env: dict[str, str]) -> int | None:
    """Run the CLI in the workspace until it ends or its budget is spent; stdout also lands in
    ``<folder>/stdout.jsonl`` (the CLIs' JSON event streams, which carry their own usage reports)."""
    full_env = {**os.environ, **env}
    full_env.update(direct_endpoints(full_env))
    return run_with_deadline(argv, contract.agent_budget(), cwd=contract.workspace, env=full_env,
                             stdout_copy=folder / "stdout.jsonl")


def json_lines(path: Path) -> list[dict]:
    """The JSON objects of a JSON-lines file; other lines (banners, warnings) are skipped."""
    events: list[dict] = []
    if not path.is_file():
        return events
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            events.append(value)
    return events


def result_event_report(events: list[dict], source: str, section: str, counts: tuple[str, ...]) -> tuple[dict, dict]:
    """(the report, the event) of a CLI that ends its stream-json with a ``result`` event carrying its own
    account of the run (Claude Code, Gemini CLI): ``source`` and the ``counts`` of the event's ``section``
    under their own names, to which the caller adds what else the event says; ({}, {}) without one."""
    result: dict = next((e for e in reversed(events) if e.get("type") == "result"), {})
    if not result:
        return {}, {}
    numbers = result.get(section) or {}
    return {"source": source, **{key: numbers.get(key) for key in counts}}, result


def conclude(name: str, contract: Contract, code: int | None, folder: Path,
             usage: dict | None = None) -> int:
    """Save ``usage``, what the CLI itself says it used (tokens, cost, turns), as
    ``<folder>/reported_usage.json``, scrub keys from the CLI's files and turn how it ended into
    the start script's exit status.

    The reported usage is kept apart from the gateway's metered usage on purpose: the two are
    compared, never merged."""
    if usage:
        (folder / "reported_usage.json").write_text(json.dumps(usage, indent=2, sort_keys=True), encoding="utf-8")
    scrub_secrets(folder)
    ended = "its budget ran out" if code is None else f"it exited with code {code}"
    if has_submission(contract.submission):
        log(f"{name} ended ({ended}); submission.csv is in place")
        return 0
    log(f"{name} left no submission: {ended} without writing {contract.submission}/submission.csv")
    return 1 if code in (None, 0) else code
