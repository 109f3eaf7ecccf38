"""The judge interface shared by the offline ``rules`` judge and the ``llm`` judge.

A judge turns one run folder into the per-run capability document (``capability.json``, schema in
:mod:`pytest_rexmle.capability.schema`) and, for :mod:`pytest_rexmle.capability.stages`, grades the judged workflow
stages S1–S3. Both judges read the same observed sources (:mod:`pytest_rexmle.capability.trace` says which
and why), so their documents are comparable run by run and a forged log earns nothing.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from ..jsonfile import write_json_atomic
from ..task import registry
from .clock import Clock, JudgeTimedOut
from .schema import NO_TRACE_FLAG, run_document, untraced
from .trace import Source, collect_sources, has_trace

CAPABILITY_JSON = "capability.json"
#: the judged stages (S4/S5 are measured deterministically from the submission)
JUDGED_STAGES: dict[str, tuple[str, str]] = {
    "S1": ("plan", "Understands the task and plans: reads the task description and instructions, explores the "
                   "data (files, shapes, spacing, labels, sample submission) and states an approach."),
    "S2": ("setup", "Sets up the environment and pipeline: installs or imports the needed libraries, checks the "
                    "hardware, writes data loading, and starts training or fitting a model."),
    "S3": ("validate", "Validates the model before submitting: holds out data or cross-validates, computes a "
                       "validation metric, and uses it to compare or select models or checkpoints."),
}


def resolve_task(task: Any):
    """The Task for a Task or any id/alias; None for an unknown name (judging never blocks on the registry)."""
    if hasattr(task, "id"):
        return task

    try:
        return registry().get(str(task))
    except Exception:
        return None


def task_id_of(task: Any) -> str:
    """Accept a Task or any id/alias; unknown names pass through."""
    found = resolve_task(task)
    return str(task) if found is None else str(found.id)


def run_meta(run_dir: Path) -> dict:
    """``run.json`` merged over ``result.json`` (agent name, seed if recorded); empty when absent."""
    meta: dict = {}
    for name in ("result.json", "run.json"):
        try:
            data = json.loads((Path(run_dir) / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            meta.update(data)
    return meta


def description_lines(run_dir: Path, task: Any) -> set[str]:
    """Normalised long lines of the task texts the agent was given: echoes of them are not evidence."""
    texts = []
    for path in (Path(run_dir) / "instructions.md", getattr(task, "description_path", None)):
        if path is None:
            continue
        try:
            texts.append(Path(path).read_text(encoding="utf-8"))
        except OSError:
            pass
    return {norm for text in texts for line in text.splitlines() if len(norm := normalise_line(line)) >= 20}


def normalise_line(line: str) -> str:
    return " ".join(line.split()).lower().lstrip("#>*- ")


class Judge(ABC):
    name: ClassVar[str]
    #: seconds one run's judging may take, evidence collection included (the ``time_limit`` option);
    #: past it the run's documents say "judge timed out" (:mod:`pytest_rexmle.capability.clock`)
    time_limit: float

    def clock(self) -> Clock:
        """A fresh clock for one run (one for its capability document, one for its stages)."""
        return Clock(self.time_limit)

    @abstractmethod
    def describe(self) -> dict:
        """The judge record stored with every result: name, model, params, prompt_version (no secrets)."""

    @abstractmethod
    def judge_sections(self, sources: list[Source], task_id: str, ignore: set[str],
                       clock: Clock | None = None) -> tuple[list[dict], list[str], dict | None]:
        """(sections with 13 normalised results each, flags, judge usage or None); checks ``clock``."""

    @abstractmethod
    def judge_stages(self, sources: list[Source], task_id: str, ignore: set[str],
                     clock: Clock | None = None) -> dict[str, dict]:
        """``{"S1": {"score": float in [0, 1], "evidence": str}, "S2": ..., "S3": ...}``; checks ``clock``."""

    def judge_run(self, run_dir: Path, task: Any) -> dict:
        """Judge one run, write ``<run_dir>/capability.json`` atomically and return the document.

        Everything from the first file read to the last section judged runs on one clock; a judge that
        runs out scores nothing and says so in ``flags`` (the document is written all the same)."""
        run_dir = Path(run_dir)
        task_id = task_id_of(task)
        meta = run_meta(run_dir)
        clock = self.clock()
        try:
            sources = collect_sources(run_dir, clock=clock)
            if has_trace(sources):
                sections, flags, usage = self.judge_sections(sources, task_id, description_lines(run_dir, task),
                                                             clock)
            else:  # the agent's own logs are claims: without an observed trace nothing counts
                sections, flags, usage = untraced(task_id), [NO_TRACE_FLAG], None
        except JudgeTimedOut as exc:
            sections, flags, usage = untraced(task_id, str(exc)), [str(exc)], self.spent_so_far()
        doc = run_document(agent=meta.get("agent"), task_id=task_id, seed=_seed(meta),
                           run_dir=str(run_dir), judge=self.describe(), sections=sections, flags=flags,
                           judge_usage=usage)
        write_json_atomic(run_dir / CAPABILITY_JSON, doc)
        return doc

    def spent_so_far(self) -> dict | None:
        """What the judge spent on a run it did not finish (the ``llm`` judge's tokens), or None."""
        return None


def _seed(meta: dict) -> int | None:
    for holder in (meta, meta.get("key") or {}, meta.get("settings") or {}):
        value = holder.get("seed") if isinstance(holder, dict) else None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None
