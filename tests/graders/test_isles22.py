"""ISLES'22 (challenges.md §19): what is specific to its grader — any non-zero voxel is lesion, floats included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pytest_rexmle.data.synthetic.common import write_answers, write_csv
from pytest_rexmle.data.synthetic.volumes import make_image
from pytest_rexmle.errors import InvalidSubmission
from pytest_rexmle.graders.base import load_grader
from pytest_rexmle.medimage.geometry import write_image
from pytest_rexmle.task import registry

SPACING_XYZ = (2.0, 2.0, 3.0)
SHAPE_ZYX = (6, 10, 12)


def grader():
    return load_grader(registry().get("isles22"))


def lesions() -> tuple[np.ndarray, np.ndarray]:
    """Ground truth: two lesions of 8 voxels. Prediction: the first one exactly, half of the second, one FP voxel."""
    truth = np.zeros(SHAPE_ZYX, dtype=np.uint8)
    truth[1:3, 2:4, 2:4] = 1
    truth[3:5, 6:8, 7:9] = 1
    pred = np.zeros(SHAPE_ZYX, dtype=np.float32)
    pred[1:3, 2:4, 2:4] = 1.0
    pred[3:5, 6:8, 7] = 1.0
    pred[0, 0, 11] = 1.0
    return truth, pred


def write_case(root: Path, truth: np.ndarray, pred: np.ndarray, name: str = "sub-strokecase0001") -> tuple[Path, Path]:
    answers, submission = root / "answers", root / "submission"
    write_image(make_image(truth, SPACING_XYZ), answers / "test" / f"{name}_msk.nii.gz")
    write_image(make_image(pred, SPACING_XYZ), submission / "predictions" / f"{name}.nii.gz")
    write_answers(answers, "case_id", "mask_path", {name: f"test/{name}_msk.nii.gz"})
    write_csv(submission / "submission.csv", ["case_id", "predicted_mask_path"],
              [{"case_id": name, "predicted_mask_path": f"predictions/{name}.nii.gz"}])
    return answers, submission


def expected(truth: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    # 8 + 4 + 1 predicted voxels, 8 + 4 overlapping: Dice 2·12/(13 + 16); both lesions hit (TP 2), the
    # stray voxel is an FP component: F1 = 2/(2 + 1/2); components 2 vs 3; |16 − 13| voxels of 12 mm³.
    assert int(truth.sum()) == 16 and int(np.count_nonzero(pred)) == 13
    return {"dice": 24 / 29, "lesion_f1": 2 / 2.5, "lesion_count_diff": 1.0, "abs_volume_diff": 3 * 12 / 1000}


@pytest.mark.parametrize("value", [1.0, 0.6, 1e-3])
def test_a_float_mask_with_values_in_0_1_is_scored(value, tmp_path):
    # §19 errata (turn 4): the organisers binarise with != 0 whatever the voxel type; a probability-like
    # float mask is a mask, not "non-integer label values".
    truth, pred = lesions()
    answers, submission = write_case(tmp_path, truth, (pred * value).astype(np.float32))
    metrics = grader().grade(submission, answers)
    assert metrics == pytest.approx(expected(truth, pred))


def test_the_float_mask_scores_as_its_integer_twin(tmp_path):
    truth, pred = lesions()
    as_float = grader().grade(*reversed(write_case(tmp_path / "f", truth, pred * 0.37)))
    as_int = grader().grade(*reversed(write_case(tmp_path / "i", truth, pred.astype(np.uint8))))
    assert as_float == as_int


def test_validation_accepts_a_float_mask(tmp_path):
    truth, pred = lesions()
    public = tmp_path / "public"
    write_image(make_image(np.zeros(SHAPE_ZYX, dtype=np.float32), SPACING_XYZ), public / "test" / "sub-strokecase0001_dwi.nii.gz")
    write_csv(public / "sample_submission.csv", ["case_id", "predicted_mask_path"],
              [{"case_id": "sub-strokecase0001", "predicted_mask_path": "predictions/sub-strokecase0001.nii.gz"}])
    _, submission = write_case(tmp_path, truth, pred * 0.5)
    assert grader().validate(submission, public).ids == ["sub-strokecase0001"]


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_voxels_stay_invalid(bad, tmp_path):
    truth, pred = lesions()
    pred[0, 0, 0] = bad
    answers, submission = write_case(tmp_path, truth, pred)
    with pytest.raises(InvalidSubmission, match="NaN or infinite"):
        grader().grade(submission, answers)
