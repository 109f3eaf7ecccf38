"""PANTHER tasks 1 and 2: metrics, twins, self-consistency, malformed input."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk
from scipy import ndimage

from pytest_rexmle.competitions.panther.grade import aggregate, case_metrics, tumour_mask
from pytest_rexmle.data.synthetic import generate
from pytest_rexmle.data.synthetic.common import write_answers, write_csv
from pytest_rexmle.data.synthetic.volumes import make_image
from pytest_rexmle.errors import InvalidSubmission
from pytest_rexmle.graders.base import load_grader
from pytest_rexmle.medimage.geometry import write_image
from pytest_rexmle.scoring.ranking import rank
from pytest_rexmle.task import registry

from .editing import assert_refused, copy_of

SPACING_XYZ = (0.5, 2.0, 3.0)      # SimpleITK order; the array axes (z, y, x) get (3.0, 2.0, 0.5)
PERFECT = {"dsc": 1.0, "msd": 1.0, "hd95": 0.0, "masd": 0.0, "msd_true_axes": 1.0, "hd95_true_axes": 0.0,
           "masd_true_axes": 0.0, "rmse": 0.0}


# --- helpers -------------------------------------------------------------------------------------

def grader_for(task_id: str):
    return load_grader(registry().get(task_id))


def write_cases(root: Path, cases: dict[str, tuple[np.ndarray, np.ndarray | None]], spacing=SPACING_XYZ,
                suffix: str = ".mha") -> tuple[Path, Path]:
    """answers/ and submission/ folders for hand-made (ground truth, prediction) pairs."""
    answers, submission = root / "answers", root / "submission"
    for case_id, (truth, pred) in cases.items():
        write_image(make_image(truth.astype(np.uint8), spacing), answers / "test" / "labels" / f"{case_id}.mha")
        if pred is not None:
            write_image(make_image(pred, spacing), submission / "predictions" / f"{case_id}{suffix}")
    write_answers(answers, "image_id", "label_path", {i: f"test/labels/{i}.mha" for i in cases})
    write_csv(submission / "submission.csv", ["image_id", "predicted_mask_path"],
              [{"image_id": i, "predicted_mask_path": f"predictions/{i}{suffix}"} for i in cases])
    return answers, submission


@pytest.fixture(scope="module")
def twin1(tmp_path_factory):
    return generate(registry().get("panther-t1"), tmp_path_factory.mktemp("panther-t1"))


@pytest.fixture(scope="module")
def twin2(tmp_path_factory):
    return generate(registry().get("panther-t2"), tmp_path_factory.mktemp("panther-t2"))


@pytest.fixture(scope="module")
def perfect1(twin1, tmp_path_factory):
    out = tmp_path_factory.mktemp("perfect1") / "submission"
    grader_for("panther-t1").write_perfect(twin1.private, out)
    return out


def first_case(submission: Path) -> tuple[str, Path]:
    line = (submission / "submission.csv").read_text().splitlines()[1]
    case_id, rel = line.split(",")
    return case_id, submission / rel


# --- value-set rule ------------------------------------------------------------------------------

@pytest.mark.parametrize("values, dtype, expected", [
    ([0, 0], np.uint8, 0), ([1, 1], np.uint8, 2), ([0, 1], np.uint8, 1), ([0, 2], np.int16, 1),
    ([0, -3], np.int16, 1), ([0, 0.5], np.float32, 1), ([0, 1], np.float64, 1), ([True, False], np.uint8, 1),
])
def test_valid_value_sets(values, dtype, expected):
    # A 2-voxel image holding ``values``: the tumour voxel count is the number of non-zero values.
    img = sitk.GetImageFromArray(np.array(values, dtype=dtype).reshape(1, 1, 2))
    assert int(tumour_mask(img, "c").sum()) == expected


@pytest.mark.parametrize("values, dtype, reason", [
    ([2, 2], np.uint8, "single value"), ([0, 1, 2], np.uint8, "3 distinct values"),
    ([1, 2], np.uint8, "2 distinct values"), ([0, np.nan], np.float32, "NaN"), ([0, np.inf], np.float64, "NaN"),
])
def test_invalid_value_sets(values, dtype, reason):
    img = sitk.GetImageFromArray(np.array(values, dtype=dtype).reshape(1, 1, len(values)))
    with pytest.raises(InvalidSubmission, match=reason):
        tumour_mask(img, "c")


# --- per-case metrics ----------------------------------------------------------------------------

def two_voxels(shape=(5, 5, 7)) -> tuple[np.ndarray, np.ndarray]:
    truth, pred = np.zeros(shape, dtype=bool), np.zeros(shape, dtype=bool)
    truth[2, 2, 2] = True
    pred[2, 2, 4] = True
    return truth, pred


def test_case_metrics_single_voxels():
    # Voxels 2 apart along x at spacing (z, y, x) = (3, 2, 0.5). Physically (``*_true_axes``): surfel
    # corners are 0.5 or 1.0 mm from the other voxel's corners, half each (equal areas) → masd 0.75,
    # hd95 1.0, all within 5 mm. Ranked (the organisers' pairing): the (x, y, z)
    # spacing (0.5, 2, 3) lies on the (z, y, x) array, so the x shift is measured with 3 mm: corners
    # 3 or 6 mm away → masd 4.5, hd95 6.0, and only the half within 5 mm counts for msd.
    truth, pred = two_voxels()
    m = case_metrics(pred, truth, (3.0, 2.0, 0.5))
    assert m["dsc"] == 0.0
    assert m["msd_true_axes"] == pytest.approx(1.0)
    assert m["hd95_true_axes"] == pytest.approx(1.0)
    assert m["masd_true_axes"] == pytest.approx(0.75)
    assert m["msd"] == pytest.approx(0.5)
    assert m["hd95"] == pytest.approx(6.0)
    assert m["masd"] == pytest.approx(4.5)
    assert m["v_pred"] == m["v_gt"] == pytest.approx(3.0)       # 1 voxel × 3·2·0.5 mm³


def test_uniform_predictions_and_empty_truth():
    truth, pred = two_voxels()
    # Diagonal with shape (5, 5, 7): paired with (3, 2, 0.5) (true axes) sqrt(15² + 10² + 3.5²) =
    # sqrt(337.25); paired the organisers' way with (0.5, 2, 3): sqrt(2.5² + 10² + 21²) = sqrt(547.25).
    true_diagonal, diagonal = math.sqrt(337.25), math.sqrt(547.25)
    penalty = {"dsc": 0.0, "msd": 0.0, "hd95": pytest.approx(diagonal), "masd": pytest.approx(diagonal),
               "msd_true_axes": 0.0, "hd95_true_axes": pytest.approx(true_diagonal),
               "masd_true_axes": pytest.approx(true_diagonal)}
    for uniform in (np.zeros_like(pred), np.ones_like(pred)):
        m = case_metrics(uniform, truth, (3.0, 2.0, 0.5))
        assert m == {**penalty, "v_pred": 0.0, "v_gt": pytest.approx(3.0)}
    # Empty ground truth, non-uniform prediction (our extension): volumes computed normally.
    m = case_metrics(pred, np.zeros_like(truth), (3.0, 2.0, 0.5))
    assert m == {**penalty, "v_pred": pytest.approx(3.0), "v_gt": 0.0}
    assert all(math.isfinite(v) for v in m.values())


def test_isotropic_grids_give_one_value_under_both_pairings():
    truth, pred = two_voxels()
    m = case_metrics(pred, truth, (0.8, 0.8, 0.8))
    assert {k: m[k] for k in ("msd", "hd95", "masd")} == {
        k: m[k + "_true_axes"] for k in ("msd", "hd95", "masd")}
    assert m["hd95"] == pytest.approx(1.6) and m["masd"] == pytest.approx(1.2)


def test_aggregate_rmse_is_the_root_mean_squared_volume_error():
    # Volume errors 18 and −15 mm³ → sqrt((324 + 225)/2) = sqrt(274.5); other keys are plain means.
    cases = [{"dsc": 0.5, "msd": 1.0, "hd95": 2.0, "masd": 1.0, "v_pred": 30.0, "v_gt": 12.0},
             {"dsc": 0.0, "msd": 0.0, "hd95": 10.0, "masd": 10.0, "v_pred": 0.0, "v_gt": 15.0}]
    out = aggregate(cases)
    assert out == {"dsc": 0.25, "msd": 0.5, "hd95": 6.0, "masd": 5.5, "rmse": pytest.approx(math.sqrt(274.5))}
    assert all(type(v) is float for v in out.values())


def test_true_axes_values_are_reported_and_never_rank():
    task = registry().get("panther-t1")
    ranked = [m.key for m in task.ranking_metrics]
    assert ranked == ["dsc", "msd", "hd95", "masd", "rmse"]
    extras = {m.key: m.direction for m in task.metrics if not m.ranks}
    assert extras == {"msd_true_axes": "higher_better", "hd95_true_axes": "lower_better",
                      "masd_true_axes": "lower_better"}
    # ranking a result whose true-axes values are perfect but ranked values are poor: only the ranked count
    poor = {"dsc": 0.0, "msd": 0.0, "hd95": 500.0, "masd": 500.0, "rmse": 1e9,
            "msd_true_axes": 1.0, "hd95_true_axes": 0.0, "masd_true_axes": 0.0}
    assert rank(task, poor).percentile == 0.0
    assert set(rank(task, poor).positions) == set(ranked)


# --- grading files: spacing pairing, labels, formats ---------------------------------------------

def test_ground_truth_spacing_pairings(tmp_path):
    # Same single-voxel case written to disk with SimpleITK spacing (x, y, z) = (0.5, 2, 3). The
    # physically correct values measure the x shift with 0.5 mm (masd 0.75, hd95 1.0); the ranked ones
    # pair the spacing the organisers' way, (x, y, z) on the (z, y, x) array: 3 mm (masd 4.5, hd95 6.0).
    truth, pred = two_voxels()
    answers, submission = write_cases(tmp_path, {"a": (truth, pred.astype(np.uint8))})
    m = grader_for("panther-t1").grade(submission, answers)
    assert m["masd_true_axes"] == pytest.approx(0.75) and m["hd95_true_axes"] == pytest.approx(1.0)
    assert m["msd_true_axes"] == pytest.approx(1.0)
    assert m["masd"] == pytest.approx(4.5) and m["hd95"] == pytest.approx(6.0) and m["msd"] == pytest.approx(0.5)
    assert m["dsc"] == 0.0 and m["rmse"] == pytest.approx(0.0)


def test_every_nonzero_ground_truth_voxel_is_tumour(tmp_path):
    # Ground truth: 2 voxels of label 1 and 2 of label 2. Predicting only the label-1 voxels gives
    # Dice 2·2/(2 + 4) = 2/3 and a burden error of 2 voxels · 3 mm³ = 6 mm³.
    truth = np.zeros((4, 5, 6), dtype=np.uint8)
    truth[2, 2, 1:3] = 1
    truth[2, 2, 3:5] = 2
    answers, submission = write_cases(tmp_path, {"a": (truth, (truth == 1).astype(np.uint8))})
    m = grader_for("panther-t2").grade(submission, answers)
    assert m["dsc"] == pytest.approx(2 / 3)
    assert m["rmse"] == pytest.approx(6.0)


def test_tumour_prediction_scores_one_on_tumour_only_answers(tmp_path):
    # Released label: tumour (1) inside pancreas (2). The answers keep label 1 only: the
    # perfect tumour mask scores Dice 1; one that also marks the pancreas is penalised for it.
    released = np.zeros((6, 8, 10), dtype=np.uint8)
    released[1:5, 2:6, 2:9] = 2
    released[2:4, 3:5, 3:6] = 1
    answer = (released == 1).astype(np.uint8)
    answers, submission = write_cases(tmp_path / "tumour", {"a": (answer, answer.copy())})
    assert grader_for("panther-t1").grade(submission, answers) == PERFECT
    both = (released != 0).astype(np.uint8)
    answers, submission = write_cases(tmp_path / "both", {"a": (answer, both)})
    m = grader_for("panther-t1").grade(submission, answers)
    n_tumour, n_both = int(answer.sum()), int(both.sum())
    assert m["dsc"] == pytest.approx(2 * n_tumour / (n_tumour + n_both)) and m["dsc"] < 0.5
    assert m["rmse"] == pytest.approx((n_both - n_tumour) * float(np.prod(SPACING_XYZ)))


def test_nifti_predictions_are_read_through_simpleitk(tmp_path):
    truth, _ = two_voxels()
    answers, submission = write_cases(tmp_path, {"a": (truth, truth.astype(np.uint8))}, suffix=".nii.gz")
    m = grader_for("panther-t1").grade(submission, answers)
    assert m == PERFECT


# --- synthetic twins and self-consistency --------------------------------------------------------

def test_twin_layouts(twin1, twin2):
    t1_ids = grader_for("panther-t1").public_test_ids(twin1.public)
    assert len(t1_ids) == 5 and all(i.endswith("_0001") for i in t1_ids)      # 25 → 20/5 (the split: ceil(n / 5) test)
    assert len(list((twin1.public / "train" / "labels").glob("*.mha"))) == 20
    assert len(list((twin1.public / "train_unlabeled" / "images").glob("*.mha"))) >= 1
    assert not (twin2.public / "train_unlabeled").exists()
    assert all(i.isdigit() for i in grader_for("panther-t2").public_test_ids(twin2.public))
    labels = [sitk.GetArrayFromImage(sitk.ReadImage(str(p))) for p in (twin1.private / "test" / "labels").glob("*.mha")]
    assert all(lab.any() for lab in labels)
    assert all(set(np.unique(lab)) == {0, 1} for lab in labels), "the answers hold the tumour (label 1) only"
    train = [sitk.GetArrayFromImage(sitk.ReadImage(str(p))) for p in (twin1.public / "train" / "labels").glob("*.mha")]
    assert any(set(np.unique(lab)) == {0, 1, 2} for lab in train), "training labels keep the pancreas (label 2)"
    assert all(1 in np.unique(lab) for lab in train)
    spacing = sitk.ReadImage(str(next((twin1.public / "test" / "images").glob("*.mha")))).GetSpacing()
    assert len(set(spacing)) == 3                                               # anisotropic, x ≠ y


@pytest.mark.parametrize("task_id", ["panther-t1", "panther-t2"])
def test_perfect_degraded_and_baseline(task_id, twin1, twin2, tmp_path):
    twin = twin1 if task_id == "panther-t1" else twin2
    task, grader = registry().get(task_id), grader_for(task_id)
    grader.write_perfect(twin.private, tmp_path / "perfect")
    grader.validate(tmp_path / "perfect", twin.public)
    perfect = grader.grade(tmp_path / "perfect", twin.private)
    assert perfect == PERFECT
    assert rank(task, perfect).percentile == 1.0

    # Degraded: every prediction dilated by one voxel (6-connectivity) → more volume, shifted surface.
    degraded = copy_of(tmp_path / "perfect", tmp_path / "degraded")
    for path in (degraded / "predictions").glob("*.mha"):
        img = sitk.ReadImage(str(path))
        grown = ndimage.binary_dilation(sitk.GetArrayFromImage(img) != 0).astype(np.uint8)
        out = sitk.GetImageFromArray(grown)
        out.CopyInformation(img)
        sitk.WriteImage(out, str(path))
    worse = grader.grade(degraded, twin.private)
    assert worse["dsc"] < 1.0 and worse["hd95"] > 0.0 and worse["masd"] > 0.0 and worse["rmse"] > 0.0
    assert worse["msd"] <= 1.0

    # Baseline: all-zero masks → uniform rule on every case.
    grader.write_baseline(twin.public, tmp_path / "baseline")
    grader.validate(tmp_path / "baseline", twin.public)
    base = grader.grade(tmp_path / "baseline", twin.private)
    diagonals, true_diagonals, volumes = [], [], []
    for path in sorted((twin.private / "test" / "labels").glob("*.mha")):
        img = sitk.ReadImage(str(path))
        size, spacing = np.array(img.GetSize(), float), np.array(img.GetSpacing())
        diagonals.append(float(np.linalg.norm(size[::-1] * spacing)))      # (z, y, x) shape, (x, y, z) spacing
        true_diagonals.append(float(np.linalg.norm(size * spacing)))
        volumes.append(np.count_nonzero(sitk.GetArrayFromImage(img)) * float(np.prod(spacing)))
    assert base["dsc"] == 0.0 and base["msd"] == 0.0
    assert base["hd95"] == pytest.approx(np.mean(diagonals)) and base["masd"] == pytest.approx(np.mean(diagonals))
    assert base["hd95_true_axes"] == base["masd_true_axes"] == pytest.approx(np.mean(true_diagonals))
    assert base["hd95"] != pytest.approx(base["hd95_true_axes"])              # the twins are anisotropic
    assert base["rmse"] == pytest.approx(math.sqrt(np.mean(np.square(volumes))))
    assert rank(task, base).percentile < 1.0


# --- malformed submissions -----------------------------------------------------------------------

def rewrite_first(submission: Path, array: np.ndarray, spacing=None, origin=None, direction=None) -> None:
    _, path = first_case(submission)
    ref = sitk.ReadImage(str(path))
    img = sitk.GetImageFromArray(array)
    if array.shape == sitk.GetArrayViewFromImage(ref).shape:
        img.CopyInformation(ref)
    if spacing is not None:
        img.SetSpacing(spacing)
    if origin is not None:
        img.SetOrigin(origin)
    if direction is not None:
        img.SetDirection(direction)
    sitk.WriteImage(img, str(path))


def first_array(submission: Path) -> tuple[np.ndarray, sitk.Image]:
    _, path = first_case(submission)
    img = sitk.ReadImage(str(path))
    return sitk.GetArrayFromImage(img), img


def edit_csv(submission: Path, fn) -> None:
    lines = (submission / "submission.csv").read_text().splitlines()
    (submission / "submission.csv").write_text("\n".join(fn(lines)) + "\n")


def mutate_unreadable(sub):
    first_case(sub)[1].write_bytes(b"not an image at all")


def mutate_shape(sub):
    arr, _ = first_array(sub)
    rewrite_first(sub, arr[:-1].copy())


def mutate_labels(sub):
    arr, _ = first_array(sub)
    arr[0, 0, 0], arr[0, 0, 1] = 2, 3
    rewrite_first(sub, arr)


def mutate_nan(sub):
    arr, _ = first_array(sub)
    arr = arr.astype(np.float32)
    arr[0, 0, 0] = np.nan
    rewrite_first(sub, arr)


def mutate_two_d(sub):
    arr, _ = first_array(sub)
    rewrite_first(sub, arr[0].copy())


def mutate_vector(sub):
    case_id, path = first_case(sub)
    arr, ref = first_array(sub)
    img = sitk.GetImageFromArray(np.stack([arr, arr], axis=-1), isVector=True)
    img.CopyInformation(ref)
    sitk.WriteImage(img, str(path))


def mutate_suffix(sub):
    case_id, path = first_case(sub)
    sitk.WriteImage(sitk.ReadImage(str(path)), str(path.with_suffix(".nrrd")))
    edit_csv(sub, lambda lines: [lines[0], f"{case_id},predictions/{path.with_suffix('.nrrd').name}", *lines[2:]])


MUTATIONS = {
    "unreadable file": (mutate_unreadable, "cannot read"),
    "wrong shape": (mutate_shape, "size"),
    # spacing, origin and direction differences are scored with a warning (grading rules: reading images): test_contract
    "extra labels": (mutate_labels, "distinct values"),
    "nan": (mutate_nan, "NaN"),
    "2-D": (mutate_two_d, "2-D"),
    "vector voxels": (mutate_vector, "components"),
    "wrong format": (mutate_suffix, "must be .mha or .nii.gz"),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_malformed_submission_is_invalid(name, perfect1, twin1, tmp_path):
    mutate, reason = MUTATIONS[name]
    assert_refused(grader_for("panther-t1"), perfect1, twin1, mutate, reason, tmp_path, validate_names_it=False)


# --- property: arbitrary prediction files only ever raise InvalidSubmission -----------------------

_DTYPES = [np.uint8, np.int16, np.int32, np.float32, np.float64]
