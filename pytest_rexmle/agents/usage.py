"""A CLI's own usage report held against the gateway's metered usage.

Why both: the gateway meters what the provider answered, the same way for every agent, and is the
number the benchmark reports. A CLI's own report (Claude Code's ``result`` event, Codex's
``turn.completed`` events, Gemini CLI's ``stats``, mini-swe-agent's trajectory) is what its users see;
a difference between the two is a finding worth showing (a CLI that leaves side calls out, counts
cached tokens differently, or lost events), never something to average away.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..agent_output import RefusedFile, read_json

#: the counts both sides report under the same names
COMPARED = ("input_tokens", "output_tokens")


def compare_usage(reported: dict | None, metered: dict | None) -> dict:
    """``{"reported_by_agent", "metered_by_gateway", "mismatch"}``; ``mismatch`` maps each count the two
    disagree on to both values, and is empty when they agree (or one side is missing)."""
    out: dict = {"reported_by_agent": reported or None, "metered_by_gateway": metered or None, "mismatch": {}}
    if not reported or not metered:
        return out
    for key in COMPARED:
        mine, theirs = reported.get(key), metered.get(key)
        if isinstance(mine, int) and isinstance(theirs, int) and mine != theirs:
            out["mismatch"][key] = {"agent": mine, "gateway": theirs}
    return out


def mismatch_line(comparison: dict) -> str | None:
    """One line for a report: ``input_tokens: agent 240 vs gateway 360``; None when they agree."""
    parts = [f"{key}: agent {v['agent']} vs gateway {v['gateway']}" for key, v in comparison["mismatch"].items()]
    return "usage reported by the agent differs from the gateway's: " + "; ".join(parts) if parts else None


def _json_object(path: Path, limit_bytes: int) -> dict | None:
    """The JSON object in a file of the run folder (which the agent could write), read with the
    hostile-file guards; None when it is missing, too large, not JSON or not an object."""
    try:  # bounded in size and in depth: a JSON text nested 200,000 deep is refused before parsing
        value = read_json(path, limit_bytes, allow_constants=True)
    except (OSError, ValueError, RefusedFile):
        return None
    return value if isinstance(value, dict) else None


def run_record(run_dir: Path) -> dict | None:
    """A run's run.json as a dict (bounded read: the run folder is the agent's too), or None."""
    return _json_object(run_dir / "run.json", 4 * 1024 * 1024)


def metered_usage(run_dir: Path) -> dict | None:
    """The gateway's usage of a run, from its run.json (written there when the run went through it)."""
    usage = (run_record(run_dir) or {}).get("usage")
    return usage if isinstance(usage, dict) and usage.get("source") == "gateway" else None


def reported_usage(run_dir: Path, agent: str) -> dict | None:
    """What the agent's CLI reported itself (its start script's ``reported_usage.json``, kept in the logs)."""
    return _json_object(run_dir / "logs" / agent / agent / "reported_usage.json", 1024 * 1024)


def record_comparison(run_dir: Path, agent: str) -> dict | None:
    """``<run>/logs/<agent>/usage_comparison.json`` when the agent reported usage itself; the comparison."""
    reported = reported_usage(run_dir, agent)
    if reported is None:
        return None
    comparison = compare_usage(reported, metered_usage(run_dir))
    (run_dir / "logs" / agent / "usage_comparison.json").write_text(json.dumps(comparison, indent=2, sort_keys=True),
                                                                    encoding="utf-8")
    return comparison


def junit_properties(comparison: dict | None) -> list[tuple[str, object]]:
    """``usage.reported_by_agent.<count>`` and, when the two disagree, ``usage.mismatch``."""
    if not comparison or not comparison.get("reported_by_agent"):
        return []
    reported = comparison["reported_by_agent"]
    props: list[tuple[str, object]] = [(f"usage.reported_by_agent.{key}", reported.get(key))
                                       for key in COMPARED if reported.get(key) is not None]
    line = mismatch_line(comparison)
    if line:
        props.append(("usage.mismatch", line))
    return props
