"""TopCoW: segmentation and edge-classification graders, twins, bad input.

Box detection (task 2) is covered by its self-consistency checks at the end.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk
from scipy import ndimage

from pytest_rexmle.competitions.topcow.cow_volumes import aggregate_cow, score_cow_case
from pytest_rexmle.competitions.topcow.grade import read_edges
from pytest_rexmle.competitions.topcow.synthetic import TEST_SCHEDULE, Variant, cow_edges, cow_phantom
from pytest_rexmle.data.synthetic import generate
from pytest_rexmle.data.synthetic.common import write_answers, write_csv
from pytest_rexmle.errors import InvalidSubmission
from pytest_rexmle.graders.base import load_grader
from pytest_rexmle.metrics.topology import FN, FP, TN
from pytest_rexmle.scoring.ranking import rank
from pytest_rexmle.task import registry

from .editing import assert_refused, copy_of
from .twins import twin_fixtures

SPACING = (0.5, 0.5, 2.0)      # (x, y, z); the arrays' last axis (x) has 0.5 mm
BEST = {"dice": 1.0, "cldice": 1.0, "b0_error": 0.0, "hd95": 0.0, "f1_grp2": 1.0, "anterior_graph_acc": 1.0,
        "posterior_graph_acc": 1.0, "anterior_topology": 1.0, "posterior_topology": 1.0}


def grader(task_id: str = "topcow-cta-seg"):
    return load_grader(registry().get(task_id))


# == per-case metrics by hand ===========================================================================
def test_case_metrics_hand_example():
    truth = np.zeros((3, 3, 12), np.uint8)
    pred = np.zeros_like(truth)
    truth[1, 1, 0:4] = 1          # BA: a 4-voxel rod along x
    truth[1, 1, 10] = 10          # Acom, missed by the prediction
    pred[1, 1, 0:2] = 1           # BA: the first 2 voxels
    pred[0, 0, 8] = 8             # R-Pcom, absent from the ground truth
    case = score_cow_case(pred, truth, SPACING)
    # L = {1, 8, 10}. Dice: 2·2/(2+4) = 2/3, 0, 0 -> mean 2/9.
    assert case.means["dice"] == pytest.approx(2 / 9)
    # B0 error: |1-1| = 0, |1-0| = 1, |0-1| = 1 -> mean 2/3.
    assert case.means["b0_error"] == pytest.approx(2 / 3)
    # HD95 of BA (every rod voxel is contour): G->P distances [0, 0, 0.5, 1.0] -> rank 0.95·3 = 2.85 ->
    # 0.5 + 0.85·0.5 = 0.925; P->G [0, 0] -> 0; HD95 = 0.925. Labels 8 and 10: 90. Mean (0.925 + 180) / 3.
    assert case.means["hd95"] == pytest.approx((0.925 + 180) / 3)
    # merged clDice: S_P = 3 voxels (BA 0..1 and the Pcom voxel), 2 of them in G -> tprec 2/3;
    # S_G = 5 voxels (the rod and the Acom voxel), 2 of them in P -> tsens 2/5;
    # clDice = 2·(2/3)(2/5) / (2/3 + 2/5) = (8/15) / (16/15) = 0.5.
    assert case.means["cldice"] == pytest.approx(0.5)
    assert case.detections == {8: FP, 9: TN, 10: FN, 15: TN, 11: TN, 12: TN, 2: TN, 3: TN}
    # edges: G has Acom only; P has R-Pcom only
    assert case.truth_variants == ("Var_Ant_0_1_0_0", "Var_Pos_0_0_0_0")
    assert case.pred_variants == ("Var_Ant_0_0_0_0", "Var_Pos_0_0_0_1")
    assert case.matched == (False, False)       # anterior: Acom FN; posterior: R-Pcom FP


def test_empty_union_gives_zeros():
    empty = np.zeros((2, 2, 2), np.uint8)
    case = score_cow_case(empty, empty, SPACING)
    assert case.means == {"dice": 0.0, "b0_error": 0.0, "hd95": 0.0, "cldice": 0.0}
    assert case.matched == (True, True)


def test_aggregates_pool_detection_counts_and_balance_variants():
    full = cow_phantom(Variant())
    no_acom = cow_phantom(Variant(acom=False))
    # case 1: perfect; case 2: ground truth has Acom, the prediction misses it;
    # case 3: ground truth without Acom, predicted perfectly.
    cases = [score_cow_case(full, full, SPACING), score_cow_case(no_acom, full, SPACING),
             score_cow_case(no_acom, no_acom, SPACING)]
    out = aggregate_cow(cases)
    # Acom (10): TP, FN, TN -> F1 = 2/(2+0+1) = 2/3; Pcoms 8, 9: TP in all -> 1; 3rd-A2: TN only -> 0.
    assert out["f1_grp2"] == pytest.approx((2 / 3 + 1 + 1 + 0) / 4)
    # anterior variants: truth [1101, 1101, 1001], pred [1101, 1001, 1001] -> class 1101: 1/2, 1001: 1/1.
    assert out["anterior_graph_acc"] == pytest.approx(0.75)
    assert out["anterior_topology"] == pytest.approx(0.75)
    assert out["posterior_graph_acc"] == out["posterior_topology"] == 1.0


def test_left_right_flip_fails_topology_but_not_the_graph():
    truth = cow_phantom(Variant())
    mirrored = np.ascontiguousarray(truth[:, :, ::-1])      # every L label now lies on the right
    case = score_cow_case(mirrored, truth, SPACING)
    assert case.pred_variants == case.truth_variants         # adjacency is mirror invariant
    assert case.matched == (False, False)


def test_twin_variants_match_the_schedule():
    # Variant() has all edges, TEST_SCHEDULE[1] adds a 3rd-A2 and drops both Pcoms.
    assert cow_edges(cow_phantom(Variant())) == ([1, 1, 0, 1], [1, 1, 1, 1])
    assert cow_edges(cow_phantom(TEST_SCHEDULE[1])) == ([1, 1, 1, 1], [0, 1, 1, 0])
    assert cow_edges(cow_phantom(TEST_SCHEDULE[2])) == ([1, 0, 0, 1], [1, 0, 1, 0])


# == twin, self-consistency ============================================================================
twin, perfect = twin_fixtures("topcow-cta-seg")


def rows(submission: Path) -> list[tuple[str, Path]]:
    lines = (submission / "submission.csv").read_text().splitlines()[1:]
    return [(line.split(",")[0], submission / line.split(",")[1]) for line in lines]


def test_twin_layout(twin):
    public, private = twin.public, twin.private
    split = json.loads((private / "split.json").read_text())
    assert (split["n"], len(split["train"]), len(split["test"])) == (25, 20, 5)
    for case_id in split["train"]:
        assert (public / "train" / "images" / f"{case_id}_0000.nii.gz").is_file()
        assert (public / "train" / "labels" / f"{case_id}.nii.gz").is_file()
    for case_id in split["test"]:
        assert (public / "test" / "images" / f"{case_id}_0000.nii.gz").is_file()
        truth = sitk.ReadImage(str(private / "test" / "labels" / f"{case_id}.nii.gz"))
        assert truth.GetSpacing() == pytest.approx((0.45, 0.45, 0.6))
        assert set(np.unique(sitk.GetArrayViewFromImage(truth))) <= set(range(13)) | {15}
    assert (public / "sample_submission.csv").read_text().splitlines()[0] == "image_id,predicted_mask_path"


def test_perfect_submission_scores_best(twin, perfect):
    task = registry().get("topcow-cta-seg")
    metrics = grader().grade(perfect, twin.private)
    assert metrics == BEST
    assert all(type(v) is float for v in metrics.values())
    assert rank(task, metrics).percentile == 1.0


def test_degraded_submissions_score_worse(twin, perfect, tmp_path):
    g = grader()
    sub = copy_of(perfect, tmp_path / "eroded")
    for _, path in rows(sub):
        img = sitk.ReadImage(str(path))
        arr = sitk.GetArrayFromImage(img)
        keep = ndimage.binary_erosion(arr > 0) | np.isin(arr, (8, 9, 10, 15))   # thin the big vessels
        out = sitk.GetImageFromArray((arr * keep).astype(np.uint8))
        out.CopyInformation(img)
        sitk.WriteImage(out, str(path))
    m = g.grade(sub, twin.private)
    assert m["dice"] < 1.0 and m["cldice"] < 1.0 and m["hd95"] > 0.0

    sub = copy_of(perfect, tmp_path / "no-acom")
    for _, path in rows(sub):
        img = sitk.ReadImage(str(path))
        arr = sitk.GetArrayFromImage(img)
        arr[np.isin(arr, (10, 15))] = 0                                             # drop Acom and 3rd-A2
        out = sitk.GetImageFromArray(arr)
        out.CopyInformation(img)
        sitk.WriteImage(out, str(path))
    m = g.grade(sub, twin.private)
    assert m["f1_grp2"] < 1.0 and m["anterior_graph_acc"] < 1.0 and m["anterior_topology"] < 1.0
    assert m["dice"] < 1.0 and m["hd95"] > 0.0
    assert m["posterior_graph_acc"] == m["posterior_topology"] == 1.0      # untouched region


def test_baseline_validates_and_scores_worst(twin, tmp_path):
    g = grader()
    g.write_baseline(twin.public, tmp_path / "baseline")
    g.validate(tmp_path / "baseline", twin.public)
    m = g.grade(tmp_path / "baseline", twin.private)
    # empty masks: L = ground-truth labels, all missed -> Dice 0, HD95 90, B0 error 1 (one tube each)
    assert m["dice"] == 0.0 and m["cldice"] == 0.0 and m["hd95"] == 90.0 and m["b0_error"] == 1.0
    assert m["f1_grp2"] == 0.0
    assert rank(registry().get("topcow-cta-seg"), m).percentile < 0.5


def test_mra_twin_uses_mra_ids_and_perfect_is_best(tmp_path):
    task = registry().get("topcow-mra-seg")
    data = generate(task, tmp_path / "twin")
    g = load_grader(task)
    g.write_perfect(data.private, tmp_path / "perfect")
    assert all(i.startswith("topcow_mr_") for i in g.public_test_ids(data.public))
    assert g.grade(tmp_path / "perfect", data.private) == BEST


# == malformed submissions =============================================================================
def rewrite_first(sub: Path, array: np.ndarray | None = None, *, spacing=None, origin=None, direction=None,
                  image: sitk.Image | None = None, name: str | None = None) -> Path:
    """Replace the first case's prediction (optionally under another file name)."""
    _, path = rows(sub)[0]
    ref = sitk.ReadImage(str(path))
    if image is None:
        image = sitk.GetImageFromArray(sitk.GetArrayFromImage(ref) if array is None else array)
        image.SetSpacing(ref.GetSpacing())
        image.SetOrigin(ref.GetOrigin())
        image.SetDirection(ref.GetDirection())
    if spacing is not None:
        image.SetSpacing(spacing)
    if origin is not None:
        image.SetOrigin(origin)
    if direction is not None:
        image.SetDirection(direction)
    target = path if name is None else path.with_name(name)
    if name is not None:
        csv = sub / "submission.csv"
        csv.write_text(csv.read_text().replace(path.name, name, 1))
        path.unlink()
    sitk.WriteImage(image, str(target))
    return target


def first_array(sub: Path) -> np.ndarray:
    return sitk.GetArrayFromImage(sitk.ReadImage(str(rows(sub)[0][1])))


def bad_label(value, dtype, name: str | None = None):
    def make(sub):
        arr = first_array(sub).astype(dtype)
        arr[0, 0, 0] = value
        rewrite_first(sub, arr, name=name)
    return make


MALFORMED = {
    "unreadable file": (lambda sub: rows(sub)[0][1].write_bytes(b"not a nifti"), "cannot read"),
    "wrong extension": (lambda sub: rewrite_first(sub, name="mask.nrrd"), "must be NIfTI"),
    "wrong shape": (lambda sub: rewrite_first(sub, first_array(sub)[:-1]), "size"),
    # spacing, origin and direction differences are scored with a warning (grading rules: reading images): test_contract
    "label 13": (bad_label(13, np.uint8), "not allowed"),
    "negative label": (bad_label(-1, np.int16), "not allowed"),
    "fractional label": (bad_label(1.5, np.float32), "non-integer"),
    # MHA: SimpleITK's NIfTI reader turns NaN/inf into 0 (see the report), MHA keeps them
    "NaN": (bad_label(np.nan, np.float32, "first.mha"), "NaN"),
    "infinity": (bad_label(np.inf, np.float64, "first.mha"), "NaN or infinite"),
    "vector image": (lambda sub: rewrite_first(sub, image=_vector_like(sub)), "components"),
    "2-D image": (lambda sub: rewrite_first(sub, image=sitk.Image(10, 10, sitk.sitkUInt8)), "2-D"),
    "complex voxels": (lambda sub: rewrite_first(sub, first_array(sub).astype(np.complex64)), "voxel type"),
}


def _vector_like(sub: Path) -> sitk.Image:
    ref = sitk.ReadImage(str(rows(sub)[0][1]))
    img = sitk.Compose(ref, ref)
    img.CopyInformation(ref)
    return img


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_malformed_submission_is_invalid(kind, twin, perfect, tmp_path):
    make, reason = MALFORMED[kind]
    assert_refused(grader(), perfect, twin, make, reason, tmp_path)


def test_float_and_int16_volumes_with_valid_labels_are_accepted(twin, perfect, tmp_path):
    sub = copy_of(perfect, tmp_path / "sub")
    rewrite_first(sub, first_array(sub).astype(np.float32))
    assert grader().grade(sub, twin.private) == BEST
    rewrite_first(sub, first_array(sub).astype(np.int16), name="first.mha")
    grader().validate(sub, twin.public)
    assert grader().grade(sub, twin.private) == BEST


# == task 3: edge classification =======================================================================
EDGES = {"anterior": {"L-A1": 1, "Acom": 1, "3rd-A2": 0, "R-A1": 1},
         "posterior": {"L-Pcom": 0, "L-P1": 1, "R-P1": 1, "R-Pcom": 1}}


def write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_read_edges_strict(tmp_path):
    assert read_edges(write_json(tmp_path / "ok.json", EDGES), "c") == ((1, 1, 0, 1), (0, 1, 1, 1))
    bad = {
        "bool": {**EDGES, "anterior": {**EDGES["anterior"], "Acom": True}},
        "float": {**EDGES, "anterior": {**EDGES["anterior"], "Acom": 1.0}},
        "two": {**EDGES, "posterior": {**EDGES["posterior"], "R-P1": 2}},
        "string": {**EDGES, "posterior": {**EDGES["posterior"], "R-P1": "1"}},
        "missing edge": {**EDGES, "posterior": {"L-Pcom": 0, "L-P1": 1, "R-P1": 1}},
        "extra edge": {**EDGES, "anterior": {**EDGES["anterior"], "A2": 1}},
        "extra region": {**EDGES, "other": {}},
        "list": [1, 1, 0, 1, 0, 1, 1, 1],
        "not json": "{anterior",
        "NaN": '{"anterior": {"L-A1": NaN, "Acom": 1, "3rd-A2": 0, "R-A1": 1}, "posterior": {}}',
    }
    for name, data in bad.items():
        with pytest.raises(InvalidSubmission):
            read_edges(write_json(tmp_path / f"{name}.json", data), name)
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InvalidSubmission, match="not valid JSON"):
        read_edges(tmp_path / "bin.json", "bin")


def write_edge_case_files(root: Path, truth: dict, pred: dict) -> tuple[Path, Path]:
    answers, sub = root / "answers", root / "submission"
    (answers / "test" / "labels").mkdir(parents=True)
    (sub / "predictions").mkdir(parents=True)
    for case_id in truth:
        write_json(answers / "test" / "labels" / f"{case_id}.json", truth[case_id])
        write_json(sub / "predictions" / f"{case_id}.json", pred[case_id])
    write_answers(answers, "image_id", "label_path", {i: f"test/labels/{i}.json" for i in truth})
    write_csv(sub / "submission.csv", ["image_id", "predicted_edges_path"],
              [{"image_id": i, "predicted_edges_path": f"predictions/{i}.json"} for i in truth])
    return answers, sub


def edges(ant, pos) -> dict:
    return {"anterior": dict(zip(("L-A1", "Acom", "3rd-A2", "R-A1"), ant, strict=False)),
            "posterior": dict(zip(("L-Pcom", "L-P1", "R-P1", "R-Pcom"), pos, strict=False))}


def test_edge_classification_hand_example(tmp_path):
    # anterior truth: A, A, B; predicted: A, B, B -> class A 1/2, class B 1/1 -> 0.75.
    # posterior truth: X, X, X; predicted: X, Y, X -> class X 2/3 (Y only predicted, ignored).
    a, b = (1, 1, 0, 1), (1, 0, 0, 1)
    x, y = (1, 1, 1, 1), (0, 1, 1, 0)
    truth = {"c1": edges(a, x), "c2": edges(a, x), "c3": edges(b, x)}
    pred = {"c1": edges(a, x), "c2": edges(b, y), "c3": edges(b, x)}
    answers, sub = write_edge_case_files(tmp_path, truth, pred)
    m = grader("topcow-cta-cls").grade(sub, answers)
    assert m == {"anterior_acc": pytest.approx(0.75), "posterior_acc": pytest.approx(2 / 3)}


@pytest.mark.parametrize("task_id", ["topcow-cta-cls", "topcow-mra-cls"])
def test_edge_twin_perfect_baseline_and_invalid(task_id, tmp_path):
    task = registry().get(task_id)
    data = generate(task, tmp_path / "twin")
    g = load_grader(task)
    g.write_perfect(data.private, tmp_path / "perfect")
    m = g.grade(tmp_path / "perfect", data.private)
    assert m == {"anterior_acc": 1.0, "posterior_acc": 1.0}
    assert rank(task, m).percentile == 1.0
    g.write_baseline(data.public, tmp_path / "baseline")
    g.validate(tmp_path / "baseline", data.public)
    base = g.grade(tmp_path / "baseline", data.private)
    assert base["anterior_acc"] < 1.0 and base["posterior_acc"] < 1.0
    # training labels are exactly the submission's JSON form
    for label in (data.public / "train" / "labels").glob("*.json"):
        read_edges(label, label.stem)
    bad = copy_of(tmp_path / "perfect", tmp_path / "bad")
    first = sorted((bad / "predictions").glob("*.json"))[0]
    first.write_text(json.dumps({"anterior": {}, "posterior": {}}))
    with pytest.raises(InvalidSubmission, match="exactly the keys"):
        g.grade(bad, data.private)
    with pytest.raises(InvalidSubmission, match="exactly the keys"):
        g.validate(bad, data.public)


# == task 2: boxes on the shared phantom ===============================================================
@pytest.mark.parametrize("task_id", ["topcow-cta-det", "topcow-mra-det"])
def test_box_twin_perfect_and_baseline(task_id, tmp_path):
    task = registry().get(task_id)
    data = generate(task, tmp_path / "twin")
    g = load_grader(task)
    g.write_perfect(data.private, tmp_path / "perfect")
    m = g.grade(tmp_path / "perfect", data.private)
    assert m == {"boundary_iou": 1.0, "iou": 1.0} and rank(task, m).percentile == 1.0
    g.write_baseline(data.public, tmp_path / "baseline")
    g.validate(tmp_path / "baseline", data.public)
    base = g.grade(tmp_path / "baseline", data.private)
    assert 0.0 < base["iou"] < 1.0 and base["boundary_iou"] < 1.0
