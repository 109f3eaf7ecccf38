"""Stage scores S1–S5 on a real grader and synthetic twin (isles22), and the optional usage file.

``LOG`` is an observed trace here (one model call the gateway recorded); the forged-log attack, the same
lines in the agent's own stdout, is in ``test_observed.py``."""

from __future__ import annotations

import copy
import json

import pytest

from pytest_rexmle.capability import get_judge
from pytest_rexmle.capability.stages import WEIGHTS, StageScores, read_usage, stage_scores
from pytest_rexmle.data.synthetic import ensure_synthetic
from pytest_rexmle.graders.base import load_grader
from pytest_rexmle.task import registry

from .helpers import make_run

LOG = """Plan: read description.md, then train a small 3D model.
$ ls $REXMLE_DATA_DIR/train
pip install monai
Epoch 1 train_loss=0.71
"""


@pytest.fixture(scope="module")
def isles(tmp_path_factory):
    task = registry().get("isles22")
    data = ensure_synthetic(task, tmp_path_factory.mktemp("cache"))
    return task, data.public


def _scores(doc: dict) -> dict:
    return {r["id"]: r["score"] for r in doc["stages"]}


def test_weights_sum_to_one():
    assert sum(WEIGHTS.values()) == pytest.approx(1.0)
    assert WEIGHTS == {"S1": 0.25, "S2": 0.15, "S3": 0.35, "S4": 0.15, "S5": 0.10}


def test_valid_submission_and_rules_stages(tmp_path, isles):
    task, public = isles
    run = make_run(tmp_path / "run", LOG)
    load_grader(task).write_baseline(public, run / "submission")
    doc = stage_scores(run, task, public, get_judge("rules"))
    StageScores.check(doc)
    # S1: reads the task, explores the data, states a plan -> 3/3; S2: environment (pip install), training
    # (Epoch 1) but no data-loading evidence -> 2/3; S3: nothing -> 0; S4 = S5 = 1 (validates)
    assert _scores(doc) == pytest.approx({"S1": 1.0, "S2": 2 / 3, "S3": 0.0, "S4": 1.0, "S5": 1.0})
    assert doc["total"] == pytest.approx(0.25 * 1 + 0.15 * 2 / 3 + 0.35 * 0 + 0.15 + 0.10)
    assert json.loads((run / "stages.json").read_text()) == doc
    s1 = doc["stages"][0]["evidence"]
    assert "logs/model-calls.jsonl#1:1:" in s1 and "logs/model-calls.jsonl#1:2:" in s1


def test_missing_case_and_unreadable_file(tmp_path, isles):
    task, public = isles
    grader = load_grader(task)
    run = make_run(tmp_path / "run", LOG)
    grader.write_baseline(public, run / "submission")
    csv_path = run / "submission" / "submission.csv"
    rows = csv_path.read_text().splitlines()
    n = len(rows) - 1
    csv_path.write_text("\n".join(rows[:-1]) + "\n")  # drop one test case
    doc = stage_scores(run, task, public, get_judge("rules"))
    assert _scores(doc)["S4"] == pytest.approx((n - 1) / n) and _scores(doc)["S5"] == 0.0
    assert doc["stages"][4]["evidence"].startswith("invalid: submission.csv: missing test case")
    grader.write_baseline(public, run / "submission")
    first = rows[1].split(",")[1]
    (run / "submission" / first).write_bytes(b"not an image")  # one unreadable prediction
    doc = stage_scores(run, task, public, get_judge("rules"))
    assert _scores(doc)["S4"] == pytest.approx((n - 1) / n) and _scores(doc)["S5"] == 0.0


def test_no_submission_and_no_logs(tmp_path, isles):
    task, public = isles
    run = make_run(tmp_path / "run", "")
    doc = stage_scores(run, task, public, get_judge("rules"))
    StageScores.check(doc)
    assert set(_scores(doc).values()) == {0.0} and doc["total"] == 0.0
    assert doc["stages"][3]["evidence"] == "no submission.csv"


def test_without_public_data_falls_back_on_result_json(tmp_path):
    run = make_run(tmp_path / "run", "", files={"submission/submission.csv": "case_id,x\n",
                                                "result.json": json.dumps({"status": "ok", "agent": "toy"})})
    doc = stage_scores(run, "isles22", None, get_judge("rules"))
    assert _scores(doc)["S4"] == 1.0 and _scores(doc)["S5"] == 1.0


def test_usage_file(tmp_path):
    run = make_run(tmp_path / "run", "", files={
        "workspace/rexmle-usage.json": json.dumps({"turns": 9, "input_tokens": 1000, "output_tokens": 250,
                                                   "cost_usd": 0.42, "model": "gpt-x", "extra": 1})})
    usage = read_usage(run)
    assert usage == {"turns": 9, "input_tokens": 1000, "output_tokens": 250, "total_tokens": 1250, "cost_usd": 0.42,
                     "model": "gpt-x", "wall_seconds": 42.5, "source": "workspace/rexmle-usage.json"}
    # the adapter's logs/usage.json wins; bad values are dropped, not trusted
    (run / "logs" / "usage.json").write_text(json.dumps({"turns": -1, "total_tokens": 77, "cost_usd": "free"}))
    usage = read_usage(run)
    assert (usage["turns"], usage["total_tokens"], usage["cost_usd"], usage["source"]) == (None, 77, None,
                                                                                          "logs/usage.json")
    (run / "logs" / "usage.json").unlink()
    (run / "workspace" / "rexmle-usage.json").unlink()
    assert read_usage(run)["source"] is None and read_usage(run)["wall_seconds"] == 42.5


def test_validate_stages_rejects(tmp_path):
    doc = stage_scores(make_run(tmp_path / "run", LOG), "isles22", None, get_judge("rules"))
    for mutate in (lambda d: d["stages"][0].update(score=1.5), lambda d: d["stages"][0].update(weight=0.3),
                   lambda d: d.update(total=0.99), lambda d: d["stages"].pop(),
                   lambda d: d["usage"].update(turns=-3), lambda d: d.update(schema="x")):
        bad = copy.deepcopy(doc)
        mutate(bad)
        with pytest.raises(ValueError):
            StageScores.check(bad)
