"""A CLI's own usage report held against the gateway's metered usage.

Why both: the gateway meters what the provider answered, the same way for every agent, and is the
number the benchmark reports. A CLI's own report (Claude Code's ``result`` event, Codex's
``turn.completed`` events, Gemini CLI's ``stats``, mini-swe-agent's trajectory) is what its users see;
a difference between the two is a finding worth showing (a CLI that leaves side calls out, counts
cached tokens differently, or lost events), never something to average away.
"""

from __future__ import annotations

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
