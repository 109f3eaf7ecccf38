"""SEG.A 2023: metrics, twin, self-consistency, malformed input."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk
from scipy import ndimage

from pytest_rexmle.competitions.sega.grade import aggregate, case_metrics, vessel_mask
from pytest_rexmle.data.synthetic.common import write_answers, write_csv
from pytest_rexmle.data.synthetic.volumes import make_image
from pytest_rexmle.errors import InvalidSubmission
from pytest_rexmle.graders.base import load_grader
from pytest_rexmle.medimage.geometry import write_image
from pytest_rexmle.scoring.ranking import rank
from pytest_rexmle.task import registry

from .editing import assert_refused, copy_of
from .twins import twin_fixtures

SPACING_XYZ = (0.5, 2.0, 3.0)      # SimpleITK order; the array axes (z, y, x) get (3.0, 2.0, 0.5)


def grader():
    return load_grader(registry().get("seg-a"))


def write_cases(root: Path, cases: dict[str, tuple[np.ndarray, np.ndarray]], suffix: str = ".seg.nrrd"):
    answers, submission = root / "answers", root / "submission"
    for case_id, (truth, pred) in cases.items():
        write_image(make_image(truth.astype(np.uint8), SPACING_XYZ),
                    answers / "test" / "labels" / f"{case_id}.seg.nrrd")
        write_image(make_image(pred, SPACING_XYZ), submission / "predictions" / f"{case_id}{suffix}")
    write_answers(answers, "image_id", "label_path", {i: f"test/labels/{i}.seg.nrrd" for i in cases})
    write_csv(submission / "submission.csv", ["image_id", "predicted_mask_path"],
              [{"image_id": i, "predicted_mask_path": f"predictions/{i}{suffix}"} for i in cases])
    return answers, submission


twin, perfect = twin_fixtures("seg-a")


def first_case(submission: Path) -> tuple[str, Path]:
    case_id, rel = (submission / "submission.csv").read_text().splitlines()[1].split(",")
    return case_id, submission / rel


# --- metrics -------------------------------------------------------------------------------------

def test_case_metrics_and_empty_rules():
    truth = np.zeros((4, 5, 6), dtype=bool)
    pred = np.zeros_like(truth)
    truth[1, 2, 1:3] = True                    # 2 voxels
    pred[1, 2, 2:5] = True                     # 3 voxels, 1 shared → Dice 2/5
    m = case_metrics(pred, truth, (3.0, 2.0, 0.5))
    # Surfaces are the voxels themselves (a 1-voxel-thick rod); farthest: pred x=4 to truth x=2 → 1 mm.
    assert m == {"dsc": pytest.approx(0.4), "hd": pytest.approx(1.0)}
    empty = np.zeros_like(truth)
    assert case_metrics(empty, empty, (3.0, 2.0, 0.5)) == {"dsc": 1.0, "hd": 0.0}
    # Diagonal sqrt((4·3)² + (5·2)² + (6·0.5)²) = sqrt(144 + 100 + 9) = sqrt(253).
    for p, g in ((pred, empty), (empty, truth)):
        assert case_metrics(p, g, (3.0, 2.0, 0.5)) == {"dsc": 0.0, "hd": pytest.approx(math.sqrt(253))}


def test_aggregate_medians_means_and_population_std():
    # HD [1, 2, 3, 10]: median (2 + 3)/2 = 2.5, mean 4, population std sqrt((9 + 4 + 1 + 36)/4) = sqrt(12.5).
    # DSC [0.5, 1, 0.75, 0.75]: median 0.75, mean 0.75, std sqrt((0.0625 + 0.0625 + 0 + 0)/4) = sqrt(1/32).
    cases = [{"hd": h, "dsc": d} for h, d in zip([1.0, 2.0, 3.0, 10.0], [0.5, 1.0, 0.75, 0.75], strict=True)]
    out = aggregate(cases)
    assert out == {"hd_50pc": 2.5, "dsc_50pc": 0.75, "hd_mean": 4.0, "dsc_mean": 0.75,
                   "hd_std": pytest.approx(math.sqrt(12.5)), "dsc_std": pytest.approx(math.sqrt(1 / 32))}
    assert all(type(v) is float for v in out.values())
    # Odd count: the middle value.
    assert aggregate([{"hd": h, "dsc": 0.0} for h in (5.0, 1.0, 3.0)])["hd_50pc"] == 3.0


def test_any_nonzero_voxel_is_vessel_and_nan_is_invalid():
    img = sitk.GetImageFromArray(np.array([0, 3, -1, 0.25], dtype=np.float32).reshape(1, 1, 4))
    assert vessel_mask(img, "c").tolist() == [[[False, True, True, True]]]
    bad = sitk.GetImageFromArray(np.array([0, np.nan], dtype=np.float32).reshape(1, 1, 2))
    with pytest.raises(InvalidSubmission, match="NaN"):
        vessel_mask(bad, "c")


def test_ground_truth_spacing_is_paired_with_the_array_axes(tmp_path):
    # Single voxels 2 apart along x at SimpleITK spacing (x, y, z) = (0.5, 2, 3): HD = 2 · 0.5 = 1 mm
    # (an unreversed spacing would give 2 · 3 = 6 mm). Plain .nrrd is accepted as well as .seg.nrrd.
    truth, pred = np.zeros((5, 5, 7), dtype=np.uint8), np.zeros((5, 5, 7), dtype=np.uint8)
    truth[2, 2, 2] = 1
    pred[2, 2, 4] = 1
    answers, submission = write_cases(tmp_path, {"D1": (truth, pred), "K1": (truth, truth)}, suffix=".nrrd")
    m = grader().grade(submission, answers)
    # Two cases: HD [1, 0] → median 0.5; DSC [0, 1] → median 0.5.
    assert m["hd_50pc"] == pytest.approx(0.5) and m["dsc_50pc"] == pytest.approx(0.5)
    assert m["hd_mean"] == pytest.approx(0.5) and m["hd_std"] == pytest.approx(0.5)


# --- twin and self-consistency -------------------------------------------------------------------

def test_twin_layout(twin):
    ids = grader().public_test_ids(twin.public)
    assert len(ids) == 5                                                       # 25 → 20/5 (the split: ceil(n / 5) test)
    train = sorted(p.name.removesuffix(".seg.nrrd") for p in (twin.public / "train" / "labels").glob("*.seg.nrrd"))
    assert len(train) == 20 and {i[0] for i in train + ids} == {"D", "K", "R"}
    assert "D10" in train + ids                                                # string order D1 < D10 < D2
    for case_id in ids:
        assert (twin.public / "test" / "images" / f"{case_id}.nrrd").is_file()
        label = sitk.GetArrayFromImage(sitk.ReadImage(str(twin.private / "test" / "labels" / f"{case_id}.seg.nrrd")))
        assert set(np.unique(label).tolist()) == {0, 1}


def test_perfect_degraded_and_baseline(twin, perfect, tmp_path):
    task, g = registry().get("seg-a"), grader()
    g.validate(perfect, twin.public)
    best = g.grade(perfect, twin.private)
    assert best == {"hd_50pc": 0.0, "dsc_50pc": 1.0, "hd_mean": 0.0, "dsc_mean": 1.0, "hd_std": 0.0, "dsc_std": 0.0}
    assert rank(task, best).percentile == 1.0

    degraded = copy_of(perfect, tmp_path / "degraded")
    for path in (degraded / "predictions").glob("*.seg.nrrd"):
        img = sitk.ReadImage(str(path))
        grown = ndimage.binary_dilation(sitk.GetArrayFromImage(img) != 0, iterations=2).astype(np.uint8)
        out = sitk.GetImageFromArray(grown)
        out.CopyInformation(img)
        sitk.WriteImage(out, str(path), True)
    worse = g.grade(degraded, twin.private)
    assert worse["hd_50pc"] > 0.0 and worse["dsc_50pc"] < 1.0 and worse["dsc_mean"] < 1.0

    g.write_baseline(twin.public, tmp_path / "baseline")
    g.validate(tmp_path / "baseline", twin.public)
    base = g.grade(tmp_path / "baseline", twin.private)
    diagonals = []
    for path in (twin.private / "test" / "labels").glob("*.seg.nrrd"):
        img = sitk.ReadImage(str(path))
        diagonals.append(float(np.linalg.norm(np.array(img.GetSize(), float) * np.array(img.GetSpacing()))))
    assert base["dsc_50pc"] == 0.0 and base["dsc_mean"] == 0.0
    assert base["hd_50pc"] == pytest.approx(float(np.median(diagonals)))
    assert rank(task, base).percentile < 1.0


# --- malformed submissions -----------------------------------------------------------------------

def edit_csv(sub: Path, fn) -> None:
    lines = (sub / "submission.csv").read_text().splitlines()
    (sub / "submission.csv").write_text("\n".join(fn(lines)) + "\n")


def rewrite_first(sub: Path, transform) -> None:
    """Replace the first prediction by ``transform(array, ref) -> image``."""
    _, path = first_case(sub)
    ref = sitk.ReadImage(str(path))
    sitk.WriteImage(transform(sitk.GetArrayFromImage(ref), ref), str(path))


def like(arr: np.ndarray, ref: sitk.Image, **changes) -> sitk.Image:
    img = sitk.GetImageFromArray(arr)
    img.CopyInformation(ref)
    for name, value in changes.items():
        getattr(img, f"Set{name}")(value)
    return img


def mutate_suffix(sub: Path) -> None:
    case_id, path = first_case(sub)
    new = path.parent / f"{case_id}.mha"
    sitk.WriteImage(sitk.ReadImage(str(path)), str(new))
    edit_csv(sub, lambda lines: [lines[0], f"{case_id},predictions/{new.name}", *lines[2:]])


def nan_image(arr, ref):
    arr = arr.astype(np.float32)
    arr[0, 0, 0] = np.nan
    return like(arr, ref)


MUTATIONS = {
    "unreadable file": (lambda s: first_case(s)[1].write_bytes(b"NRRD0004\ngarbage"), "cannot read"),
    "wrong shape": (lambda s: rewrite_first(s, lambda a, r: sitk.GetImageFromArray(a[1:].copy())), "size"),
    # spacing, origin and direction differences are scored with a warning (grading rules: reading images): test_contract
    "nan": (lambda s: rewrite_first(s, nan_image), "NaN"),
    "2-D": (lambda s: rewrite_first(s, lambda a, r: sitk.GetImageFromArray(a[0].copy())), "2-D"),
    "wrong format": (mutate_suffix, "must be NRRD"),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_malformed_submission_is_invalid(name, perfect, twin, tmp_path):
    mutate, reason = MUTATIONS[name]
    assert_refused(grader(), perfect, twin, mutate, reason, tmp_path, validate_names_it=False)


# --- property ------------------------------------------------------------------------------------
