"""A measuring plugin for ``bench_perf.py`` (``-p perf_probe``, loaded by controller and xdist workers).

It times each benchmark item's grading where it happens (in the worker, with whatever imports that
worker still had to make) by wrapping the grading function the fixtures call, and writes one JSON
line per item to ``$REXMLE_PERF_PROBE``: the item's wall time, the agent's own time (the runtime's
duration from ``run.json``) and the grading time. The harness overhead of an item is the rest.
"""

from __future__ import annotations

import json
import os
import time

import pytest

_grading: dict[str, float] = {}


def pytest_configure(config: pytest.Config) -> None:
    from pytest_rexmle import fixtures

    original = fixtures.grade_submission

    def timed_grade(task, submission_dir, answers_dir):
        start = time.perf_counter()
        try:
            return original(task, submission_dir, answers_dir)
        finally:
            _grading[task.id] = time.perf_counter() - start

    fixtures.grade_submission = timed_grade


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start = time.perf_counter()
    yield
    seconds = time.perf_counter() - start
    callspec = getattr(item, "callspec", None)
    task_id = callspec.params.get("rexmle_task_id") if callspec else None
    out = os.environ.get("REXMLE_PERF_PROBE")
    if not task_id or not out:
        return
    agent = 0.0
    result = dict(item.user_properties).get("rexmle_result")
    if result:
        run_dir = json.loads(result).get("run_dir")
        try:
            agent = float(json.loads(open(os.path.join(run_dir, "run.json")).read()).get("duration") or 0.0)
        except (OSError, ValueError, TypeError):
            agent = 0.0
    with open(out, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"task": task_id, "item": seconds, "agent": agent,
                             "grade": _grading.get(task_id, 0.0)}) + "\n")
