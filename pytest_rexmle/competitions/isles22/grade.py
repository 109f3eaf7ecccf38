"""ISLES'22 grader: binary infarct masks on the DWI grid, organisers' metrics.

Imaging and metric modules are imported where used: the baseline (empty NIfTI masks) needs neither.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from statistics import mean
from typing import TYPE_CHECKING

from ...errors import InvalidSubmission
from ...graders.base import Grader
from ...medimage.geometry import header_geometry, nonzero_mask, read_image, voxel_volume_mm3
from ...metrics.components import lesion_detection
from ...metrics.overlap import dice
from ...metrics.parallel import both
from ...metrics.surface import bounding_box, union_box
from ...submission import CaseTable

if TYPE_CHECKING:
    import numpy as np  # start-up: numpy only where this runs

    from ...medimage.geometry import Geometry

NIFTI_SUFFIXES = (".nii", ".nii.gz")


def _require_nifti(path: Path, case_id: str) -> None:
    if not path.name.endswith(NIFTI_SUFFIXES):
        raise InvalidSubmission(f"case {case_id!r}: prediction {path.name!r} must be NIfTI (.nii or .nii.gz)")


def lesion_mask(path: Path, ref: Geometry, case_id: str) -> np.ndarray:
    """The prediction's lesion voxels: any non-zero voxel, floats included.

    The organisers binarise with ``!= 0`` whatever the voxel type, so a float mask with values in (0, 1]
    is scored, not refused for non-integer values; NaN and ±inf stay invalid.
    """
    return nonzero_mask(read_image(path, case_id, ref), case_id)


def case_metrics(pred: np.ndarray, truth: np.ndarray, voxel_ml: float) -> dict[str, float]:
    import numpy as np  # start-up: numpy only where this runs

    lesions = lesion_detection(pred, truth)
    return {
        "dice": dice(pred, truth, empty=1.0),
        "lesion_f1": lesions["lesion_f1"],
        "lesion_count_diff": lesions["lesion_count_diff"],
        "abs_volume_diff": abs(int(np.count_nonzero(truth)) - int(np.count_nonzero(pred))) * voxel_ml,
    }


class StrokeLesion(Grader):
    prediction_format = "volume"
    prediction_columns = ("predicted_mask_path",)
    answer_columns = ("mask_path",)
    prediction_file = "predictions/{}.nii.gz"
    test_input = "test/{}_dwi.nii.gz"
    keys = ("dice", "lesion_f1", "lesion_count_diff", "abs_volume_diff")

    def score(self, submission: CaseTable, answers: CaseTable) -> dict[str, float]:
        import SimpleITK as sitk  # start-up: SimpleITK only where this runs

        per_case = []
        for case_id, path, truth_path in self.case_files(submission, answers):
            _require_nifti(path, case_id)
            ref = header_geometry(truth_path)   # the header: both volumes then decode on two cores
            truth_img, pred = both(partial(read_image, truth_path, case_id), partial(lesion_mask, path, ref, case_id))
            truth = sitk.GetArrayViewFromImage(truth_img) != 0
            # every metric counts voxels or components, so the union box of both foregrounds loses nothing
            box = union_box(bounding_box(pred), bounding_box(truth)) or (slice(0, 1),) * pred.ndim
            per_case.append(case_metrics(pred[box], truth[box], voxel_volume_mm3(truth_img) / 1000.0))
        return {k: mean(c[k] for c in per_case) for k in self.keys}

    def check_case(self, submission: CaseTable, case_id: str, public_dir: Path) -> None:
        path = submission.file(case_id, "predicted_mask_path")
        _require_nifti(path, case_id)
        lesion_mask(path, header_geometry(self.test_input_path(public_dir, case_id)), case_id)

    def write_baseline(self, public_dir: Path, out_dir: Path) -> None:
        """An empty mask on each test case's DWI grid."""
        self.write_empty_masks(public_dir, out_dir)


