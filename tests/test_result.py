"""The per-task result record (its fields: docs/reference/documents.md) and its atomic on-disk form."""

from __future__ import annotations

import json
import math

import pytest

from pytest_rexmle.jsonfile import write_json_atomic
from pytest_rexmle.scoring.grading import GradeOutcome, grade_submission, result_from_grade
from pytest_rexmle.scoring.ranking import rank
from pytest_rexmle.scoring.result import STATUSES, TaskResult
from pytest_rexmle.task import registry

SECTION9_KEYS = {"task_id", "reference_id", "status", "reason", "metrics", "ranking_metrics", "positions",
                 "mean_position", "n_humans", "percentile"}


def worked_example() -> TaskResult:
    task = registry().get("topcow-cta-det")
    metrics = {"boundary_iou": 0.6110, "iou": 0.6707}
    return TaskResult.graded(task, metrics, rank(task, metrics))


def test_graded_record_matches_section9_example():
    doc = worked_example().to_json()
    assert SECTION9_KEYS <= set(doc)
    assert {k: doc[k] for k in SECTION9_KEYS} == {
        "task_id": "topcow-cta-det", "reference_id": "topcow-track1-task2", "status": "ok", "reason": None,
        "metrics": {"boundary_iou": 0.611, "iou": 0.6707}, "ranking_metrics": ["boundary_iou", "iou"],
        "positions": {"boundary_iou": 5, "iou": 7}, "mean_position": 6.0, "n_humans": 8, "percentile": 0.375,
    }
    assert doc["medal"] is None and doc["above_median"] is False  # mean 6.0 > median threshold 5.0


def test_infinities_serialise_as_strings_and_round_trip(tmp_path):
    task = registry().get("usenhance")
    metrics = {"lncc": 0.9, "ssim": 0.75, "psnr": math.inf, "extra_low": -math.inf}
    rec = TaskResult.graded(task, metrics, rank(task, metrics))
    doc = rec.to_json()
    assert doc["metrics"]["psnr"] == "inf"
    assert doc["metrics"]["extra_low"] == "-inf"
    assert doc["metrics"]["lncc"] == 0.9
    json.dumps(doc, allow_nan=False)  # strict JSON: no Infinity tokens

    path = tmp_path / "r" / "result.json"
    rec.write(path)
    text = path.read_text(encoding="utf-8")
    assert '"psnr": "inf"' in text and '"extra_low": "-inf"' in text
    assert "Infinity" not in text
    back = TaskResult.read(path)
    assert back == rec
    assert back.metrics["psnr"] == math.inf and back.metrics["extra_low"] == -math.inf
    # psnr +inf -> position 1 (docs/reading-the-report.md: position on one metric)
    assert back.positions["psnr"] == 1


def test_json_round_trip_is_lossless_for_full_precision():
    task = registry().get("ldct-iqa")
    metrics = {"score": 2.6248000000000005, "plcc": 1 / 3, "srocc": 0.1, "krocc": 2 ** -40}
    rec = TaskResult.graded(task, metrics, rank(task, metrics))
    back = TaskResult.from_json(json.loads(json.dumps(rec.to_json())))
    assert back == rec
    assert back.metrics["score"] == 2.6248000000000005  # not rounded
    assert back.percentile == 1 - 4 / 6  # 2.6248000000000005 is below 4 humans -> position 5


def test_from_json_ignores_unknown_fields():
    doc = worked_example().to_json()
    doc["added_in_a_later_version"] = 1
    assert TaskResult.from_json(doc) == worked_example()


def test_atomic_write_leaves_no_temp_files(tmp_path):
    path = tmp_path / "out" / "result.json"
    worked_example().write(path)
    worked_example().write(path)  # overwrite
    assert sorted(p.name for p in path.parent.iterdir()) == ["result.json"]


def test_failed_atomic_write_keeps_old_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "result.json"
    write_json_atomic(path, {"a": 1})
    with pytest.raises(ValueError):
        write_json_atomic(path, {"a": float("nan")})  # allow_nan=False refuses it mid-write
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


@pytest.mark.parametrize("status", ["invalid", "error", "missing", "timeout"])
def test_fail_records(tmp_path, status):
    task = registry().get("isles22")
    rec = TaskResult.failed(task, status, f"because {status}", 10)
    assert rec.status == status and rec.reason == f"because {status}"
    assert rec.percentile == 0.0
    assert rec.metrics is None and rec.positions is None and rec.mean_position is None
    assert rec.ranking_metrics == ["dice", "lesion_f1", "lesion_count_diff", "abs_volume_diff"]
    assert rec.n_humans == 10 and rec.reference_id == "isles22"
    rec.write(tmp_path / "result.json")
    doc = json.loads((tmp_path / "result.json").read_text())
    assert doc["percentile"] == 0.0 and doc["metrics"] is None and doc["positions"] is None
    assert TaskResult.read(tmp_path / "result.json") == rec


def test_statuses():
    assert set(STATUSES) == {"ok", "invalid", "error", "missing", "timeout"}


def test_missing_submission_is_a_fail(tmp_path):
    task = registry().get("ldct-iqa")
    (tmp_path / "sub").mkdir()
    outcome = grade_submission(task, tmp_path / "sub", tmp_path / "answers")
    assert outcome.status == "missing"
    rec = result_from_grade(task, outcome)
    assert rec.percentile == 0.0 and rec.metrics is None and rec.n_humans == 6


def test_result_from_grade_ok_ranks():
    task = registry().get("ldct-iqa")
    # 2.6248 -> position 5 of 7; 1 - 4/6
    rec = result_from_grade(task, GradeOutcome("ok", {"score": 2.6248, "plcc": 0.9, "srocc": 0.9, "krocc": 0.8248}))
    assert rec.status == "ok" and rec.positions == {"score": 5}
    assert rec.percentile == pytest.approx(1 / 3)
    assert rec.metrics["plcc"] == 0.9


def test_bad_result_json_names_the_file_and_the_field(tmp_path):
    from pytest_rexmle.documents import DocumentError

    path = tmp_path / "result.json"
    doc = {"task_id": "isles22", "reference_id": "isles22", "status": "passed", "reason": None,
           "metrics": None, "ranking_metrics": [], "positions": None, "mean_position": None, "n_humans": 3,
           "percentile": 0.0}
    path.write_text(json.dumps(doc))
    with pytest.raises(DocumentError) as info:
        TaskResult.read(path)
    assert str(info.value).startswith(f"{path}: field 'status' must be 'ok', 'invalid'")
    assert str(info.value).endswith("got 'passed'")
    doc["status"] = "ok"
    del doc["n_humans"]
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError) as info:  # callers catching ValueError keep working
        TaskResult.read(path)
    assert str(info.value) == f"{path}: missing required field 'n_humans'"


def _earlier(doc):
    """A document as a harness before the rename wrote it: ``challenge_id``, ``challenges`` and schema 1."""
    if isinstance(doc, dict):
        return {{"task_id": "challenge_id", "tasks": "challenges", "n_tasks": "n_challenges"}.get(k, k):
                v.replace("/2", "/1") if k == "schema" else _earlier(v) for k, v in doc.items()}
    return [_earlier(v) for v in doc] if isinstance(doc, list) else doc


def test_a_result_json_of_before_the_rename_reads_with_the_same_numbers(tmp_path):
    rec = worked_example()
    old = _earlier(rec.to_json())
    assert "challenge_id" in old and "task_id" not in old
    (tmp_path / "result.json").write_text(json.dumps(old))
    back = TaskResult.read(tmp_path / "result.json")
    assert back == rec
    assert (back.task_id, back.percentile, back.mean_position, back.positions) == (
        "topcow-cta-det", 0.375, 6.0, {"boundary_iou": 5, "iou": 7})


def test_a_report_of_before_the_rename_merges_to_the_same_numbers(tmp_path):
    from pytest_rexmle.report.merge import load_inputs, markdown, merge_reports

    from .report.helpers import session

    doc = session("aide", "r1", seed=1, ids=["isles22", "ldct-iqa", "topcow-cta-det"])
    old = _earlier(doc)
    assert old["schema"] == "rexmle-report/1" and "challenge_id" in old["challenges"][0] and "tasks" not in old
    for name, body in (("new", doc), ("old", old)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "rexmle-report.json").write_text(json.dumps(body))
    (new,), _ = load_inputs([tmp_path / "new"], [], [])
    (back,), _ = load_inputs([tmp_path / "old"], [], [])
    assert back["schema"] == "rexmle-report/2"
    assert [(r["task_id"], r["percentile"]) for r in back["tasks"]] == [
        (r["task_id"], r["percentile"]) for r in new["tasks"]]
    assert back["score"] == new["score"] == doc["score"]
    merged_new, merged_old = merge_reports([new]), merge_reports([back])
    assert merged_old["agents"][0]["mean"] == merged_new["agents"][0]["mean"]
    assert markdown(merged_old).split("\n", 1)[1] == markdown(merged_new).split("\n", 1)[1]
