"""The harness's disclosure: what the agents of a session could reach and see, said in every report.

Why: a score is only worth what the harness kept from the agent. A reader of a report (a reviewer, a
leaderboard) must see, without reading the code, whether the test answers could have leaked: the
network the agents had and the hosts they asked for, that the answers were never inside the sandbox,
that the validation endpoint answers validity only, what data was graded, the budget, the suspected
leaks, and every option that weakened the sandbox. A report built with such an option says so in its
first line (``unsafe_line``).

The document (the session report's ``disclosure``)::

    {"network": "gateway", "egress_allow": [...], "hosts_asked": [{"host", "port", "allowed", "count"}],
     "hosts_flooded": bool, "answers_in_sandbox": false, "validation": str, "data": "synthetic" | "real",
     "budget": str | null, "suspected_leaks": [task ids], "unsafe": [str], "provider_tools": bool}
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..gateway.egress import DEFAULT_ALLOW
from .mdtext import md_code

VALIDATION = ("the validation endpoint answers whether the submission folder is well-formed (files, shapes, "
              "formats), never a score or any value computed from the answers")
ANSWERS = "the test answers were never inside the agent's sandbox: they stay on the host, read by the grader only"
#: hosts listed per report (the most asked first); the rest are counted
MAX_HOSTS = 50
#: settings that weaken the sandbox, with what each one gives the agent
UNSAFE = {
    "unsafe_local": "--rexmle-unsafe-local: the local runtime ran without a sandbox (the agent could read "
                    "everything the harness user can, test answers included)",
    "agent_as_root": "--rexmle-agent-as-root: the agent ran as uid 0",
    "unsafe_same_uid": "--rexmle-unsafe-same-uid: the agent ran as the harness's own user",
    "allow_provider_tools": "--rexmle-allow-provider-tools: provider-side tools (web search, fetch, remote "
                            "MCP, code execution) could fetch for the agent outside the egress allow-list",
}
NETWORKS = {
    "bridge": "--rexmle-network=bridge: the agents had the internet, where the tasks' answers are downloadable",
    "host": "--rexmle-network=host: the agents had the host's network, loopback services included",
}


def unsafe_options(settings: Mapping[str, Any]) -> list[str]:
    """Each option of the session that weakened the sandbox, with what it gave the agent."""
    found = [text for key, text in UNSAFE.items() if settings.get(key) and key != "unsafe_local"]
    if settings.get("sandbox") == "none":  # the mechanism the runtime used, not the one asked for
        found.insert(0, UNSAFE["unsafe_local"])
    network = settings.get("network")
    if network in NETWORKS:
        found.append(NETWORKS[str(network)])
    return found


def _hosts(runs: Iterable[Mapping[str, Any]]) -> tuple[list[dict], bool]:
    """The hosts the session's runs asked the proxy for, summed over runs; whether a run flooded its log."""
    totals: dict[tuple, int] = {}
    flooded = False
    for run in runs:
        egress = run.get("egress")
        entries = egress.get("hosts", []) if isinstance(egress, dict) else (egress or [])
        flooded = flooded or bool(isinstance(egress, dict) and egress.get("flooded"))
        for entry in entries:
            if not isinstance(entry, dict) or not isinstance(entry.get("host"), str):
                continue
            key = (entry["host"][:255], entry.get("port"), bool(entry.get("allowed")))
            count = entry.get("count")
            totals[key] = totals.get(key, 0) + (count if isinstance(count, int) and count > 0 else 1)
    ranked = sorted(totals.items(), key=lambda item: (-item[1], item[0][0]))
    return [{"host": h, "port": p, "allowed": a, "count": n} for (h, p, a), n in ranked[:MAX_HOSTS]], flooded


def build_disclosure(settings: Mapping[str, Any], runs: Iterable[Mapping[str, Any]], records: Iterable[Any],
                     data_kind: str) -> dict[str, Any]:
    """The disclosure of one session (``settings``: its public settings; ``runs``: each run's facts)."""
    hosts, flooded = _hosts(runs)
    allow = list(DEFAULT_ALLOW) + [str(h) for h in settings.get("egress_allow") or []]
    network = settings.get("network") or "gateway"
    return {
        "network": network,
        "egress_allow": allow if network == "gateway" else [],
        "hosts_asked": hosts,
        "hosts_flooded": flooded,
        "answers_in_sandbox": settings.get("sandbox") == "none",
        "answers": ANSWERS if settings.get("sandbox") != "none" else UNSAFE["unsafe_local"],
        "validation": VALIDATION,
        "data": data_kind,
        "budget": settings.get("budget"),
        "suspected_leaks": sorted({getattr(r, "task_id", "?") for r in records if getattr(r, "suspected_leak", None)}),
        "unsafe": unsafe_options(settings),
        "provider_tools": bool(settings.get("allow_provider_tools")),
    }


def unsafe_line(disclosure: Mapping[str, Any] | None) -> str | None:
    """The first line of a report built with an unsafe option, or None."""
    unsafe = (disclosure or {}).get("unsafe") or []
    if not unsafe:
        return None
    names = ", ".join(text.split(":", 1)[0] for text in unsafe)
    return f"UNSAFE: this session weakened the sandbox ({names}); its scores are not comparable with safe runs."


def markdown_lines(disclosure: Mapping[str, Any] | None) -> list[str]:
    """The disclosure as a Markdown section: the texts are the harness's own, host names (the agent's
    words) are code spans, which render neither HTML nor links."""
    if not disclosure:
        return []
    lines = ["## Disclosure", ""]
    network = disclosure.get("network")
    lines.append(f"- Network: `{network}`" + (" — the agents' only peer was the session's gateway" if network == "gateway"
                                               else ""))
    if disclosure.get("egress_allow"):
        lines.append("- Egress allow-list: " + ", ".join(md_code(h) for h in disclosure["egress_allow"]))
    hosts = disclosure.get("hosts_asked") or []
    asked = ", ".join(host_text(h, md_code) for h in hosts[:20]) or "none"
    lines.append(f"- Hosts the agents asked for: {asked}" + (" …" if len(hosts) > 20 else ""))
    if disclosure.get("hosts_flooded"):
        lines.append("- An agent flooded the egress log with distinct hosts (aggregated, nothing dropped)")
    return lines + [f"- Answers: {disclosure.get('answers')}", f"- Validation: {disclosure.get('validation')}",
                    f"- Data: {disclosure.get('data')}", f"- Budget per run: {disclosure.get('budget') or 'none'}",
                    f"- Suspected leaks: {', '.join(disclosure.get('suspected_leaks') or []) or 'none'}",
                    f"- Unsafe options: {'; '.join(disclosure.get('unsafe') or []) or 'none'}", ""]


def host_text(entry: Mapping[str, Any], where: Callable[[str], str] = str) -> str:
    """``host:port (allowed, 3×)``; ``where`` formats the host and port (the agent's words)."""
    verdict = "allowed" if entry.get("allowed") else "refused"
    return f"{where(str(entry.get('host')) + ':' + str(entry.get('port')))} ({verdict}, {entry.get('count')}×)"


def junit_properties(disclosure: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """``disclosure.network``, ``disclosure.egress_allow``, ... as JUnit testsuite properties (one line each)."""
    if not disclosure:
        return []
    hosts = disclosure.get("hosts_asked") or []
    return [("disclosure.network", str(disclosure.get("network"))),
            ("disclosure.egress_allow", ",".join(disclosure.get("egress_allow") or [])),
            ("disclosure.hosts_asked", ",".join(f"{h.get('host')}:{h.get('port')}:"
                                                f"{'allowed' if h.get('allowed') else 'refused'}:{h.get('count')}"
                                                for h in hosts)),
            ("disclosure.answers_in_sandbox", str(bool(disclosure.get("answers_in_sandbox"))).lower()),
            ("disclosure.validation", str(disclosure.get("validation"))),
            ("disclosure.data", str(disclosure.get("data"))),
            ("disclosure.budget", str(disclosure.get("budget") or "none")),
            ("disclosure.suspected_leaks", ",".join(disclosure.get("suspected_leaks") or [])),
            ("disclosure.unsafe", "; ".join(disclosure.get("unsafe") or []) or "none")]
