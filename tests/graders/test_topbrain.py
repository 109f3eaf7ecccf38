"""TopBrain: per-case metrics by hand, twins, self-consistency, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

from pytest_rexmle.competitions.topbrain.grade import TRACKS, aggregate_brain, score_brain_case
from pytest_rexmle.data.synthetic import generate
from pytest_rexmle.errors import InvalidSubmission
from pytest_rexmle.graders.base import load_grader
from pytest_rexmle.metrics.topology import FP, TN, TP, label_adjacency, neighbor_error
from pytest_rexmle.scoring.ranking import rank
from pytest_rexmle.task import registry

SPACING = (0.5, 0.5, 2.0)
BEST = {"dice": 1.0, "cldice": 1.0, "b0_error": 0.0, "hd95": 0.0, "neighbor_error": 0.0, "f1_side_road": 1.0}


def grader(task_id: str = "topbrain-cta-seg"):
    return load_grader(registry().get(task_id))


# == per-case metrics by hand ===========================================================================
def test_case_metrics_hand_example():
    g = grader()
    truth = np.zeros((3, 3, 12), np.uint8)
    pred = np.zeros_like(truth)
    truth[1, 1, 0:4] = 1          # BA rod
    truth[1, 1, 6:9] = 23         # R-VA, missed by the prediction
    pred[1, 1, 0:4] = 1           # BA exact
    pred[1, 1, 4] = 33            # R-OA glued to the BA: absent from G, and an invalid neighbour
    case = score_brain_case(pred, truth, SPACING, g.valid, g.track.side_road)
    # L = {1, 23, 33}: Dice 1, 0, 0 -> 1/3; clDice (a rod is its own skeleton) 1, 0, 0 -> 1/3;
    # B0 error 0, |0-1|, |1-0| -> 2/3; HD95 0, 290, 290 -> 580/3.
    assert case.means["dice"] == pytest.approx(1 / 3)
    assert case.means["cldice"] == pytest.approx(1 / 3)
    assert case.means["b0_error"] == pytest.approx(2 / 3)
    assert case.means["hd95"] == pytest.approx(580 / 3)
    # predicted labels {1, 33}: 1 touches {33}, not in V(1) -> 1; 33 touches {1}, V(33) = {} -> 1. Mean 1.
    assert case.means["neighbor_error"] == 1.0
    # side-road detection: R-OA (33) is a false positive, every other side-road label a true negative
    assert case.detections[33] == FP
    assert {d for label, d in case.detections.items() if label != 33} == {TN}


def test_empty_case_and_aggregation():
    g = grader()
    empty = np.zeros((2, 2, 2), np.uint8)
    case = score_brain_case(empty, empty, SPACING, g.valid, g.track.side_road)
    assert case.means == {"dice": 0.0, "b0_error": 0.0, "hd95": 0.0, "cldice": 0.0, "neighbor_error": 0.0}
    hit = score_brain_case(empty + (np.arange(8).reshape(2, 2, 2) == 0) * 8, empty + (np.arange(8).reshape(2, 2, 2) == 0) * 8,
                           SPACING, g.valid, g.track.side_road)
    assert hit.detections[8] == TP
    out = aggregate_brain([case, hit], g.track.side_road)
    # 18 CTA side-road labels: label 8 has F1 1 (one TP), the other 17 have no TP/FP/FN -> 0. Mean 1/18.
    assert out["f1_side_road"] == pytest.approx(1 / 18)
    assert out["dice"] == pytest.approx(0.5)


def test_tracks_match_the_spec_and_tables():
    cta, mra = grader("topbrain-cta-seg"), grader("topbrain-mra-seg")
    assert cta.allowed_labels == frozenset(range(41)) and mra.allowed_labels == frozenset(range(43))
    assert len(TRACKS["cta"].side_road) == 18 and len(TRACKS["mra"].side_road) == 17
    assert set(cta.valid) == set(range(1, 41)) and set(mra.valid) == set(range(1, 43))
    for g in (cta, mra):                  # the tables are symmetric and never list background
        assert all(a in g.valid[b] for a, vs in g.valid.items() for b in vs)
        assert all(0 not in vs for vs in g.valid.values())


# == twins, self-consistency ===========================================================================
@pytest.fixture(scope="module", params=["topbrain-cta-seg", "topbrain-mra-seg"])
def twin(request, tmp_path_factory):
    task = registry().get(request.param)
    root = tmp_path_factory.mktemp(request.param)
    data = generate(task, root / "twin")
    load_grader(task).write_perfect(data.private, root / "perfect")
    return task, data, root / "perfect"


def copy_of(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def predictions(sub: Path) -> list[Path]:
    lines = (sub / "submission.csv").read_text().splitlines()[1:]
    return [sub / line.split(",")[1] for line in lines]


def edit_all(sub: Path, change) -> None:
    for path in predictions(sub):
        img = sitk.ReadImage(str(path))
        out = sitk.GetImageFromArray(change(sitk.GetArrayFromImage(img)).astype(np.uint8))
        out.CopyInformation(img)
        sitk.WriteImage(out, str(path))


def test_twin_truth_is_valid_and_complete(twin):
    task, data, _ = twin
    g = load_grader(task)
    split = json.loads((data.private / "split.json").read_text())
    assert (len(split["train"]), len(split["test"])) == (20, 5)
    seen: set[int] = set()
    for case_id in split["test"]:
        arr = sitk.GetArrayFromImage(sitk.ReadImage(str(data.private / "test" / "labels" / f"{case_id}.nii.gz")))
        assert neighbor_error(label_adjacency(arr), g.valid) == 0.0
        seen |= set(np.unique(arr).tolist())
    assert seen == set(g.allowed_labels)          # every label, side roads included, is in the test set


def test_perfect_submission_scores_best(twin):
    task, data, perfect = twin
    metrics = load_grader(task).grade(perfect, data.private)
    assert metrics == BEST
    assert all(type(v) is float for v in metrics.values())
    assert rank(task, metrics).percentile == 1.0


def test_degraded_submissions_score_worse(twin, tmp_path):
    task, data, perfect = twin
    g = load_grader(task)
    side = np.asarray(g.track.side_road)

    sub = copy_of(perfect, tmp_path / "dropped")
    edit_all(sub, lambda a: np.where(np.isin(a, side[:6]), 0, a))          # miss six side-road vessels
    m = g.grade(sub, data.private)
    assert m["f1_side_road"] < 1.0 and m["dice"] < 1.0 and m["cldice"] < 1.0 and m["hd95"] > 0.0
    assert m["b0_error"] > 0.0 and m["neighbor_error"] == 0.0               # dropping never adds contacts

    sub = copy_of(perfect, tmp_path / "merged")
    edit_all(sub, lambda a: np.where(a == 5, 7, a))                         # R-M1 labelled as L-M1
    m = g.grade(sub, data.private)
    assert m["neighbor_error"] > 0.0 and m["dice"] < 1.0

    sub = copy_of(perfect, tmp_path / "shifted")
    edit_all(sub, lambda a: np.roll(a, 1, axis=2))
    m = g.grade(sub, data.private)
    assert m["dice"] < 1.0 and m["hd95"] > 0.0


def test_baseline_validates_and_scores_worse(twin, tmp_path):
    task, data, _ = twin
    g = load_grader(task)
    g.write_baseline(data.public, tmp_path / "baseline")
    g.validate(tmp_path / "baseline", data.public)
    m = g.grade(tmp_path / "baseline", data.private)
    assert m["dice"] == 0.0 and m["cldice"] == 0.0 and m["hd95"] == 290.0 and m["f1_side_road"] == 0.0
    assert m["neighbor_error"] == 0.0          # nothing predicted, nothing touches
    assert rank(task, m).percentile < 0.5


# == malformed submissions =============================================================================
def rewrite_first(sub: Path, array: np.ndarray | None = None, spacing=None) -> None:
    path = predictions(sub)[0]
    ref = sitk.ReadImage(str(path))
    img = sitk.GetImageFromArray(sitk.GetArrayFromImage(ref) if array is None else array)
    img.SetSpacing(ref.GetSpacing())
    img.SetOrigin(ref.GetOrigin())
    if spacing is not None:
        img.SetSpacing(spacing)
    sitk.WriteImage(img, str(path))


def with_value(value: int):
    def make(sub: Path) -> None:
        arr = sitk.GetArrayFromImage(sitk.ReadImage(str(predictions(sub)[0])))
        arr[0, 0, 0] = value
        rewrite_first(sub, arr)
    return make


@pytest.mark.parametrize("kind, reason", [
    ("too-high label", "not allowed"),
    ("wrong shape", "size"),
    ("unreadable", "cannot read"),
    ("missing case", "missing test case"),
])
def test_malformed_submission_is_invalid(twin, tmp_path, kind, reason):
    task, data, perfect = twin
    g = load_grader(task)
    sub = copy_of(perfect, tmp_path / "sub")
    first = predictions(sub)[0]
    if kind == "too-high label":
        with_value(g.track.n_labels + 1)(sub)
    elif kind == "wrong shape":
        rewrite_first(sub, sitk.GetArrayFromImage(sitk.ReadImage(str(first)))[:, :-1])
    elif kind == "unreadable":
        first.write_bytes(b"\x1f\x8b garbage")
    else:
        csv = sub / "submission.csv"
        csv.write_text("\n".join(csv.read_text().splitlines()[:-1]) + "\n")
    with pytest.raises(InvalidSubmission, match=reason):
        g.grade(sub, data.private)
    with pytest.raises(InvalidSubmission, match=reason):
        g.validate(sub, data.public)


def test_mra_only_labels_are_invalid_for_cta(tmp_path):
    task = registry().get("topbrain-cta-seg")
    data = generate(task, tmp_path / "twin")
    g = load_grader(task)
    g.write_perfect(data.private, tmp_path / "perfect")
    with_value(42)(tmp_path / "perfect")          # 42 = L-MMA exists only in the MRA label set
    with pytest.raises(InvalidSubmission, match="not allowed"):
        g.validate(tmp_path / "perfect", data.public)
