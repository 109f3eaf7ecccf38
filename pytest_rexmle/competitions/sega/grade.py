"""SEG.A 2023 grader: binary aortic-vessel-tree masks on CTA, NRRD files.

The organisers published no evaluation code for SEG.A's metrics, so their stated definitions apply:
per-case Dice and symmetric Hausdorff distance in mm (6-connected surface voxels), aggregated as
medians (the leaderboard's ``*_50pc`` columns).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import SimpleITK as sitk

from ...errors import InvalidSubmission
from ...graders.binary import BinaryMaskGrader
from ...medimage.geometry import nonzero_mask
from ...metrics.hausdorff import hausdorff_mm
from ...metrics.overlap import dice


def require_nrrd(path: Path, case_id: str) -> None:
    if not path.name.lower().endswith(".nrrd"):
        raise InvalidSubmission(f"case {case_id!r}: prediction {path.name!r} must be NRRD (.nrrd or .seg.nrrd)")


def vessel_mask(img: sitk.Image, case_id: str) -> np.ndarray:
    """Any non-zero voxel is vessel; the voxels must still be finite numbers."""
    return nonzero_mask(img, case_id)


def case_metrics(pred: np.ndarray, truth: np.ndarray, spacing_zyx: tuple[float, float, float]) -> dict[str, float]:
    """DSC (both empty → 1, one empty → 0) and symmetric HD in mm (empty rules in :func:`hausdorff_mm`)."""
    return {"dsc": dice(pred, truth, empty=1.0), "hd": hausdorff_mm(pred, truth, spacing_zyx)}


def aggregate(per_case: list[dict[str, float]]) -> dict[str, float]:
    """Medians (rank), means and standard deviations (extras) over test cases.

    The median of an even count is the mean of the two middle values (``numpy.median``). The standard
    deviations are population standard deviations (``ddof=0``): no estimator is named for SEG.A and these
    describe the graded test set itself, not a sample from a larger one.
    """
    hd = np.array([c["hd"] for c in per_case], dtype=np.float64)
    dsc = np.array([c["dsc"] for c in per_case], dtype=np.float64)
    return {
        "hd_50pc": float(np.median(hd)), "dsc_50pc": float(np.median(dsc)),
        "hd_mean": float(np.mean(hd)), "dsc_mean": float(np.mean(dsc)),
        "hd_std": float(np.std(hd, ddof=0)), "dsc_std": float(np.std(dsc, ddof=0)),
    }


class AorticVesselTree(BinaryMaskGrader):
    test_input = "test/images/{}.nrrd"
    prediction_file = "predictions/{}.seg.nrrd"
    check_format = staticmethod(require_nrrd)
    foreground = staticmethod(vessel_mask)
    case_metrics = staticmethod(case_metrics)
    aggregate = staticmethod(aggregate)


