"""Benchmark settings from the command line, the ini file or the environment, in one order of precedence.

Every value a session uses is decided here, once, by one rule (:data:`PRECEDENCE`): the command-line
option, else its ini-file twin (``rexmle_*`` in pytest.ini / ``[tool.pytest.ini_options]``), else the
``REXMLE_*`` variable where the option has one (:data:`ENVIRONMENT`), else the task's ``task.yaml``
(resource ``limits:``, the time budget), else the built-in default. The runtimes receive the result
(see :mod:`.runtime.policy`) and read no option or variable of their own to change it.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .gpus import parse_gpus
from .limits import LimitError, Limits, parse_pairs
from .paths import default_data_dir

if TYPE_CHECKING:
    import pytest

PRECEDENCE = ("command-line option > ini-file option (rexmle_* in pytest.ini or pyproject.toml) > REXMLE_* "
              "environment variable (where an option has one) > task.yaml (limits:, time budget) > built-in default")
#: the options a REXMLE_* variable stands in for (the variable is also part of the agent's contract)
ENVIRONMENT = {"rexmle_data_dir": "REXMLE_DATA_DIR"}

# (option, ini name, help, kind, default); kind in {"str", "float", "int", "bool", "list", "names"}
# or the tuple of a string option's choices. The ini name less ``rexmle_`` is the Settings field.
#: a string option's choices, or a kind's name
Kind = str | tuple[str, ...]
OPTIONS: list[tuple[str, str, str, Kind, Any]] = [
    ("--agent", "rexmle_agent", "agent to benchmark (e.g. sample, command, or an installed agent); repeatable: "
     "several agents make one item per task and agent; benchmark items are collected only when this is set",
     "names", None),
    ("--agent-option", "rexmle_agent_options", "KEY=VALUE passed to every agent, or AGENT:KEY=VALUE to one of "
     "several (repeatable)", "list", []),
    ("--rexmle-data", "rexmle_data", "prepared (real data from `rexmle prepare`) or synthetic "
     "(small twins)", ("prepared", "synthetic"), "prepared"),
    ("--rexmle-data-dir", "rexmle_data_dir", "data root of prepared tasks (default $REXMLE_DATA_DIR or ~/.cache/rexmle/data)", "str", None),
    ("--rexmle-runtime", "rexmle_runtime", "where agents run: local (bubblewrap sandbox), docker (one container per run) or slurm "
     "(one cluster job per run, all submitted at session start); default: local, or for an agent that runs only "
     "from its image, docker where its engine answers (the header says which and why)", "str", None),
    ("--rexmle-time-limit", "rexmle_time_limit", "wall-clock seconds per agent run, overriding each task's budget", "float", None),
    ("--rexmle-runs-dir", "rexmle_runs_dir", "folder for run folders (default .rexmle/runs)", "str", ".rexmle/runs"),
    ("--rexmle-report-dir", "rexmle_report_dir", "folder for session reports (default .rexmle/report)", "str", ".rexmle/report"),
    ("--rexmle-min-percentile", "rexmle_min_percentile", "fail items whose percentile is below this percent, "
     "e.g. 40 or 40% (0..100, default 0); a bare number in (0, 1] is refused as ambiguous (it used to be a "
     "fraction)", "str", "0"),
    ("--rexmle-repeat", "rexmle_repeat", "runs of each task (and agent): N>1 makes N items "
     "test_task[<task>-r1..rN], each its own run; the report keeps every run and gives each task's "
     "mean over them (default 1)", "int", 1),
    ("--rexmle-prepare", "rexmle_prepare", "prepare missing real data on demand (downloads; locked, so xdist-safe)", "bool", False),
    ("--rexmle-resume", "rexmle_resume", "reuse finished results of the same task, agent and options", "bool", False),
    ("--rexmle-unsafe-local", "rexmle_unsafe_local", "allow the local runtime without bubblewrap (agent can read everything you can)", "bool", False),
    ("--rexmle-seed", "rexmle_seed", "pin the seed of the synthetic twins (reproducible answers, which an agent "
     "that imports the generators can also rebuild); default: keyed by the cache's secret", "int", None),
    ("--rexmle-judge", "rexmle_judge", "capability judge for each run's logs: rules (offline, default) or llm "
     "(any OpenAI-compatible endpoint)", ("rules", "llm", "none"), "rules"),
    ("--rexmle-judge-model", "rexmle_judge_model", "model name for --rexmle-judge=llm", "str", None),
    ("--rexmle-judge-option", "rexmle_judge_options", "KEY=VALUE for the judge, e.g. base_url=... (repeatable)", "list", []),
    ("--rexmle-gpus", "rexmle_gpus", "GPU ids for the runs, e.g. 0,1,2,3, or none (default: $CUDA_VISIBLE_DEVICES, else "
     "all that nvidia-smi lists); the session runs one run per GPU at a time (a task's `gpus:` says how many it takes)",
     "str", None),
    ("--rexmle-parallel", "rexmle_parallel", "runs at once without GPUs (--rexmle-gpus=none; default: one per four CPU "
     "cores, at least 2); with GPUs, an upper bound on runs at once besides the GPUs", "int", None),
    ("--rexmle-network", "rexmle_network", "network for agents: gateway (default: a network of the agent's own "
     "whose only peer is the session's gateway: model APIs with the host's keys, an egress proxy refusing the "
     "tasks' data hosts; the session stops where a runtime cannot confine it so), bridge (the internet, where the "
     "tasks' answers are downloadable, with a warning; not the host's loopback services; docker: Docker's bridge "
     "network; local: bwrap's own network namespace NATed by slirp4netns, else the host's network with a warning), "
     "host (the host's network, loopback services included) or none (no network at all; local: bwrap "
     "--unshare-net, or Landlock + seccomp refusing IP sockets)",
     ("gateway", "bridge", "host", "none"), "gateway"),
    ("--rexmle-sandbox", "rexmle_sandbox", "local runtime isolation: auto (default: bubblewrap where it can create "
     "namespaces, else Landlock), bwrap or landlock (forced; the session stops if it does not "
     "work)", ("auto", "bwrap", "landlock"), "auto"),
    ("--rexmle-limit", "rexmle_limits", "raise or lower a per-run resource limit, NAME=VALUE with NAME in memory, "
     "processes, file_size, disk, tmp, open_files, shm, cpus, e.g. memory=64G or tmp=none (repeatable; over "
     "task.yaml `limits:`, for every runtime: local, docker, and the job's inner runtime under slurm)",
     "list", []),
    ("--rexmle-agent-uids", "rexmle_agent_uids", "root harness: the host uids agents run as, START-END; each "
     "concurrent run holds one of its own (default 2000000000-2000065535, tried from a random start)", "str", None),
    ("--rexmle-agent-as-root", "rexmle_agent_as_root", "root harness, local runtime: run the agent as uid 0 (no "
     "capabilities) instead of a uid of its own; printed and recorded in run.json", "bool", False),
    ("--rexmle-unsafe-same-uid", "rexmle_unsafe_same_uid", "non-root harness under Landlock: let the agent run as "
     "your own uid, which reaches the harness's environment, venv, cache and runs folder (recorded in run.json)",
     "bool", False),
    ("--rexmle-budget", "rexmle_budget", "per-run model budget through the gateway, e.g. usd=5,tokens=2000000,"
     "requests=500 (any subset); past it the gateway answers the provider's own quota error", "str", None),
    ("--rexmle-egress-allow", "rexmle_egress_allow", "HOST or HOST:PORT the gateway's proxy may also reach "
     "(repeatable; the tasks' data hosts stay refused)", "list", []),
    ("--rexmle-allow-provider-tools", "rexmle_allow_provider_tools", "let model calls use provider-side tools "
     "(OpenAI web_search, file_search, remote mcp, code_interpreter; Anthropic web_search, web_fetch, "
     "code_execution, mcp_servers; Gemini googleSearch, urlContext, codeExecution): the provider then fetches or "
     "acts for the agent outside the egress policy; counted per run in run.json and named in the report", "bool",
     False),
    ("--rexmle-upstream-proxy", "rexmle_upstream_proxy", "http://[user:pass@]host:port: the HTTP proxy the gateway "
     "reaches the model APIs through (CONNECT for https), overriding $HTTPS_PROXY/$HTTP_PROXY; $NO_PROXY still "
     "exempts hosts (default: those variables of the harness's environment)", "str", None),
    ("--rexmle-slurm-partition", "rexmle_slurm_partition", "slurm runtime: partition for the jobs", "str", None),
    ("--rexmle-slurm-account", "rexmle_slurm_account", "slurm runtime: account charged for the jobs", "str", None),
    ("--rexmle-slurm-qos", "rexmle_slurm_qos", "slurm runtime: quality of service of the jobs", "str", None),
    ("--rexmle-slurm-option", "rexmle_slurm_options", "slurm runtime: KEY=VALUE passed to sbatch as --KEY=VALUE, "
     "e.g. constraint=a100 or mem=64G (repeatable)", "list", []),
    ("--rexmle-slurm-inner", "rexmle_slurm_inner", "slurm runtime: what isolates the agent on the node: local "
     "(bubblewrap, default) or docker", ("local", "docker"), "local"),
    ("--rexmle-slurm-detach", "rexmle_slurm_detach", "slurm runtime: leave the jobs running when the session stops "
     "(Ctrl-C); a later --rexmle-resume re-attaches to them", "bool", False),
]


#: each kind's command-line action and ini type ("names": repeatable on the command line,
#: whitespace-separated in the ini file); any other kind is one string, from ``choices`` if a tuple
KINDS: dict[Kind, tuple[str, Literal["bool", "linelist", "args", "string"]]] = {
    "bool": ("store_true", "bool"), "list": ("append", "linelist"), "names": ("append", "args")}


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("rexmle", f"ReX-MLE medical-imaging agent benchmark (precedence: {PRECEDENCE})")
    for flag, ini, help_text, kind, default in OPTIONS:
        action, ini_type = KINDS.get(kind, ("store", "string"))
        extra: dict[str, Any] = {"metavar": "KEY=VALUE"} if kind == "list" else {}
        if action == "store":
            extra["choices"] = kind if isinstance(kind, tuple) else None
            default = None if default is None else str(default)
        group.addoption(flag, action=action, default=None, dest=ini, help=help_text, **extra)
        parser.addini(ini, help_text, type=ini_type, default=default)


def _value(config: pytest.Config, ini: str, kind: Kind, default, environ=os.environ):
    """One option's value by :data:`PRECEDENCE` (task.yaml's part is applied per task: Task.limits)."""
    value = config.getoption(ini)
    if value is None:
        value = config.getini(ini)
        if value in ("", None) or value == []:
            value = environ.get(ENVIRONMENT[ini]) or None if ini in ENVIRONMENT else None
        if value is None:
            value = default
    if value is None:
        return None
    try:
        if kind == "float":
            return float(value)
        if kind == "int":
            return int(value)
    except ValueError:
        raise usage_error(f"{ini}: expected a number, got {value!r}") from None
    if isinstance(kind, tuple) and value not in kind:  # argparse checks the command line's choices, not the ini's
        raise usage_error(f"{ini}: expected one of {', '.join(kind)}, got {value!r}")
    return value


@dataclass(frozen=True)
class Settings:
    agent: str | None
    agent_options: dict[str, str]
    data: str
    data_dir: Path
    runtime: str
    time_limit: float | None
    runs_dir: Path
    report_dir: Path
    min_percentile: float
    resume: bool
    unsafe_local: bool
    seed: int | None  # None: synthetic twins keyed by the cache's secret
    gpus: tuple[str, ...] = field(default=())
    network: str = "gateway"
    prepare: bool = False
    judge: str = "rules"
    judge_options: dict[str, str] = field(default_factory=dict)
    parallel: int | None = None  # --rexmle-parallel: runs at once without GPUs (None: the executor's default)
    repeat: int = 1  # --rexmle-repeat: runs of each (task, agent), each its own item
    slurm_partition: str | None = None
    slurm_account: str | None = None
    slurm_qos: str | None = None
    slurm_options: dict[str, str] = field(default_factory=dict)
    slurm_inner: str = "local"
    slurm_detach: bool = False
    sandbox: str = "auto"                                       # local runtime: auto, bwrap or landlock
    limits: dict[str, str] = field(default_factory=dict)        # --rexmle-limit NAME=VALUE overrides
    agent_uids: str | None = None                               # root harness: START-END, one uid per run
    agent_as_root: bool = False                                 # explicit: the agent keeps uid 0
    unsafe_same_uid: bool = False                               # explicit: Landlock agent as the harness's uid
    budget: str | None = None                                   # --rexmle-budget, checked (gateway.Budget.parse)
    egress_allow: tuple[str, ...] = ()                          # --rexmle-egress-allow HOST[:PORT]
    allow_provider_tools: bool = False                          # explicit: provider-side web/code tools pass
    runtime_given: bool = True                                  # False: no --rexmle-runtime, the session chooses
    runtime_reason: str | None = None                           # why the session chose ``runtime`` (run.json)
    upstream_proxy: str | None = None                           # --rexmle-upstream-proxy URL (credentials: never public)
    #: every --agent of the session, in order (``agent`` is the first); each with its own options
    agents: tuple[str, ...] = field(default=())
    options_by_agent: dict[str, dict[str, str]] = field(default_factory=dict)

    def time_limit_for(self, task) -> float:
        """A run's wall-clock limit: ``--rexmle-time-limit``, else the task's budget."""
        return self.time_limit or task.time_limit_seconds

    def options_for(self, agent: str) -> dict[str, str]:
        """The options of one of the session's agents (``agent_options`` when it is the only one)."""
        return dict(self.options_by_agent.get(agent, self.agent_options))

    def public(self) -> dict:
        return {"agent": self.agent, "data": self.data, "runtime": self.runtime, "time_limit": self.time_limit,
                "min_percentile": self.min_percentile, "resume": self.resume, "seed": self.seed,
                "answers_reproducible": self.seed is not None,
                "gpus": list(self.gpus), "parallel": self.parallel, "repeat": self.repeat, "network": self.network, "judge": self.judge,
                "sandbox": self.sandbox, "limits": dict(self.limits), "budget": self.budget,
                "egress_allow": list(self.egress_allow),
                **({"runtime_reason": self.runtime_reason} if self.runtime_reason else {}),
                **({"agent_as_root": True} if self.agent_as_root else {}),
                **({"unsafe_same_uid": True} if self.unsafe_same_uid else {}),
                **({"allow_provider_tools": True} if self.allow_provider_tools else {})}


def agent_names(values) -> tuple[str, ...]:
    """The session's agents, in order, each once; ``--agent=a,b`` is the same as ``--agent=a --agent=b``."""
    names: list[str] = []
    for value in ([values] if isinstance(values, str) else list(values or [])):
        for name in str(value).split(","):
            if name.strip() and name.strip() not in names:
                names.append(name.strip())
    return tuple(names)


def options_by_agent(pairs: list[str], agents: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """Each agent's options: the plain ``KEY=VALUE`` pairs, then its own ``AGENT:KEY=VALUE`` pairs over them."""
    shared: dict[str, str] = {}
    own: dict[str, dict[str, str]] = {name: {} for name in agents}
    for key, value in parse_agent_options(pairs).items():
        target, sep, option = key.partition(":")
        if not sep:
            shared[key] = value
        elif target in own and option:
            own[target][option] = value
        else:
            raise usage_error(f"--agent-option {key}={value}: {target!r} is not one of the session's agents "
                              f"({', '.join(agents) or 'none'})")
    return {name: {**shared, **own[name]} for name in agents}


def parse_agent_options(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise usage_error(f"--agent-option expects KEY=VALUE, got {pair!r}")
        out[key.strip()] = value
    return out


def read_settings(config: pytest.Config) -> Settings:
    """Every option by :data:`PRECEDENCE`, under its Settings field name; the values that need
    parsing or a range check are replaced below, so that a typo is one usage error and not a failed
    run per task."""
    # start-up: keeps urllib and 192 lines out of every pytest session (the plugin)
    from .gateway.budget import Budget, BudgetError
    from .runtime.sandbox.uids import UidRange, UidRangeError

    v = {ini.removeprefix("rexmle_"): _value(config, ini, kind, default)
         for _, ini, _, kind, default in OPTIONS}
    base = config.invocation_params.dir

    def folder(value) -> Path:
        path = Path(value).expanduser()
        return path if path.is_absolute() else base / path

    if v["time_limit"] is not None and v["time_limit"] <= 0:
        raise usage_error("--rexmle-time-limit must be a positive number of seconds")
    v["min_percentile"] = parse_min_percentile(v["min_percentile"])
    if v["repeat"] < 1:
        raise usage_error(f"--rexmle-repeat must be at least 1, got {v['repeat']}")
    if v["parallel"] is not None and v["parallel"] < 1:
        raise usage_error(f"--rexmle-parallel must be at least 1, got {v['parallel']}")
    agents = agent_names(v["agent"])
    by_agent = options_by_agent(v["agent_options"], agents)
    judge_model = v.pop("judge_model")
    v.update(
        runtime_given=v["runtime"] is not None,
        runtime=v["runtime"] or "local",  # the plugin may choose another (runtime.choice)
        agent=agents[0] if agents else None,
        agent_options=by_agent[agents[0]] if agents else parse_agent_options(v["agent_options"]),
        agents=agents,
        options_by_agent=by_agent,
        data_dir=folder(v["data_dir"]) if v["data_dir"] else default_data_dir(),
        runs_dir=folder(v["runs_dir"]),
        report_dir=folder(v["report_dir"]),
        judge_options={**parse_agent_options(v["judge_options"]),
                       **({"model": judge_model} if judge_model else {})},
        gpus=tuple(parse_gpus(v["gpus"])),  # the whole list: the executor hands them to runs
        slurm_options=parse_agent_options(v["slurm_options"]),
        egress_allow=tuple(h.strip() for h in v["egress_allow"] if h.strip()),
    )
    with _usage_error("--rexmle-limit", LimitError):
        v["limits"] = parse_pairs(v["limits"])
        Limits().with_overrides(v["limits"])
    with _usage_error("--rexmle-agent-uids", UidRangeError):
        if v["agent_uids"] is not None:
            UidRange.parse(v["agent_uids"])
    if v["upstream_proxy"]:
        # start-up: keeps http, ssl, urllib out of every pytest session (the plugin)
        from .gateway.upstream import Proxy, UpstreamConfigError

        with _usage_error("--rexmle-upstream-proxy", UpstreamConfigError):
            Proxy.from_url(v["upstream_proxy"])
    with _usage_error("--rexmle-budget", BudgetError):
        v["budget"] = v["budget"].strip() if Budget.parse(v["budget"]) is not None else None
    return Settings(**v)


def parse_min_percentile(value) -> float:
    """``--rexmle-min-percentile`` as the fraction items are compared with, from a percent (``40``, ``40%``,
    ``12.5``), as the reports print percentiles. Why a bare number in (0, 1] is refused: it used to be a
    fraction (``0.4`` meant 40 %), and reading it now as 0.4 % would silently pass items the user meant to
    fail; ``0.4%`` or ``40`` says which is meant."""
    text = str(value).strip()
    number = text.removesuffix("%").strip()
    try:
        percent = float(number)
    except ValueError:
        raise usage_error(f"--rexmle-min-percentile expects a percent such as 40 or 40%, got {text!r}") from None
    if not 0.0 <= percent <= 100.0:
        raise usage_error(f"--rexmle-min-percentile must be a percent between 0 and 100, got {text!r}")
    if not text.endswith("%") and 0.0 < percent <= 1.0:
        raise usage_error(f"--rexmle-min-percentile {text} is ambiguous: it is a percent now (it used to be a "
                          f"fraction); write {percent * 100:g} for {percent * 100:g}% or {text}% for {text} percent")
    return percent / 100.0


def usage_error(message: str) -> Exception:
    """pytest's UsageError, imported only here: a run's child reads Settings and would otherwise
    import pytest (about 0.15 s of every run's start) for an error only the session raises."""
    import pytest  # start-up: a run's child reads Settings without pytest

    return pytest.UsageError(message)


@contextmanager
def _usage_error(option: str, error: type[Exception]):
    """A value checked now, while the session starts: a typo is one usage error naming the option, not a
    failed run per task."""
    try:
        yield
    except error as exc:
        raise usage_error(f"{option}: {exc}") from None
