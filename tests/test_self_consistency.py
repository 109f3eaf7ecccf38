"""Every task, one contract: answers-as-submission are perfect, the baseline is valid and worse.

The per-family grader tests go deeper; this file guarantees that no task can be registered whose
grader, twin and leaderboard disagree with each other.
"""

from __future__ import annotations

import pytest

from pytest_rexmle.data.synthetic import ensure_synthetic
from pytest_rexmle.grading import grade_submission, result_from_grade
from pytest_rexmle.graders.base import load_grader
from pytest_rexmle.task import registry

TASKS = [t.id for t in registry()]


@pytest.fixture
def twin(request, shared_cache):
    task = registry().get(request.param)
    if not task.implemented:
        pytest.fail(f"{task.id} has no grader/generator: every challenge must be gradable")
    return task, ensure_synthetic(task, shared_cache)


@pytest.mark.parametrize("twin", TASKS, indirect=True)
def test_perfect_submission_tops_every_ranking_metric(twin, tmp_path):
    task, data = twin
    load_grader(task).write_perfect(data.private, tmp_path / "submission")
    result = result_from_grade(task, grade_submission(task, tmp_path / "submission", data.private))
    assert result.status == "ok", result.reason
    assert result.positions == {m.key: 1 for m in task.ranking_metrics}
    assert result.percentile == 1.0


@pytest.mark.parametrize("twin", TASKS, indirect=True)
def test_baseline_is_valid_and_not_perfect(twin, tmp_path):
    task, data = twin
    grader = load_grader(task)
    grader.write_baseline(data.public, tmp_path / "submission")
    grader.validate(tmp_path / "submission", data.public)   # public-only check passes
    result = result_from_grade(task, grade_submission(task, tmp_path / "submission", data.private))
    assert result.status == "ok", result.reason
    assert result.percentile < 1.0
