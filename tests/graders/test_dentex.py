"""DENTEX: twin layout, self-consistency, degraded and malformed submissions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from pytest_rexmle.competitions.dentex.grade import parse_detection
from pytest_rexmle.errors import InvalidSubmission
from pytest_rexmle.graders.base import load_grader
from pytest_rexmle.metrics.detection import metric_keys
from pytest_rexmle.scoring.ranking import rank
from pytest_rexmle.task import registry

from .editing import assert_refused, copy_of, first_file, rows
from .twins import twin_fixtures

GOOD = {"bbox": [1, 2, 3, 4], "category_id_1": 0, "category_id_2": 7, "category_id_3": 3, "score": 0.5}


def task():
    return registry().get("dentex")


def grader():
    return load_grader(task())


twin, perfect = twin_fixtures("dentex")


def rewrite_all(sub: Path, fn) -> None:
    for row in rows(sub):
        path = sub / row["predictions_json"]
        path.write_text(json.dumps([fn(d) for d in json.loads(path.read_text())]))


# == twin ===============================================================================================
def test_twin_layout(twin):
    split = json.loads((twin.private / "split.json").read_text())
    assert split["n"] == 25 and len(split["test"]) == 5
    train = json.loads((twin.public / "train" / "annotations.json").read_text())
    assert [c["name"] for c in train["categories_3"]] == ["Impacted", "Caries", "Periapical Lesion", "Deep Caries"]
    assert [c["id"] for c in train["categories_1"]] == [0, 1, 2, 3]
    assert [c["id"] for c in train["categories_2"]] == list(range(8))
    assert sorted(Path(im["file_name"]).stem for im in train["images"]) == split["train"]
    for im in train["images"]:
        assert (twin.public / "train" / "images" / im["file_name"]).is_file()
        assert im["id"] == int(Path(im["file_name"]).stem.split("_")[1]) + 1   # numeric id != stem
    train_image_ids = {im["id"] for im in train["images"]}
    assert all(a["image_id"] in train_image_ids for a in train["annotations"])
    assert {a["category_id_1"] for a in train["annotations"]} <= {0, 1, 2, 3}
    test_images = json.loads((twin.public / "test" / "images.json").read_text())["images"]
    assert sorted(Path(im["file_name"]).stem for im in test_images) == split["test"]
    assert set(test_images[0]) == {"id", "file_name", "width", "height"}
    with Image.open(twin.public / "test" / "images" / test_images[0]["file_name"]) as im:
        assert im.size == (test_images[0]["width"], test_images[0]["height"])
    private = json.loads((twin.private / "test_annotations.json").read_text())
    per_image = {im["id"]: 0 for im in private["images"]}
    for a in private["annotations"]:
        per_image[a["image_id"]] += 1
    assert min(per_image.values()) >= 2                      # every test image has findings
    assert (twin.private / "answers.csv").read_text().splitlines()[0] == "image_id,coco_image_id"
    assert (twin.public / "sample_submission.csv").read_text().splitlines()[1] == \
        f"{split['test'][0]},predictions/{split['test'][0]}.json"
    assert sum(p.stat().st_size for p in twin.root.rglob("*") if p.is_file()) < 2_000_000


# == self-consistency ===================================================================================
def test_perfect_submission_scores_best(twin, perfect):
    g = grader()
    g.validate(perfect, twin.public)
    scores = g.grade(perfect, twin.private)
    assert list(scores) == metric_keys()
    # pycocotools' precision is tp / (tp + fp + eps): "1" may come out as 1 - 1e-16
    assert scores == pytest.approx({k: 1.0 for k in metric_keys()}, abs=1e-12)
    assert all(type(v) is float for v in scores.values())
    assert rank(task(), scores).percentile == 1.0


def test_jittered_boxes_score_worse(twin, perfect, tmp_path):
    sub = copy_of(perfect, tmp_path / "sub")
    rewrite_all(sub, lambda d: {**d, "bbox": [d["bbox"][0] + 1, d["bbox"][1] + 2, d["bbox"][2], d["bbox"][3]]})
    scores = grader().grade(sub, twin.private)
    # boxes of 8 × h px (h = 18..26) shifted by (1, 2): IoU = 7(h-2) / (16h - 7(h-2)) in [0.636, 0.677]
    # -> matched at IoU thresholds .50-.60 (and .65 for the tallest), never at .75:
    # AP50 = 1, AP75 = 0, AP between 3/10 and 4/10
    assert scores["ap50_mean"] == pytest.approx(1.0)
    assert scores["ap75_mean"] == 0.0
    assert 0.3 - 1e-9 <= scores["ap_mean"] <= 0.4 + 1e-9


def test_wrong_tooth_labels_only_hurt_enumeration(twin, perfect, tmp_path):
    sub = copy_of(perfect, tmp_path / "sub")
    rewrite_all(sub, lambda d: {**d, "category_id_2": (d["category_id_2"] + 1) % 8})
    scores = grader().grade(sub, twin.private)
    assert scores["ap_enumeration"] == 0.0
    assert scores["ap_quadrant"] == pytest.approx(1.0) and scores["ap_diagnosis"] == pytest.approx(1.0)
    assert scores["ap_mean"] == pytest.approx(2 / 3)


def test_baseline_validates_and_scores_zero(twin, tmp_path):
    g = grader()
    g.write_baseline(twin.public, tmp_path / "base")
    g.validate(tmp_path / "base", twin.public)
    scores = g.grade(tmp_path / "base", twin.private)
    assert scores == {k: 0.0 for k in metric_keys()}           # the empty-submission rule
    assert rank(task(), scores).percentile < 0.1


def test_partly_empty_submission_is_scored(twin, perfect, tmp_path):
    sub = copy_of(perfect, tmp_path / "sub")
    first_file(sub).write_text("[]")
    scores = grader().grade(sub, twin.private)
    assert 0.0 < scores["ar_mean"] < 1.0


# == detection parsing ==================================================================================
@pytest.mark.parametrize("change, reason", [
    ({"bbox": [1, 2, 3]}, "4 numbers"),
    ({"bbox": [1, 2, 0, 4]}, "must be > 0"),
    ({"bbox": [10, 20, 5, 15.5]}, None),                  # fractional pixels are fine
    ({"bbox": [1, 2, "3", 4]}, "must be a number"),
    ({"bbox": [1, 2, True, 4]}, "must be a number"),
    ({"category_id_1": 4}, r"0\.\.3"),                    # 1-based quadrant 4 is out of range
    ({"category_id_2": 8}, r"0\.\.7"),
    ({"category_id_3": -1}, r"0\.\.3"),
    ({"category_id_2": 1.5}, "integer id"),
    ({"category_id_2": 2.0}, None),                       # an integral number is an integer id
    ({"category_id_1": "1"}, "integer id"),
    ({"score": "high"}, "must be a number"),
    ({"score": float("inf")}, "finite"),
    ({"score": 10 ** 400}, "finite"),                     # JSON integers have no size limit
    ({"category_id_1": 10 ** 400}, r"0\.\.3"),
])
def test_parse_detection(change, reason):
    item = {**GOOD, **change}
    if reason is None:
        assert parse_detection(item, "here")["bbox"] == [float(v) for v in item["bbox"]]
    else:
        with pytest.raises(InvalidSubmission, match=reason):
            parse_detection(item, "here")


@pytest.mark.parametrize("field", ["bbox", "category_id_1", "category_id_2", "category_id_3", "score"])
def test_missing_field_is_not_defaulted(field):
    item = {k: v for k, v in GOOD.items() if k != field}
    with pytest.raises(InvalidSubmission, match=f"missing field.*{field}"):
        parse_detection(item, "here")


# == malformed submissions ==============================================================================


def _write_first(text: str):
    def make(sub):
        first_file(sub).write_text(text)
    return make


MALFORMED = {
    "unreadable file": (_write_first("{not json"), "not valid JSON"),
    "binary file": (lambda sub: first_file(sub).write_bytes(b"\xff\xfe\x00garbage"), "not valid JSON"),
    "object instead of list": (_write_first('{"bbox": [1, 2, 3, 4]}'), "JSON list"),
    "NaN score": (_write_first('[{"bbox": [1,2,3,4], "category_id_1": 0, "category_id_2": 0, '
                               '"category_id_3": 0, "score": NaN}]'), "not valid JSON"),
    "xyxy-looking box with negative width": (
        _write_first('[{"bbox": [50,20,40,30], "category_id_1": 0, "category_id_2": 0, "category_id_3": 0, '
                     '"score": 1}, {"bbox": [5,5,-1,3], "category_id_1": 0, "category_id_2": 0, '
                     '"category_id_3": 0, "score": 1}]'), "detection 1.*must be > 0"),
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_malformed_submission_is_invalid(kind, twin, perfect, tmp_path):
    make, reason = MALFORMED[kind]
    assert_refused(grader(), perfect, twin, make, reason, tmp_path)
