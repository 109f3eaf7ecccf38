"""The shape shared by binary 3-D mask graders (PANTHER, SEG.A, ISLES'22): read, check geometry, score per case.

Subclasses say only what differs: accepted file types, which voxels count as foreground, the per-case
metrics and how cases aggregate.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import ClassVar

import numpy as np
import SimpleITK as sitk

from ..medimage.geometry import Geometry, header_geometry, read_image, zyx_spacing
from ..metrics.parallel import both
from ..submission import CaseTable
from .base import Grader


class BinaryMaskGrader(Grader):
    """Subclasses name their rules as functions of their module (``check_format = staticmethod(...)``)."""

    prediction_format = "volume"
    prediction_columns = ("predicted_mask_path",)
    answer_columns = ("label_path",)
    #: file-type rules, checked before the file is read: ``(path, case_id) -> None`` or InvalidSubmission
    check_format: ClassVar[staticmethod[[Path, str], None]]
    #: the boolean mask of a prediction, after its value rules: ``(image, case_id) -> array``
    foreground: ClassVar[staticmethod[[sitk.Image, str], np.ndarray]]
    #: metrics of one case: ``(pred, truth, spacing_zyx) -> dict``, spacing paired with the (z, y, x) axes
    case_metrics: ClassVar[staticmethod[[np.ndarray, np.ndarray, tuple[float, float, float]], dict[str, float]]]
    #: the task's metrics over all test cases
    aggregate: ClassVar[staticmethod[[list[dict[str, float]]], dict[str, float]]]

    def read_prediction(self, path: Path, case_id: str, ref: Geometry) -> np.ndarray:
        self.check_format(path, case_id)
        img = read_image(path, case_id, ref)  # header checked against ref before any voxel is decoded
        return self.foreground(img, case_id)

    def score(self, submission: CaseTable, answers: CaseTable) -> dict[str, float]:
        per_case = []
        for case_id, predicted, truth_path in self.case_files(submission, answers):
            ref = header_geometry(truth_path)   # the header: both volumes then decode on two cores
            truth_img, pred = both(partial(read_image, truth_path, case_id),
                                   partial(self.read_prediction, predicted, case_id, ref))
            truth = sitk.GetArrayViewFromImage(truth_img) != 0
            per_case.append(self.case_scores(pred, truth, truth_img))
        return self.aggregate(per_case)

    def case_scores(self, pred: np.ndarray, truth: np.ndarray, truth_img: sitk.Image) -> dict[str, float]:
        """One case's metrics; by default :attr:`case_metrics` with the ground truth's spacing."""
        return self.case_metrics(pred, truth, zyx_spacing(truth_img))

    def check_case(self, submission: CaseTable, case_id: str, public_dir: Path) -> None:
        self.read_prediction(submission.file(case_id, "predicted_mask_path"), case_id,
                             header_geometry(self.test_input_path(public_dir, case_id)))

    def write_baseline(self, public_dir: Path, out_dir: Path) -> None:
        """An all-background mask on each test image's grid."""
        self.write_empty_masks(public_dir, out_dir)
