"""ISLES'22 grader: binary infarct masks on the DWI grid, organisers' metrics."""

from __future__ import annotations

from pathlib import Path
from statistics import mean
from typing import TYPE_CHECKING

from ...errors import InvalidSubmission
from ...graders.binary import BinaryMaskGrader
from ...medimage.geometry import nonzero_mask, voxel_volume_mm3
from ...metrics.components import lesion_detection
from ...metrics.overlap import dice
from ...metrics.surface import bounding_box, union_box

if TYPE_CHECKING:
    import numpy as np  # start-up: numpy only where this runs
    import SimpleITK as sitk

NIFTI_SUFFIXES = (".nii", ".nii.gz")
KEYS = ("dice", "lesion_f1", "lesion_count_diff", "abs_volume_diff")


def _require_nifti(path: Path, case_id: str) -> None:
    if not path.name.endswith(NIFTI_SUFFIXES):
        raise InvalidSubmission(f"case {case_id!r}: prediction {path.name!r} must be NIfTI (.nii or .nii.gz)")


def lesion_mask(img: sitk.Image, case_id: str) -> np.ndarray:
    """The prediction's lesion voxels: any non-zero voxel, floats included.

    The organisers binarise with ``!= 0`` whatever the voxel type, so a float mask with values in (0, 1]
    is scored, not refused for non-integer values; NaN and ±inf stay invalid.
    """
    return nonzero_mask(img, case_id)


def case_metrics(pred: np.ndarray, truth: np.ndarray, voxel_ml: float) -> dict[str, float]:
    import numpy as np  # start-up: numpy only where this runs

    lesions = lesion_detection(pred, truth)
    return {
        "dice": dice(pred, truth, empty=1.0),
        "lesion_f1": lesions["lesion_f1"],
        "lesion_count_diff": lesions["lesion_count_diff"],
        "abs_volume_diff": abs(int(np.count_nonzero(truth)) - int(np.count_nonzero(pred))) * voxel_ml,
    }


def aggregate(per_case: list[dict[str, float]]) -> dict[str, float]:
    return {k: mean(c[k] for c in per_case) for k in KEYS}


class StrokeLesion(BinaryMaskGrader):
    answer_columns = ("mask_path",)
    prediction_file = "predictions/{}.nii.gz"
    test_input = "test/{}_dwi.nii.gz"
    check_format = staticmethod(_require_nifti)
    foreground = staticmethod(lesion_mask)
    aggregate = staticmethod(aggregate)

    def case_scores(self, pred: np.ndarray, truth: np.ndarray, truth_img: sitk.Image) -> dict[str, float]:
        # every metric counts voxels or components, so the union box of both foregrounds loses nothing
        box = union_box(bounding_box(pred), bounding_box(truth)) or (slice(0, 1),) * pred.ndim
        return case_metrics(pred[box], truth[box], voxel_volume_mm3(truth_img) / 1000.0)
