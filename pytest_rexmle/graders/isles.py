"""ISLES'22 grader (challenges.md §19): binary infarct masks on the DWI grid, organisers' metrics."""

from __future__ import annotations

import shutil
from pathlib import Path
from statistics import mean

import numpy as np
import SimpleITK as sitk

from ..errors import InvalidSubmission
from ..imaging import image_like, read_image, read_mask, reference_geometry, voxel_volume_mm3, write_image
from ..metrics.components import lesion_detection
from ..metrics.overlap import dice
from ..submission import CaseTable, read_answers
from .base import Grader, write_submission_csv

NIFTI_SUFFIXES = (".nii", ".nii.gz")


def _require_nifti(path: Path, case_id: str) -> None:
    if not path.name.endswith(NIFTI_SUFFIXES):
        raise InvalidSubmission(f"case {case_id!r}: prediction {path.name!r} must be NIfTI (.nii or .nii.gz)")


def case_metrics(pred: np.ndarray, truth: np.ndarray, voxel_ml: float) -> dict[str, float]:
    lesions = lesion_detection(pred, truth)
    return {
        "dice": dice(pred, truth, empty=1.0),
        "lesion_f1": lesions["lesion_f1"],
        "lesion_count_diff": lesions["lesion_count_diff"],
        "abs_volume_diff": abs(int(np.count_nonzero(truth)) - int(np.count_nonzero(pred))) * voxel_ml,
    }


class StrokeLesion(Grader):
    prediction_columns = ("predicted_mask_path",)
    answer_columns = ("mask_path",)
    keys = ("dice", "lesion_f1", "lesion_count_diff", "abs_volume_diff")

    def score(self, submission: CaseTable, answers: CaseTable) -> dict[str, float]:
        per_case = []
        for case_id in answers.ids:
            truth_img = read_image(answers.root / answers.value(case_id, "mask_path"), case_id)
            path = submission.file(case_id, "predicted_mask_path")
            _require_nifti(path, case_id)
            pred = read_mask(path, truth_img, case_id) != 0
            truth = sitk.GetArrayViewFromImage(truth_img) != 0
            per_case.append(case_metrics(pred, truth, voxel_volume_mm3(truth_img) / 1000.0))
        return {k: mean(c[k] for c in per_case) for k in self.keys}

    def check_case(self, submission: CaseTable, case_id: str, public_dir: Path) -> None:
        path = submission.file(case_id, "predicted_mask_path")
        _require_nifti(path, case_id)
        read_mask(path, reference_geometry(public_dir / "test" / f"{case_id}_dwi.nii.gz"), case_id)

    def write_baseline(self, public_dir: Path, out_dir: Path) -> None:
        """An empty mask on each test case's DWI grid."""
        rows = []
        for case_id in self.public_test_ids(public_dir):
            ref = reference_geometry(public_dir / "test" / f"{case_id}_dwi.nii.gz")
            rel = f"predictions/{case_id}.nii.gz"
            size = ref.GetSize()
            write_image(image_like(np.zeros(size[::-1], dtype=np.uint8), ref), out_dir / rel)
            rows.append({self.id_column: case_id, "predicted_mask_path": rel})
        write_submission_csv(out_dir, self.id_column, rows, self.prediction_columns)

    def write_perfect(self, answers_dir: Path, out_dir: Path) -> None:
        answers = read_answers(answers_dir, self.id_column, self.answer_columns)
        rows = []
        for case_id in answers.ids:
            rel = f"predictions/{case_id}.nii.gz"
            (out_dir / "predictions").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(answers_dir / answers.value(case_id, "mask_path"), out_dir / rel)
            rows.append({self.id_column: case_id, "predicted_mask_path": rel})
        write_submission_csv(out_dir, self.id_column, rows, self.prediction_columns)
