"""Hostile submissions through the real graders: every one is an INVALID with a reason, never an ERROR."""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import pytest

from pytest_rexmle.graders.base import load_grader
from pytest_rexmle.scoring.grading import grade_submission
from pytest_rexmle.scoring.result import INVALID, OK
from pytest_rexmle.task import registry

from .helpers import deep_folder, remove_tree

JSON_TASKS = {  # task -> the prediction column holding JSON files
    "dentex": "predictions_json",
    "puma-t1-nuclei-det": "predicted_nuclei_path",
    "topcow-cta-det": "predicted_bbox_path",
    "topcow-cta-cls": "predicted_edges_path",
}


@pytest.fixture(scope="module")
def perfect(tmp_path_factory, shared_cache):
    """A perfect submission per task (the private answers converted), and the twin."""
    from pytest_rexmle.data.synthetic import ensure_synthetic

    out = {}
    for task_id in (*JSON_TASKS, "isles22"):
        task = registry().get(task_id)
        twin = ensure_synthetic(task, shared_cache)
        folder = tmp_path_factory.mktemp(task_id.replace("-", "_"))
        load_grader(task).write_perfect(twin.private, folder)
        out[task_id] = (task, twin, folder)
    return out


def _copy(perfect, task_id: str, dest: Path) -> tuple[object, object, Path, Path]:
    task, twin, folder = perfect[task_id]
    sub = dest / "sub"
    shutil.copytree(folder, sub)
    with open(sub / "submission.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    column = JSON_TASKS.get(task_id, "predicted_mask_path")
    return task, twin, sub, sub / rows[0][column]


def _grade(task, twin, sub):
    return grade_submission(task, sub, twin.private)


@pytest.mark.parametrize("task_id", sorted(JSON_TASKS))
def test_perfect_json_submissions_still_grade(perfect, task_id, tmp_path):
    task, twin, sub, _ = _copy(perfect, task_id, tmp_path)
    assert _grade(task, twin, sub).status == OK


@pytest.mark.parametrize("task_id", sorted(JSON_TASKS))
def test_200k_nested_brackets_are_invalid(perfect, task_id, tmp_path):
    task, twin, sub, first = _copy(perfect, task_id, tmp_path)
    first.write_bytes(b"[" * 200_000 + b"]" * 200_000)
    outcome = _grade(task, twin, sub)
    assert outcome.status == INVALID, outcome
    assert "nested 200000 levels deep" in outcome.reason


HUGE = "9" * 5000


def _with_huge_number(task_id: str, text: str) -> str:
    """A prediction that is valid but for one 5,000-digit integer where a number belongs."""
    if task_id == "dentex":
        return (f'[{{"bbox": [{HUGE}, 1, 2, 3], "category_id_1": 0, "category_id_2": 0, "category_id_3": 0, '
                '"score": 1}]')
    if task_id.startswith("puma"):
        return f'{{"polygons": [{{"name": "nuclei_tumor", "path_points": [[{HUGE}, 1], [2, 3], [4, 5]]}}]}}'
    if task_id == "topcow-cta-det":
        return f'{{"size": [{HUGE}, 1, 1], "location": [0, 0, 0]}}'
    data = json.loads(text)
    first = next(iter(data["anterior"]))
    data["anterior"][first] = "HUGE"
    return json.dumps(data).replace('"HUGE"', HUGE)


@pytest.mark.parametrize("task_id", sorted(JSON_TASKS))
def test_5000_digit_integers_are_invalid(perfect, task_id, tmp_path):
    task, twin, sub, first = _copy(perfect, task_id, tmp_path)
    first.write_text(_with_huge_number(task_id, first.read_text()))
    outcome = _grade(task, twin, sub)
    assert outcome.status == INVALID, outcome
    assert len(outcome.reason) < 2100 and HUGE not in outcome.reason


@pytest.mark.parametrize("task_id", sorted(JSON_TASKS))
def test_a_fifo_or_dev_zero_link_as_prediction_is_invalid(perfect, task_id, tmp_path):
    task, twin, sub, first = _copy(perfect, task_id, tmp_path)
    first.unlink()
    os.mkfifo(first)
    outcome = _grade(task, twin, sub)
    assert outcome.status == INVALID and "FIFO" in outcome.reason, outcome


def test_a_1500_level_folder_in_the_submission_is_invalid(perfect, tmp_path):
    task, twin, sub, _ = _copy(perfect, "isles22", tmp_path)
    deep_folder(sub / "extra", 1500)
    try:
        outcome = _grade(task, twin, sub)
        assert outcome.status == INVALID, outcome
        assert "nested more than 32 folders deep" in outcome.reason
    finally:
        remove_tree(sub / "extra")


def test_a_dev_zero_submission_csv_is_not_read(perfect, tmp_path):
    task, twin, sub, _ = _copy(perfect, "isles22", tmp_path)
    (sub / "submission.csv").unlink()
    (sub / "submission.csv").symlink_to("/dev/zero")
    outcome = _grade(task, twin, sub)
    assert outcome.status == INVALID and "symbolic link" in outcome.reason, outcome


def test_control_characters_in_a_reason_are_stripped(perfect, tmp_path):
    """A file name carrying terminal escapes reaches the reason only as plain text."""
    task, twin, sub, first = _copy(perfect, "isles22", tmp_path)
    evil = "\x1b[2J\x1b]0;pwned\x07x.nii.gz"
    first.rename(first.parent / evil)
    with open(sub / "submission.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    rows[1][1] = f"predictions/{evil}"
    with open(sub / "submission.csv", "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    (first.parent / evil).write_bytes(b"not an image")
    outcome = _grade(task, twin, sub)
    assert outcome.status == INVALID
    assert "\x1b" not in outcome.reason and "\x07" not in outcome.reason
