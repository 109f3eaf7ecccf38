"""A run's trajectory in ATIF (Agent Trajectory Interchange Format) v1.7: ``trajectory.atif.json``.

Why ATIF: it is the trajectory format the agent-evaluation field shares (Harbor writes and reads it), so
a ReX-MLE run can be read, compared and replayed with other tools. The trajectory is built from what
the harness *observed* — the calls the session's gateway recorded — never from the agent's own claims:
each answered model call is one ``agent`` step (its answer, reasoning, tool calls and the metered tokens
and cost), the messages a call added to the conversation (the task, the user's turns) are ``user``
steps, the tool results the next call carried back are the observation of the step that asked for them,
and a call the gateway refused is a ``system`` step marked refused. The step metrics add up to the
gateway's meter, which ``final_metrics`` repeats.

Where the agent keeps a log of its own (a CLI's session file, a scaffold's trajectory or journal), that log
becomes an embedded ``subagent_trajectories`` entry marked ``extra.reported_by = "agent"``
(:mod:`.agent_logs`): the agent's claims beside the observed steps, never in the root's steps or totals.

The models below restate ATIF v1.7's rules that a consumer checks (sequential step ids from 1,
agent-only fields on agent steps, observation results naming a tool call of their step, no unknown
fields), so a written document is checked before it is written and the tests validate against them.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..agent_output import RefusedFile, plain_name, read_json, show
from ..agents.usage import run_record
from ..jsonfile import write_json_atomic
from .agent_logs import agent_trajectories
from .calls import PREVIEW_CHARS, CallSummary, read_calls

SCHEMA_VERSION = "ATIF-v1.7"
ATIF_JSON = "trajectory.atif.json"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AtifToolCall(_Strict):
    tool_call_id: str
    function_name: str
    arguments: Any = None
    extra: dict[str, Any] | None = None


class AtifObservationResult(_Strict):
    source_call_id: str | None = None
    content: str | list[dict[str, Any]] | None = None
    subagent_trajectory_ref: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None


class AtifObservation(_Strict):
    results: list[AtifObservationResult]


class AtifMetrics(_Strict):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    extra: dict[str, Any] | None = None


class AtifStep(_Strict):
    step_id: int = Field(ge=1)
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    message: str | list[dict[str, Any]]
    reasoning_content: str | None = None
    tool_calls: list[AtifToolCall] | None = None
    observation: AtifObservation | None = None
    metrics: AtifMetrics | None = None
    is_copied_context: bool | None = None
    llm_call_count: int | None = Field(default=None, ge=0)
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _agent_fields_on_agent_steps(self) -> AtifStep:
        if self.source != "agent":
            for name in ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics"):
                if getattr(self, name) is not None:
                    raise ValueError(f"step {self.step_id}: {name} only belongs on an agent step")
        if self.observation is not None:
            ids = {call.tool_call_id for call in self.tool_calls or ()}
            for result in self.observation.results:
                if result.source_call_id is not None and result.source_call_id not in ids:
                    raise ValueError(f"step {self.step_id}: observation names tool call {result.source_call_id!r}, "
                                     f"which the step did not make")
        return self


class AtifAgent(_Strict):
    name: str
    version: str
    model_name: str | None = None
    tool_definitions: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None


class AtifFinalMetrics(_Strict):
    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = Field(default=None, ge=0)
    extra: dict[str, Any] | None = None


class AtifTrajectory(_Strict):
    schema_version: Literal["ATIF-v1.7"]
    session_id: str | None = None
    trajectory_id: str | None = None
    agent: AtifAgent
    steps: list[AtifStep] = Field(min_length=1)
    notes: str | None = None
    final_metrics: AtifFinalMetrics | None = None
    continued_trajectory_ref: str | None = None
    extra: dict[str, Any] | None = None
    subagent_trajectories: list[AtifTrajectory] | None = None

    @model_validator(mode="after")
    def _sequential_steps(self) -> AtifTrajectory:
        for index, step in enumerate(self.steps, 1):
            if step.step_id != index:
                raise ValueError(f"steps[{index - 1}].step_id is {step.step_id}, expected {index}")
        ids = [sub.trajectory_id for sub in self.subagent_trajectories or ()]
        if any(i is None for i in ids) or len(set(ids)) != len(ids):
            raise ValueError("embedded subagent trajectories need unique trajectory_ids")
        return self


@functools.cache
def _version() -> str:
    """Once per process: importlib.metadata scans the installed distributions (3 ms of every run's export)."""
    from importlib.metadata import PackageNotFoundError, version  # start-up: importlib only where this runs

    try:
        return version("pytest-rexmle")
    except PackageNotFoundError:
        return "unknown"


def build_trajectory(run_dir: Path, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ATIF document of a finished run (``meta``: its run.json; read when not given)."""
    run_dir = Path(run_dir)
    if meta is None:
        meta = run_record(run_dir) or {}
    calls = read_calls(run_dir)
    steps: list[dict[str, Any]] = []
    by_tool_call: dict[str, dict[str, Any]] = {}
    models: list[str] = []
    system, digest = "", ""
    for call in calls:
        if call.system and (call.system_digest or call.system) != digest:  # every system prompt, not the first only
            steps.append(_system_step(call, system))
            system, digest = call.system, call.system_digest or call.system
        _add_call(steps, by_tool_call, call)
        if call.answered and call.model and call.model not in models:
            models.append(call.model)
    if not steps:
        steps.append({"source": "system", "message": "the agent made no model call through the gateway",
                      "timestamp": meta.get("started")})
    for number, step in enumerate(steps, 1):
        step["step_id"] = number
    totals = [c.tokens() for c in calls if c.answered]
    costs = [c.cost_usd for c in calls if c.answered]
    known_cost = None if any(c is None for c in costs) else round(sum(c for c in costs if c is not None), 8)
    agent_name = str(meta.get("agent") or "unknown")
    reported, log_notes = agent_trajectories(run_dir, agent_name)
    notes = ("Steps and final_metrics built by the ReX-MLE harness from the model calls its gateway observed "
             "(logs/model-calls.jsonl), not from the agent's own logs; refused calls are system steps marked "
             "refused.")
    if reported:
        notes += (f" The {len(reported)} subagent_trajectories are the agent's own log(s) (extra.reported_by: "
                  "\"agent\"): the agent's claims, not observed by the harness, and not counted in final_metrics.")
    skipped = [n for n in log_notes if n["status"] != "embedded"]
    if skipped:
        notes += " Agent logs skipped: " + "; ".join(f"{n['source_file']} ({n['reason']})" for n in skipped[:10])
        notes += "."
    doc = {
        "schema_version": SCHEMA_VERSION,
        "session_id": run_dir.name,
        "trajectory_id": f"rexmle-{meta.get('task', 'task')}-{run_dir.name}",
        "agent": {"name": agent_name, "version": str((meta.get("agent_options") or {}).get("version") or "unknown"),
                  **({"model_name": models[0]} if models else {}),
                  "extra": {"harness": "pytest-rexmle", "harness_version": _version(), "models": models,
                            "agent_options": meta.get("agent_options") or {}}},
        "steps": steps,
        "notes": notes,
        "final_metrics": {"total_prompt_tokens": sum(t[0] for t in totals),
                          "total_completion_tokens": sum(t[1] for t in totals),
                          "total_cached_tokens": sum(t[2] for t in totals),
                          "total_cost_usd": known_cost, "total_steps": len(steps),
                          "extra": {"model_calls": len(calls), "refused_calls": sum(c.refused for c in calls)}},
        "extra": {"task": meta.get("task"), "runtime": meta.get("runtime"), "data": meta.get("data"),
                  "source": "gateway", **({"agent_logs": log_notes} if log_notes else {})},
        **({"subagent_trajectories": reported} if reported else {}),
    }
    return AtifTrajectory.model_validate(doc).model_dump(mode="json", exclude_none=True)


def _system_step(call: CallSummary, previous: str) -> dict[str, Any]:
    """The system prompt ``call`` was sent with, as a system step: the first one as it is, a later change
    (an agent that rewrites its instructions, compacts its context, or calls a helper model with other
    instructions) marked with the call that brought it. A prompt that only grew (a system message appended
    to a chat) gives the added part, so a long prompt is not repeated at each addition."""
    step: dict[str, Any] = {"source": "system", "message": call.system, "timestamp": call.ts,
                            "extra": {"call": call.number, "system_prompt_sha256": call.system_digest}}
    if previous:
        # a cut preview ends with the cut's note, so it never "grows"; two prompts alike up to the cut
        # have equal previews and differ by their digests only
        grew = call.system != previous and call.system.startswith(previous)
        if grew:
            step["message"] = call.system[len(previous):].lstrip("\n")
        step["extra"]["system_prompt"] = "extended" if grew else "changed"
        if call.system == previous:
            step["extra"]["note"] = f"differs from the previous system prompt after its first {PREVIEW_CHARS} characters"
    return step


def _add_call(steps: list[dict], by_tool_call: dict[str, dict], call: CallSummary) -> None:
    for call_id, text, name in call.tool_results:
        # by the call's id; a Gemini answer names its calls by the tool only (its client makes up the id)
        owner = by_tool_call.get(call_id) or by_tool_call.get(f"name:{name}")
        if owner is not None:
            source = call_id if call_id in {t["tool_call_id"] for t in owner["tool_calls"]} else next(
                t["tool_call_id"] for t in owner["tool_calls"] if t["function_name"] == name)
            owner.setdefault("observation", {"results": []})["results"].append(
                {"source_call_id": source, "content": text})
        elif text:
            steps.append({"source": "user", "message": text, "timestamp": call.ts,
                          "extra": {"tool_result_for": call_id}})
    if call.prompt:
        steps.append({"source": "user", "message": call.prompt, "timestamp": call.ts})
    if call.refused or not call.answered:
        steps.append({"source": "system", "timestamp": call.ts,
                      "message": f"the gateway {'refused' if call.refused else 'could not complete'} a model call "
                                 f"({call.route or '?'}): {call.error or call.status}",
                      "extra": {"refused": call.refused, "status": call.status, "call": call.number}})
        return
    prompt, completion, cached = call.tokens()
    step: dict[str, Any] = {
        "source": "agent", "timestamp": call.ts, "model_name": call.model, "message": call.answer,
        "llm_call_count": 1,
        "metrics": {"prompt_tokens": prompt, "completion_tokens": completion, "cached_tokens": cached,
                    "cost_usd": call.cost_usd},
        "extra": {"call": call.number, "route": call.route, "latency_s": call.duration_s, "stream": call.stream,
                  "observed_by": "gateway"},
    }
    if call.reasoning:
        step["reasoning_content"] = call.reasoning
    if call.tool_calls:
        step["tool_calls"] = []
        for number, tool in enumerate(call.tool_calls):
            tool_id = tool.id or f"call-{call.number}-{number}"
            step["tool_calls"].append({"tool_call_id": tool_id, "function_name": tool.name,
                                       "arguments": tool.arguments if isinstance(tool.arguments, (dict, list))
                                       else {"input": tool.arguments}})
            by_tool_call[tool_id] = step
            if not tool.id:
                by_tool_call[f"name:{tool.name}"] = step
    steps.append(step)


def write_trajectory(run_dir: Path, meta: dict[str, Any] | None = None) -> Path:
    """Write ``<run>/trajectory.atif.json`` and return its path."""
    path = Path(run_dir) / ATIF_JSON
    write_json_atomic(path, build_trajectory(run_dir, meta))
    return path


def trial_name(run_dir: Path, meta: dict[str, Any]) -> str:
    """``<task>__<run>``, Harbor's trial folder name; :class:`RefusedFile` when the task (run.json's, which a
    downloaded folder chooses) or the run's name is not one plain name, so nothing is written outside ``--out``."""
    task, run = plain_name(meta.get("task")), plain_name(Path(run_dir).name)
    if task is None or run is None:
        raise RefusedFile(f"{run_dir}: the task {show(meta.get('task'))} or the run folder's name is not a plain "
                          f"name (letters, digits, '.', '_', '+', '-'); nothing exported")
    return f"{task}__{run}"


def _trial_folder(out: Path, name: str) -> Path:
    trial = Path(out) / name
    for path in (trial, trial / "agent", trial / "agent" / "trajectory.json", trial / "result.json"):
        if path.is_symlink():
            raise RefusedFile(f"{path} is a symbolic link; export writes no file through a link")
    return trial


def write_trajectories(runs: list[Path], out: Path) -> list[tuple[Path, dict[str, Any], Path]]:
    """(run folder, its run.json, its trial folder ``<out>/<task>__<run>``) per run, each trial's agent
    trajectory written; every trial name is checked before anything is written."""
    metas = [run_record(run_dir) or {} for run_dir in runs]
    found = [(run_dir, meta, _trial_folder(out, trial_name(run_dir, meta)))
             for run_dir, meta in zip(runs, metas, strict=True)]
    for run_dir, meta, trial in found:
        (trial / "agent").mkdir(parents=True, exist_ok=True)
        write_json_atomic(trial / "agent" / "trajectory.json", build_trajectory(run_dir, meta))
    return found


def read_result(run_dir: Path) -> Any:
    """The run's result.json (bounded read, never through a link: the run folder is the agent's too)."""
    path = run_dir / "result.json"
    if not path.is_file() or path.is_symlink():
        return None
    try:
        return read_json(path, 4 * 1024 * 1024)
    except (OSError, ValueError):
        return None


def export_session(runs: list[Path], out: Path) -> list[Path]:
    """``rexmle export atif``: one folder per run in the layout Harbor's tools read
    (``<out>/<task>__<run>/agent/trajectory.json``, with the run's result beside it)."""
    written = []
    for run_dir, _, trial in write_trajectories(runs, out):
        result = read_result(run_dir)
        if result is not None:
            write_json_atomic(trial / "result.json", result)
        written.append(trial)
    return written


def load(path: Path) -> AtifTrajectory:
    """Read and validate an ATIF document (the tests' check, and a reader's)."""
    return AtifTrajectory.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))
