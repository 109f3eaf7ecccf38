"""``rexmle export harbor``: a session's runs as a Harbor job folder, which Harbor's viewer and tools load.

Why: Harbor (the agent-evaluation framework whose trajectory format, ATIF, the runs already use) reads a
*job* as a folder: ``<job>/config.json`` (``JobConfig``), ``<job>/result.json`` (``JobResult``) and one
folder per trial holding ``config.json`` (``TrialConfig``), ``result.json`` (``TrialResult``) and
``agent/trajectory.json`` (ATIF). The ATIF export alone gave the layout with ReX-MLE's own result.json,
which no Harbor model loads. Written here against Harbor 0.25's models (``harbor.models``; checked by
``tests/report/test_harbor_export.py`` wherever Harbor installs, Python 3.12 and later).

How a ReX-MLE result maps: the verifier's reward is the percentile (``rewards = {"reward": p}``: ReX-MLE's
score is the mean of the percentiles, as Harbor's is the mean reward), a timed-out run is Harbor's
``AgentTimeoutError`` (graded, reward 0, as ReX-MLE counts it), a harness error is an exception without
reward (Harbor does not grade it; ReX-MLE counts it 0 and says so apart); the gateway's metered tokens and
cost are the agent's usage. ReX-MLE's whole record (status, metrics, positions, reason) is kept beside
Harbor's fields under ``rexmle`` (Harbor's models ignore fields they do not know).
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..agents.usage import run_record
from ..documents import upgrade
from ..jsonfile import write_json_atomic, write_text_atomic
from .atif import read_result, write_trajectories

#: the namespace of the ids derived here: one run always exports to the same trial and job ids
NAMESPACE = uuid.UUID("5f0c2b8e-7d1a-4f4e-9b8a-2a7e3c1d9e60")
#: Harbor's ``source`` (its "dataset" in the job's stats)
SOURCE = "rexmle"
TIMEOUT_ERROR = "AgentTimeoutError"
HARNESS_ERROR = "RexmleHarnessError"


def _read_result(run_dir: Path) -> dict[str, Any] | None:
    doc = read_result(run_dir)
    return upgrade(doc) if isinstance(doc, dict) else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _rewards(result: dict[str, Any] | None) -> dict[str, float] | None:
    """``{"reward": percentile}``, or None where nothing was graded (no result, a harness error)."""
    if result is None or result.get("status") == "error":
        return None
    percentile = _number(result.get("percentile"))
    return None if percentile is None else {"reward": percentile}


def _exception(result: dict[str, Any] | None, meta: dict[str, Any]) -> dict[str, Any] | None:
    """Harbor's ``exception_info`` for a run that timed out or that the harness broke on."""
    record = result or {}
    status = record.get("status")
    when = meta.get("finished") or meta.get("started")
    if status == "timeout":
        return {"exception_type": TIMEOUT_ERROR, "exception_message": str(record.get("reason") or "timed out"),
                "exception_traceback": "", "occurred_at": when}
    if result is None or status == "error":
        message = str((result or {}).get("reason") or "the run has no graded result")
        return {"exception_type": HARNESS_ERROR, "exception_message": message,
                "exception_traceback": str((result or {}).get("traceback") or ""), "occurred_at": when}
    return None


def _usage(meta: dict[str, Any]) -> dict[str, Any]:
    """The gateway's meter as Harbor's ``AgentContext`` (tokens and cost the harness observed)."""
    usage: dict[str, Any] = meta["usage"] if isinstance(meta.get("usage"), dict) else {}
    tokens = {key: usage.get(source) for key, source in (("n_input_tokens", "input_tokens"),
                                                        ("n_cache_tokens", "cached_tokens"),
                                                        ("n_output_tokens", "output_tokens"))}
    context: dict[str, Any] = {k: v for k, v in tokens.items() if isinstance(v, int) and not isinstance(v, bool)}
    if _number(usage.get("cost_usd")) is not None:
        context["cost_usd"] = _number(usage.get("cost_usd"))
    context["metadata"] = {"source": "rexmle gateway meter" if usage.get("source") == "gateway" else "none"}
    return context


def _checksum(task: str, meta: dict[str, Any]) -> str:
    """What identifies the graded task: its id, version and data kind (Harbor hashes its task folder)."""
    key: dict[str, Any] = meta["key"] if isinstance(meta.get("key"), dict) else {}
    return hashlib.sha256(f"{task}\0{key.get('task_version', '')}\0{key.get('data', '')}".encode()).hexdigest()


def trial_documents(run_dir: Path, trial_dir: Path, job_id: uuid.UUID) -> tuple[dict[str, Any], dict[str, Any]]:
    """(TrialConfig, TrialResult) of one run, as Harbor's JSON."""
    meta = run_record(run_dir) or {}
    result = _read_result(run_dir)
    task = str(meta.get("task") or (result or {}).get("task_id") or "task")
    agent = str(meta.get("agent") or (result or {}).get("agent") or "unknown")
    options: dict[str, Any] = meta["agent_options"] if isinstance(meta.get("agent_options"), dict) else {}
    model = options.get("model") if isinstance(options.get("model"), str) else None
    task_path = f"rexmle/{task}"
    config = {"task": {"path": task_path, "source": SOURCE}, "trial_name": trial_dir.name,
              "trials_dir": str(trial_dir.parent), "agent": {"name": agent, "model_name": model},
              "job_id": str(job_id)}
    timing = {"started_at": meta.get("started"), "finished_at": meta.get("finished")}
    doc: dict[str, Any] = {
        "id": str(uuid.uuid5(NAMESPACE, f"{job_id}/{run_dir.name}")),
        "task_name": task, "trial_name": trial_dir.name, "trial_uri": trial_dir.resolve().as_uri(),
        "task_id": {"path": task_path}, "source": SOURCE,
        "task_checksum": _checksum(task, meta),
        "config": config,
        "agent_info": {"name": agent, "version": str(options.get("version") or "unknown"),
                       "model_info": {"name": model} if model else None},
        "agent_result": _usage(meta),
        "verifier_result": {"rewards": _rewards(result)} if _rewards(result) is not None else None,
        "exception_info": _exception(result, meta),
        "started_at": meta.get("started"), "finished_at": meta.get("finished"), "agent_execution": timing,
        "rexmle": {"run_dir": str(run_dir), "result": result},
    }
    return config, doc


def _stats(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """``JobStats`` as Harbor's ``JobStats.increment`` would have counted these trials."""
    evals: dict[str, dict[str, Any]] = {}
    rewards_of: dict[str, list[float]] = {}
    totals: dict[str, Any] = {"n_input_tokens": None, "n_cache_tokens": None, "n_output_tokens": None,
                              "cost_usd": None}
    errored = 0
    for trial in trials:
        info = trial["agent_info"]
        model = (info.get("model_info") or {}).get("name")
        key = "__".join(p for p in (info["name"], model, trial["source"]) if p)
        own = evals.setdefault(key, {"n_trials": 0, "n_errors": 0, "metrics": [], "reward_stats": {},
                                     "exception_stats": {}})
        rewards = (trial.get("verifier_result") or {}).get("rewards")
        # Harbor's mean counts a trial without reward as 0, as ReX-MLE's score counts a harness error
        rewards_of.setdefault(key, []).append(rewards["reward"] if rewards is not None else 0.0)
        if rewards is not None:
            own["n_trials"] += 1
            for name, value in rewards.items():
                own["reward_stats"].setdefault(name, {}).setdefault(value, []).append(trial["trial_name"])
        if trial.get("exception_info"):
            own["exception_stats"].setdefault(trial["exception_info"]["exception_type"], []).append(trial["trial_name"])
            own["n_errors"] += 1
            errored += 1
        for name, value in trial["agent_result"].items():
            if name in totals and value is not None:
                totals[name] = (totals[name] or 0) + value
    for key, values in rewards_of.items():  # Harbor's default metric: the mean reward
        evals[key]["metrics"] = [{"mean": sum(values) / len(values)}]
    return {"n_completed_trials": len(trials), "n_errored_trials": errored, "evals": evals, **totals}


def export_job(runs: list[Path], out: Path, job_name: str) -> Path:
    """Write ``<out>/<job_name>/`` (job config and result, one trial folder per run with its ATIF
    trajectory) and return it. ``out`` is the folder Harbor's viewer is pointed at (``harbor view OUT``)."""
    job = Path(out) / job_name
    job_id = uuid.uuid5(NAMESPACE, job_name)
    trials, starts, ends = [], [], []
    for run_dir, _, trial_dir in write_trajectories(runs, job):  # a downloaded run.json chooses its task: checked
        config, result = trial_documents(run_dir, trial_dir, job_id)
        write_json_atomic(trial_dir / "config.json", config)
        write_json_atomic(trial_dir / "result.json", result)
        if result["verifier_result"] is not None:  # Harbor's verifier leaves the reward in this file too
            write_text_atomic(trial_dir / "verifier" / "reward.txt", f"{result['verifier_result']['rewards']['reward']}\n")
        trials.append(result)
        starts += [result["started_at"]] if result["started_at"] else []
        ends += [result["finished_at"]] if result["finished_at"] else []
    job.mkdir(parents=True, exist_ok=True)
    if not starts:
        starts = [datetime.now(UTC).isoformat()]
    write_json_atomic(job / "config.json", {"job_name": job_name, "jobs_dir": str(Path(out))})
    write_json_atomic(job / "result.json", {
        "id": str(job_id), "started_at": min(starts) if starts else None, "finished_at": max(ends) if ends else None,
        "n_total_trials": len(trials), "stats": _stats(trials)})
    return job
