"""PANTHER grader, tasks 1 and 2: binary pancreatic-tumour masks on MRI.

The organisers' metrics, computed with the DeepMind surface-distance definitions. The ground truth is
the tumour alone: the prepared answers keep label 1 of the release (label 2, the pancreas, becomes 0,
as the leaderboard scored the tumour alone), so the organisers' rule "every non-zero ground-truth voxel is tumour" holds on them exactly
as on their tumour-only test labels.

Two spacing pairings. The organisers' code hands SimpleITK's (x, y, z) spacing to
the (z, y, x) array, so the slice axis gets the x spacing and x the slice spacing. The leaderboard's
teams were scored that way, so the **ranked** ``hd95``, ``masd`` and ``msd`` use that pairing: ranking
physically correct distances against theirs would compare two scales (×0.4 to ×3.6 apart on thick-slice
MRI). The physically correct values (spacing reversed to the array's axes) are reported beside them as
``hd95_true_axes``, ``masd_true_axes`` and ``msd_true_axes``, which never rank. ``dsc`` and the volumes
(``rmse``) do not depend on the pairing.
"""

from __future__ import annotations

import math
from pathlib import Path
from statistics import mean

import numpy as np
import SimpleITK as sitk

from ...errors import InvalidSubmission
from ...graders.binary import BinaryMaskGrader
from ...medimage.geometry import image_like, nonzero_mask, write_image
from ...metrics.hausdorff import image_diagonal
from ...metrics.surfel import (
    average_surface_distance,
    compute_surface_distances,
    robust_hausdorff,
    surface_dice_at_tolerance,
    volumetric_dice,
)
from ...submission import read_answers

SUFFIXES = (".mha", ".nii.gz")
SURFACE_DICE_TOLERANCE_MM = 5.0
HD_PERCENT = 95.0
KEYS = ("dsc", "msd", "hd95", "masd", "rmse")
#: the surface metrics whose value depends on how spacing is paired with the array axes
SURFACE_KEYS = ("msd", "hd95", "masd")
#: suffix of the physically correct values reported beside the ranked (organisers' pairing) ones
TRUE_AXES = "_true_axes"


def require_suffix(path: Path, case_id: str) -> None:
    if not path.name.lower().endswith(SUFFIXES):
        raise InvalidSubmission(f"case {case_id!r}: prediction {path.name!r} must be .mha or .nii.gz")


def tumour_mask(img: sitk.Image, case_id: str) -> np.ndarray:
    """Prediction voxels → tumour mask under PANTHER's value-set rule.

    Allowed value sets: {0}, {1}, {0, 1}, or two values one of which is 0 (then non-zero = tumour).
    Checked in one pass (every non-zero voxel must equal the first one) instead of ``np.unique``,
    which would sort the whole volume.
    """
    mask = nonzero_mask(img, case_id)   # voxel type and finiteness checked there
    arr = sitk.GetArrayViewFromImage(img)
    if not mask.any():
        return mask
    values = arr[mask]
    first = values[0]
    if not (values == first).all():
        found = np.unique(arr)
        shown = ", ".join(repr(v.item()) for v in found[:6]) + (", ..." if found.size > 6 else "")
        raise InvalidSubmission(
            f"case {case_id!r}: prediction has {found.size} distinct values ({shown}); allowed value sets "
            "are {0}, {1}, {0, 1} or two values one of which is 0")
    if mask.all() and first != 1:
        raise InvalidSubmission(
            f"case {case_id!r}: prediction holds the single value {first.item()!r}; a one-value mask must be "
            "all 0 or all 1")
    return mask


def surface_metrics(pred: np.ndarray, truth: np.ndarray, spacing: tuple[float, float, float]) -> dict[str, float]:
    """msd, hd95 and masd of one case with ``spacing`` paired element-wise with the array's axes.

    Uniform predictions (all 0 or all 1) and empty ground truths get the organisers' fixed values (and
    our extension for the latter) instead of the inf/NaN that the surface-distance package would
    produce: ``hd95 = masd`` = the image diagonal under the same pairing.
    """
    n_pred = int(np.count_nonzero(pred))
    if n_pred == 0 or n_pred == pred.size or not truth.any():
        diagonal = image_diagonal(truth.shape, spacing)
        return {"msd": 0.0, "hd95": diagonal, "masd": diagonal}
    sd = compute_surface_distances(truth, pred, spacing)
    gt_to_pred, pred_to_gt = average_surface_distance(sd)
    return {"msd": surface_dice_at_tolerance(sd, SURFACE_DICE_TOLERANCE_MM),
            "hd95": robust_hausdorff(sd, HD_PERCENT),
            "masd": (gt_to_pred + pred_to_gt) / 2.0}


def case_metrics(pred: np.ndarray, truth: np.ndarray, spacing_zyx: tuple[float, float, float]) -> dict[str, float]:
    """dsc, the surface metrics under both pairings and the two tumour volumes (mm³) of one case.

    ``spacing_zyx`` is the ground truth's spacing in array-axis order; the organisers' pairing (ranked)
    is the same numbers in SimpleITK's (x, y, z) order laid on the (z, y, x) array.
    """
    pred, truth = np.asarray(pred, dtype=bool), np.asarray(truth, dtype=bool)
    spacing_zyx = tuple(float(s) for s in spacing_zyx)  # type: ignore[assignment]
    organisers = tuple(reversed(spacing_zyx))
    voxel_mm3 = float(np.prod(spacing_zyx))
    v_gt = int(np.count_nonzero(truth)) * voxel_mm3
    n_pred = int(np.count_nonzero(pred))
    uniform = n_pred == 0 or n_pred == pred.size
    out = {"dsc": 0.0 if uniform or v_gt == 0.0 else volumetric_dice(truth, pred)}
    out.update(surface_metrics(pred, truth, organisers))  # type: ignore[arg-type]
    if organisers == spacing_zyx:  # isotropic in x and z: both pairings are the same numbers
        true_axes = {key: out[key] for key in SURFACE_KEYS}
    else:
        true_axes = surface_metrics(pred, truth, spacing_zyx)
    out.update({key + TRUE_AXES: value for key, value in true_axes.items()})
    out.update({"v_pred": 0.0 if uniform else n_pred * voxel_mm3, "v_gt": v_gt})
    return out


def aggregate(per_case: list[dict[str, float]]) -> dict[str, float]:
    """Means over cases; ``rmse`` = sqrt(mean((V_pred − V_gt)²)) in mm³ (tumour-burden error)."""
    means = ("dsc", *SURFACE_KEYS, *(key + TRUE_AXES for key in SURFACE_KEYS))
    out = {key: float(mean(c[key] for c in per_case)) for key in means if key in per_case[0]}
    out["rmse"] = math.sqrt(mean((c["v_pred"] - c["v_gt"]) ** 2 for c in per_case))
    return out


class PancreaticTumour(BinaryMaskGrader):
    """One grader for both PANTHER tasks: they share the submission format and the metrics."""

    test_input = "test/images/{}.mha"
    prediction_file = "predictions/{}.mha"
    check_format = staticmethod(require_suffix)
    foreground = staticmethod(tumour_mask)
    case_metrics = staticmethod(case_metrics)
    aggregate = staticmethod(aggregate)

    def write_perfect(self, answers_dir: Path, out_dir: Path) -> None:
        """The ground truth as a 0/1 mask (the answers already hold the tumour only; ``!= 0`` keeps it so)."""
        answers = read_answers(answers_dir, self.id_column, self.answer_columns)

        def write(case_id: str, path: Path) -> None:
            truth_img = sitk.ReadImage(str(answers_dir / answers.value(case_id, "label_path")))
            binary = (sitk.GetArrayViewFromImage(truth_img) != 0).astype(np.uint8)
            write_image(image_like(binary, truth_img), path)

        self.write_files(out_dir, answers.ids, write)
