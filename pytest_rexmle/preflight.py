"""Everything a session can know before its first run, checked at once and reported together.

Why: a newcomer used to meet the problems one attempt at a time, late. A wrong ``dir=`` was a harness ERROR
with a 20-line traceback inside the results table; an image agent whose model key was not set started and
failed with ``HTTP Error 502: Bad Gateway``; the Slurm partition, the image and the data each stopped the
next attempt. All of them are knowable at start, so :func:`session_problems` asks each check in turn, keeps
going past a failed one where the next does not depend on it, and the plugin stops with one usage error
(:func:`usage_message`) listing every problem with its fix.

:func:`selected_tasks` reads the session's ``-k`` / ``-m`` the way pytest will apply them to the benchmark's
items, so the checks and the header's campaign size concern the selected tasks only.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .agents import AGENTS
from .agents.image_ready import image_problems
from .data.missing import missing_lines
from .errors import RexmleError
from .gateway.budget import Budget
from .gateway.upstream import SOURCES, upstreams_from
from .runtime import runtime_for
from .runtime.base import RuntimeUnavailable
from .runtime.choice import choose_runtime
from .runtime.gateway_link import network_notices
from .task import registry

if TYPE_CHECKING:
    import pytest

    from .agents.base import Agent
    from .runtime.base import Runtime
    from .settings import Settings
    from .task import Task

#: how each model API is named in the messages
API_NAMES = {"openai": "OpenAI(-compatible)", "anthropic": "Anthropic", "gemini": "Gemini"}
#: other keys an agent may use itself for an OpenAI-compatible model, its calls going out directly (ML-Master's
#: DEEPSEEK_API_KEY, AIDE's OPENROUTER_API_KEY, ...): with one set the check stays quiet rather than stop a
#: session that may well work
DIRECT_KEYS = {"openai": ("DEEPSEEK_API_KEY", "OPENROUTER_API_KEY", "AZURE_OPENAI_API_KEY", "AZURE_OPENAI_ENDPOINT",
                          "LITELLM_API_KEY")}


@dataclass
class Preflight:
    """What the checks found: every problem (each with its fix), the session's settings (with the runtime it
    chose) and the runtime, where one could be made."""

    settings: Settings
    problems: list[str] = field(default_factory=list)
    agents: list[Agent] = field(default_factory=list)
    runtime: Runtime | None = None
    notices: list[str] = field(default_factory=list)  # the network's warnings, said once by the controller


def _item_names(task: Task, agents: tuple[str, ...]) -> set[str]:
    """The names pytest's ``-k`` matches a benchmark item against (its id, the module, the task's reference id,
    aliases and markers; see ``plugin.pytest_collection_modifyitems``)."""
    ids = [f"{task.id}-{agent}" for agent in agents] if len(agents) > 1 else [task.id]
    return {"pytest_rexmle", "benchmark.py", "test_task", "rexmle", task.reference_id, *task.aliases, *task.markers,
            *(f"test_task[{i}]" for i in ids)}


def _matches(expression: str, matcher) -> bool:
    """Whether pytest's ``-k``/``-m`` ``expression`` selects with ``matcher``; True when it cannot be read (pytest
    then reports the expression itself)."""
    try:  # pytest's own parser (private, pinned in constraints.txt): the same grammar as -k and -m
        from _pytest.mark.expression import Expression  # start-up: _pytest only where this runs

        return bool(Expression.compile(expression).evaluate(matcher))
    except Exception:  # noqa: BLE001 (pytest's own error says what is wrong with the expression; a pytest
        return True    # without this module: every task counts, as the checks did before)


def selected_tasks(config: pytest.Config, settings: Settings) -> list[Task]:
    """The tasks ``-k`` and ``-m`` leave, known before collection (the checks run at configure time)."""
    keyword = str(config.getoption("keyword", "") or "")
    markexpr = str(config.getoption("markexpr", "") or "")
    agents = settings.agents or ((settings.agent,) if settings.agent else ())
    return [task for task in registry() if _selected(task, keyword, markexpr, agents)]


def _selected(task: Task, keyword: str, markexpr: str, agents: tuple[str, ...]) -> bool:
    """pytest's rules: ``-k`` matches a case-insensitive substring of any name, ``-m`` a marker's exact name."""
    names = [n.lower() for n in _item_names(task, agents)]
    marks = {*task.markers, "rexmle"}
    if keyword and not _matches(keyword, lambda sub, **_: any(sub.lower() in n for n in names)):
        return False
    return not markexpr or _matches(markexpr, lambda name, **_: name in marks)


def build_agents(settings: Settings, found: Preflight) -> None:
    """Each of the session's agents from its options, and what its own preflight finds."""
    for name in map(str, settings.agents or (settings.agent,)):
        options = settings.options_for(name)
        try:
            cls = AGENTS.load(name)
        except RexmleError as exc:  # an agent that does not exist: nothing of its options to look at
            found.problems.append(str(exc))
            continue
        try:
            found.agents.append(cls(name=name, options=dict(options)))
        except RexmleError as exc:
            found.problems.append(str(exc))
        own_checks = getattr(cls, "option_problems", None)  # an entry point's class may not derive from Agent
        if own_checks is not None:
            found.problems.extend(own_checks(name, options))


def model_key_problems(agent: Agent, network: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """The model APIs ``agent`` calls that this host has neither a key nor an endpoint of its own for: the
    gateway (or, off the gateway, the agent itself) would get the provider's refusal, which the agent sees
    as ``HTTP Error 502`` after its run has started."""
    if network == "none":  # no model call can leave the run: nothing to check
        return []

    env = os.environ if environ is None else environ
    _, broken = upstreams_from(env)
    problems = []
    for protocol in agent.model_protocols():
        url_vars, key_vars, default = SOURCES[protocol]
        if protocol in broken:
            problems.append(f"agent {agent.name!r} calls the {API_NAMES[protocol]} API: {broken[protocol]}; fix or "
                            f"unset {' / '.join(url_vars)}")
        elif not any(env.get(v) for v in (*key_vars, *url_vars, *DIRECT_KEYS.get(protocol, ()))):
            problems.append(f"agent {agent.name!r} calls the {API_NAMES[protocol]} API ({default}) and this host has "
                            f"no key for it: export {key_vars[0]}=... before pytest (the gateway holds it; the agent "
                            f"never sees it), or point {url_vars[0]} at a server of your own that takes none")
    return problems


def _attempt(found: Preflight, check, *args) -> bool:
    """Run one check; its RexmleError or RuntimeUnavailable becomes a problem. True when it passed."""
    try:
        check(*args)
    except (RexmleError, RuntimeUnavailable) as exc:
        found.problems.append(str(exc))
        return False
    return True


def runtime_problems(found: Preflight, tasks: list[Task]) -> None:
    """Choose and check the runtime: the agents' isolation, the scheduler's partition and its limits, the
    runtime itself, each image, the network it must give. A check that another's failure makes moot is
    skipped (a runtime that is not there has no images to look at)."""
    settings = found.settings

    def choose() -> None:
        choice = choose_runtime(found.agents, settings)
        if choice.chosen:
            found.settings = dataclasses.replace(settings, runtime=choice.name, runtime_reason=choice.reason)
        found.runtime = runtime_for(found.settings)

    if not _attempt(found, choose) or found.runtime is None:
        return
    runtime = found.runtime
    for agent in found.agents:
        _attempt(found, agent.check_isolation, runtime.isolation, runtime.name)
    runtime.trusted_agents = all(agent.trusted for agent in found.agents)
    scheduler = getattr(runtime, "preflight", None)  # a scheduler's queue: partition, account, time limit
    limit = max((settings.time_limit_for(t) for t in tasks), default=settings.time_limit or 0.0)
    scheduled = scheduler(limit) if scheduler is not None else []
    found.problems.extend(scheduled)
    if scheduled or not _attempt(found, runtime.check):
        return  # its probe job would only meet the same refusal, and its images cannot be looked at
    for image in dict.fromkeys(agent.image for agent in found.agents if agent.image):
        _attempt(found, runtime.check_image, image)

    _attempt(found, lambda: found.notices.extend(network_notices(runtime, found.settings.network)))

    found.problems.extend(image_problems(found.agents, runtime))


def data_problem(settings: Settings, tasks: list[Task]) -> str | None:
    """The selected tasks whose data is not prepared, grouped by download: said beside the other problems
    (alone, it is the session's note and those items skip)."""
    if settings.data != "prepared" or settings.prepare or not tasks:
        return None

    lines = missing_lines(tasks, settings.data_dir)
    return "\n".join(lines) if lines else None


def session_problems(settings: Settings, tasks: list[Task]) -> Preflight:
    """Every check of the session's start, each problem once; the plugin raises when there is any."""
    found = Preflight(settings)
    build_agents(settings, found)
    for agent in found.agents:
        found.problems.extend(model_key_problems(agent, settings.network))
    if len(found.agents) == len(settings.agents or (settings.agent,)):
        runtime_problems(found, tasks)
    if found.problems:
        extra = data_problem(found.settings, tasks)
        if extra:
            found.problems.append(extra)
    return found


def usage_message(problems: list[str]) -> str:
    """One message for all of them, numbered, each with its fix: fixing them needs one more attempt, not one
    per problem."""
    if len(problems) == 1:
        return problems[0]
    items = "\n".join(f"{n}. " + text.replace("\n", "\n   ") for n, text in enumerate(problems, 1))
    return f"rexmle: {len(problems)} problems stop the session before any run; fix them all, then run again:\n{items}"


def campaign_line(settings: Settings, tasks: list[Task]) -> str:
    """The campaign's size, said before it starts: its runs, their hours and GPU-hours at the time limit
    (runs x time limit x GPUs per run, the most it can take) and the model budget in all where one is set."""
    agents = len(settings.agents or (settings.agent,))
    runs = len(tasks) * agents
    hours = agents * sum(settings.time_limit_for(t) for t in tasks) / 3600
    gpu_hours = agents * sum(settings.time_limit_for(t) * t.gpus for t in tasks) / 3600
    no_gpus = "" if settings.gpus or settings.runtime == "slurm" else \
        " (the tasks' GPUs; this session has none: --rexmle-gpus)"
    line = (f"rexmle: plan: {runs} run(s) ({len(tasks)} task(s) x {agents} agent(s)), at most "
            f"{hours:,.4g} h of runs and {gpu_hours:,.4g} GPU-hour(s) at the time limit{no_gpus}; ")
    budget = Budget.parse(settings.budget)
    if budget is None:
        return line + "no model budget (--rexmle-budget)"
    totals = [f"{what} {value * runs:,.{digits}f}" for what, value, digits in
              (("USD", budget.usd, 2), ("tokens", budget.tokens, 0), ("requests", budget.requests, 0))
              if value is not None]
    return line + f"model budget {settings.budget} per run, at most {', '.join(totals)} in all"
