"""DENTEX COCO evaluation on hand-computable detections."""

from __future__ import annotations

import contextlib
import io

import pytest
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from pytest_rexmle.metrics.detection import coco_bbox_stats, hierarchical_scores, metric_keys

IMAGES = [{"id": 7, "file_name": "train_3.png", "width": 100, "height": 50}]
CATS = [{"id": i, "name": str(i + 1)} for i in range(4)]
GT = [{"image_id": 7, "bbox": [10, 10, 10, 10], "category_id": 0}]


def det(bbox, category=0, score=0.9, image_id=7):
    return {"image_id": image_id, "bbox": bbox, "category_id": category, "score": score}


def test_exact_box_of_category_zero_scores_one():
    # category id 0 (the reference dropped it by assuming 1-based ids) is evaluated like any other
    # (pycocotools divides by tp + fp + machine epsilon, so "1" is 1 - 1e-16)
    assert coco_bbox_stats(IMAGES, GT, CATS, [det([10, 10, 10, 10])]) == pytest.approx(
        {"ap": 1.0, "ap50": 1.0, "ap75": 1.0, "ar": 1.0}, abs=1e-12)


def test_iou_072_matches_five_of_ten_thresholds():
    # [10,10,10,7.2] inside the 10×10 truth: IoU = 72/100 = 0.72 -> matched at .50,.55,.60,.65,.70 only.
    # Per threshold AP is 1 (matched, single detection) or 0 -> AP = 5/10; AP50 = 1; AP75 = 0; AR = 5/10.
    out = coco_bbox_stats(IMAGES, GT, CATS, [det([10, 10, 10, 7.2])])
    assert out == pytest.approx({"ap": 0.5, "ap50": 1.0, "ap75": 0.0, "ar": 0.5})


def test_false_positive_ranked_first_halves_ap50():
    # two detections: wrong place (score .9) then the right box (.8). Precision at recall 1 is 1/2, and the
    # interpolated precision is 1/2 at every recall point -> AP50 = 0.5 (101-point interpolation).
    out = coco_bbox_stats(IMAGES, GT, CATS, [det([60, 30, 10, 10], score=0.9), det([10, 10, 10, 10], score=0.8)])
    assert out["ap50"] == pytest.approx(0.5)
    assert out["ar"] == pytest.approx(1.0)


def test_empty_detections_and_missing_ground_truth_give_zero():
    assert coco_bbox_stats(IMAGES, GT, CATS, []) == {"ap": 0.0, "ap50": 0.0, "ap75": 0.0, "ar": 0.0}
    # no ground truth at all: pycocotools reports -1, mapped to 0.0
    assert coco_bbox_stats(IMAGES, [], CATS, [det([10, 10, 10, 10])]) == {"ap": 0.0, "ap50": 0.0, "ap75": 0.0,
                                                                           "ar": 0.0}


def test_annotation_id_zero_would_break_raw_pycocotools():
    """Why annotation ids are renumbered: with id 0, pycocotools records the match as 0 (= unmatched)."""
    dataset = {"images": IMAGES, "categories": CATS,
               "annotations": [{"id": 0, "image_id": 7, "bbox": [10, 10, 10, 10], "area": 100, "iscrowd": 0,
                                "category_id": 0}]}
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = dataset
        gt.createIndex()
        ev = COCOeval(gt, gt.loadRes([det([10, 10, 10, 10])]), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    assert ev.stats[1] < 1.0                       # raw: the true positive is lost
    assert coco_bbox_stats(IMAGES, [{"id": 0, **GT[0]}], CATS, [det([10, 10, 10, 10])])["ap50"] == pytest.approx(1.0)


def test_no_output_on_stdout(capsys):
    coco_bbox_stats(IMAGES, GT, CATS, [det([10, 10, 10, 10])])
    assert capsys.readouterr().out == ""


def test_hierarchical_levels_are_separate_evaluations():
    ann = {"image_id": 7, "bbox": [10, 10, 10, 10], "category_id_1": 0, "category_id_2": 3, "category_id_3": 1}
    cats = {1: CATS, 2: [{"id": i, "name": str(i + 1)} for i in range(8)], 3: CATS}
    # right box, right quadrant and diagnosis, wrong tooth (5 instead of 3)
    dets = [{"image_id": 7, "bbox": [10, 10, 10, 10], "category_id_1": 0, "category_id_2": 5, "category_id_3": 1,
             "score": 0.7}]
    out = hierarchical_scores(IMAGES, [ann], cats, dets)
    assert list(out) == metric_keys() and len(out) == 16
    assert out["ap_quadrant"] == pytest.approx(1.0) and out["ap_diagnosis"] == pytest.approx(1.0)
    # enumeration: tooth 3 has truth and no detection -> AP 0; tooth 5 has no truth -> -1, left out of the mean
    assert out["ap_enumeration"] == 0.0 and out["ar_enumeration"] == 0.0
    assert out["ap_mean"] == pytest.approx(2 / 3)
    assert out["ar_mean"] == pytest.approx(2 / 3)


def test_metric_keys_order():
    assert metric_keys()[:4] == ["ap_mean", "ap50_mean", "ap75_mean", "ar_mean"]
    assert metric_keys()[-1] == "ar_diagnosis"
