"""ISLES'22: what is specific to its grader — any non-zero voxel is lesion, floats included."""

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
    # the organisers binarise with != 0 whatever the voxel type; a probability-like
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


# -- a NIfTI whose qform and sform disagree: the usual nibabel mask lands off-grid under SimpleITK --

def nibabel_case(root: Path) -> tuple[Path, Path, Path]:
    """A DWI grid whose qform (code 1) and sform (code 2, "aligned") are 0.5 mm apart, its mask as answers,
    and a prediction saved the way nibabel users save masks: ``Nifti1Image(mask, dwi.affine)``."""
    import nibabel as nib

    truth, pred = lesions()
    qform = np.diag([*SPACING_XYZ, 1.0])
    qform[:3, 3] = (-40.0, -30.0, 12.0)
    sform = qform.copy()
    sform[:3, 3] += 0.5
    header = nib.Nifti1Header()
    header.set_qform(qform, code=1)
    header.set_sform(sform, code=2)
    name = "sub-strokecase0001"
    public, answers, submission = root / "public", root / "answers", root / "submission"
    for folder, stem, data in ((public / "test", f"{name}_dwi", np.zeros(SHAPE_ZYX, np.float32)),
                               (answers / "test", f"{name}_msk", truth)):
        folder.mkdir(parents=True, exist_ok=True)
        nib.save(nib.Nifti1Image(np.ascontiguousarray(data.transpose(2, 1, 0)), None, header.copy()),
                 folder / f"{stem}.nii.gz")
    dwi = nib.load(public / "test" / f"{name}_dwi.nii.gz")
    (submission / "predictions").mkdir(parents=True)
    nib.save(nib.Nifti1Image(pred.transpose(2, 1, 0).astype(np.uint8), dwi.affine),
             submission / "predictions" / f"{name}.nii.gz")
    write_answers(answers, "case_id", "mask_path", {name: f"test/{name}_msk.nii.gz"})
    row = [{"case_id": name, "predicted_mask_path": f"predictions/{name}.nii.gz"}]
    write_csv(submission / "submission.csv", ["case_id", "predicted_mask_path"], row)
    write_csv(public / "sample_submission.csv", ["case_id", "predicted_mask_path"], row)
    return public, answers, submission


def test_a_nibabel_mask_on_a_qform_sform_image_is_scored_with_a_warning(tmp_path, capsys):
    from pytest_rexmle.cli import main
    from pytest_rexmle.scoring.grading import grade_submission, result_from_grade

    public, answers, submission = nibabel_case(tmp_path)
    task = registry().get("isles22")
    outcome = grade_submission(task, submission, answers)
    assert outcome.status == "ok", outcome.reason
    truth, pred = lesions()
    assert outcome.metrics == pytest.approx(expected(truth, pred))
    assert len(outcome.warnings) == 1 and "prediction header origin" in outcome.warnings[0]
    assert "by up to 0.5 " in outcome.warnings[0]
    assert result_from_grade(task, outcome).to_json()["warnings"] == list(outcome.warnings)
    code = main(["validate", "--task", "isles22", "--data", str(public), "--submission", str(submission)])
    out = capsys.readouterr().out.splitlines()
    assert code == 0 and out[0].startswith("OK: 1 test case(s)")
    assert len(out) == 2 and out[1].startswith("WARNING: case 'sub-strokecase0001': prediction header origin")


def test_another_shape_is_still_invalid(tmp_path):
    truth, pred = lesions()
    answers, submission = write_case(tmp_path, truth, pred[:, :, :-1].copy())
    with pytest.raises(InvalidSubmission, match=r"prediction size \(11, 10, 6\) differs from the ground truth \(12, 10, 6\)"):
        grader().grade(submission, answers)
