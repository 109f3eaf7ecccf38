"""TopCoW task 1 and TopBrain label volumes: reading, cropping, per-label scores, TopCoW's case scores.

The NumPy / SimpleITK half of :mod:`.grade` (see its docstring for why scoring works on the union of
the two foreground boxes). It lives apart, imported where volumes are scored, so that the box and edge
graders, the baselines and the validator's header checks (the sample agent and ``rexmle validate``
start per item) import neither.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import Any

import numpy as np
import SimpleITK as sitk

from ...errors import InvalidSubmission
from ...medimage.geometry import Geometry, header_geometry, label_values, read_image
from ...metrics.components import label_components
from ...metrics.crop import relative_box
from ...metrics.labelindex import LabelIndex, box_volume
from ...metrics.parallel import both, parallel_map
from ...metrics.surface import bounding_box, hd95, union_box
from ...metrics.topology import (
    ANTERIOR_LABELS,
    POSTERIOR_LABELS,
    TN,
    balanced_accuracy,
    cldice_from_skeletons,
    detection,
    edge_lists,
    label_adjacency,
    lr_flipped,
    mean_detection_f1,
    region_matches,
    skeleton_xyz,
    variant,
)

GROUP2_LABELS = (8, 9, 10, 15)
HD95_ABSENT_MM = 90.0
MASK_SUFFIXES = (".nii.gz", ".nii", ".mha")


def require_mask_format(path: Path, case_id: str) -> None:
    if not path.name.lower().endswith(MASK_SUFFIXES):
        raise InvalidSubmission(f"case {case_id!r}: prediction {path.name!r} must be NIfTI (.nii, .nii.gz) or MHA (.mha)")


def prediction_image(path: Path, ref: sitk.Image | Geometry, case_id: str) -> sitk.Image:
    """Read a predicted label volume and check its format and geometry against ``ref``."""
    require_mask_format(path, case_id)
    return read_image(path, case_id, ref)  # header checked against ref before any voxel is decoded


def _crop_labels(img: sitk.Image, box: tuple[slice, ...], case_id: str, allowed: frozenset[int]) -> np.ndarray:
    """The shared value check (:func:`.label_values`) on a (z, y, x) crop, returned as uint8: the crop is
    copied once out of the image's own buffer (``img`` stays alive while its view is read)."""
    crop = np.array(sitk.GetArrayViewFromImage(img)[box])
    return label_values(crop, case_id, set(allowed)).astype(np.uint8, copy=False)


def foreground_box(view: np.ndarray) -> tuple[slice, ...] | None:
    """Tight box of the non-zero voxels of a (z, y, x) array, None when it is all zero.

    Unsigned integers (every label file we have seen) take two maximum projections, the fastest full
    passes NumPy has (an xy plane and a per-slice maximum); other types compare with 0 first.
    """
    if view.dtype.kind != "u" or view.ndim != 3:
        return bounding_box(view != 0)
    plane = view.max(axis=0)
    per_slice = view.reshape(view.shape[0], -1).max(axis=1)
    hits = [np.flatnonzero(per_slice), np.flatnonzero(plane.max(axis=1)), np.flatnonzero(plane.max(axis=0))]
    if hits[0].size == 0:
        return None
    return tuple(slice(int(h[0]), int(h[-1]) + 1) for h in hits)


def _foreground_box(*views: np.ndarray, boxes: tuple = ()) -> tuple[slice, ...]:
    """Union box of the non-zero voxels (``boxes``: theirs, already found); a single voxel when everything
    is zero (to still check dtype)."""
    box = union_box(*(boxes or [foreground_box(v) for v in views]))
    return box if box is not None else (slice(0, 1),) * 3


def check_prediction(path: Path, ref: Geometry, case_id: str, allowed: frozenset[int]) -> None:
    """Public-side check of one predicted volume: format, geometry, voxel type and label values."""
    img = prediction_image(path, ref, case_id)
    _crop_labels(img, _foreground_box(sitk.GetArrayViewFromImage(img)), case_id, allowed)


def load_pair(path: Path, truth_img: sitk.Image, case_id: str, allowed: frozenset[int]
              ) -> tuple[np.ndarray, np.ndarray]:
    """(prediction, ground truth) as uint8 (z, y, x) arrays cropped to the union of their foregrounds."""
    pred_img = prediction_image(path, truth_img, case_id)
    return crop_pair(pred_img, truth_img, case_id, allowed)


def crop_pair(pred_img: sitk.Image, truth_img: sitk.Image, case_id: str, allowed: frozenset[int],
              boxes: tuple = ()) -> tuple[np.ndarray, np.ndarray]:
    """Both volumes cropped to the union of their foreground boxes (``boxes``: already computed ones)."""
    truth_view = sitk.GetArrayViewFromImage(truth_img)
    box = _foreground_box(sitk.GetArrayViewFromImage(pred_img), truth_view, boxes=boxes)
    return _crop_labels(pred_img, box, case_id, allowed), np.array(truth_view[box], dtype=np.uint8)


def read_pair(pred_path: Path, truth_path: Path, case_id: str, allowed: frozenset[int]
              ) -> tuple[np.ndarray, np.ndarray, sitk.Image]:
    """Decode a prediction and its ground truth on two cores; return both crops and the truth image.

    The prediction is checked against the ground truth's header (read first, without voxels), so
    the two decodes are independent; each thread also finds its volume's foreground box.
    """
    ref = header_geometry(truth_path)

    def truth_part():
        img = read_image(truth_path, case_id)
        return img, foreground_box(sitk.GetArrayViewFromImage(img))

    def pred_part():
        img = prediction_image(pred_path, ref, case_id)
        return img, foreground_box(sitk.GetArrayViewFromImage(img))

    (truth_img, truth_box), (pred_img, pred_box) = both(truth_part, pred_part)
    pred, truth = crop_pair(pred_img, truth_img, case_id, allowed, (pred_box, truth_box))
    return pred, truth, truth_img


@dataclass(frozen=True)
class LabelScores:
    """Per-label quantities of one case (TopCoW task 1, TopBrain)."""

    n_pred: int
    n_truth: int
    n_both: int
    b0_pred: int
    b0_truth: int
    hd95: float
    cldice: float | None = None

    @property
    def dice(self) -> float:
        if self.n_pred == 0 or self.n_truth == 0:
            return 0.0
        return 2.0 * self.n_both / (self.n_pred + self.n_truth)

    @property
    def b0_error(self) -> int:
        return abs(self.b0_pred - self.b0_truth)

    @property
    def detection(self) -> str:
        return detection(self.n_pred, self.n_truth, self.n_both)


def _label_task(pred: np.ndarray, truth: np.ndarray, index_p: LabelIndex, index_g: LabelIndex, label: int,
                spacing: Sequence[float], hd95_absent: float, with_cldice: bool):
    """The per-label work, on the union of the label's two boxes (masks made once, shared by all)."""
    box_p, box_g = index_p.box(label), index_g.box(label)
    box = union_box(box_p, box_g)
    assert box is not None, label   # a label of L is in one volume at least

    def run() -> LabelScores:
        p, g = pred[box] == label, truth[box] == label
        n_p, n_g = index_p.count(label), index_g.count(label)
        # one labelling per mask: its count is the b0 number, its components split the skeleton's work
        parts_p = label_components(p) if n_p else None
        parts_g = label_components(g) if n_g else None
        cl = None
        if with_cldice:
            cl = 0.0
            if parts_p and parts_g and box_p and box_g:
                cl = cldice_from_skeletons(p, g, skeleton_xyz(p, parts_p, relative_box(box_p, box)),
                                           skeleton_xyz(g, parts_g, relative_box(box_g, box)))
        return LabelScores(
            n_pred=n_p, n_truth=n_g, n_both=int(np.count_nonzero(p & g)),
            b0_pred=parts_p[1] if parts_p else 0, b0_truth=parts_g[1] if parts_g else 0,
            hd95=hd95(p, g, spacing, hd95_absent), cldice=cl)

    return run, box_volume(box) * (3 if with_cldice else 1)


def _run_tasks(tasks: list) -> list:
    """Run (callable, cost) pairs on all cores, most expensive first; results in task order."""
    return parallel_map(lambda task: task[0](), tasks, cost=lambda task: task[1])


def label_indexes(pred: np.ndarray, truth: np.ndarray) -> tuple[LabelIndex, LabelIndex]:
    """The two volumes' sparse indexes, built side by side."""
    index_p, index_g = parallel_map(LabelIndex.of, (pred, truth))
    return index_p, index_g


def label_scores(pred: np.ndarray, truth: np.ndarray, spacing: Sequence[float], hd95_absent: float,
                 with_cldice: bool = False, also: Sequence[tuple[Callable[[], Any], int]] = (),
                 indexes: tuple[LabelIndex, LabelIndex] | None = None
                 ) -> tuple[dict[int, LabelScores], list[Any]]:
    """Scores for every label of L = labels present in G or P, each on its own bounding box, and the
    results of ``also`` ((callable, cost) pairs: other work of the case, run in the same pool).

    One sparse index per volume (:class:`LabelIndex`; ``indexes`` when the caller built them with
    :func:`label_indexes`) gives every label's box and voxel count, so the per-label work is
    proportional to the vessel's size, not to the volume's; labels run in parallel with the case's
    other work.
    """
    index_p, index_g = indexes or label_indexes(pred, truth)
    labels = sorted(set(index_p.labels) | set(index_g.labels))
    tasks = [_label_task(pred, truth, index_p, index_g, label, spacing, hd95_absent, with_cldice)
             for label in labels]
    results = _run_tasks([*also, *tasks])
    return dict(zip(labels, results[len(also):], strict=True)), results[:len(also)]


def adjacency_task(labels: np.ndarray, index: LabelIndex) -> tuple[Callable[[], dict[int, set[int]]], int]:
    """:func:`label_adjacency` of a whole volume as a (callable, cost) pair for :func:`_run_tasks`: 13
    look-ups per foreground voxel, costed like the per-label work of a box 13 times their number."""
    return (lambda: label_adjacency(labels, index)), 13 * index.flat.size


def class_means(scores: dict[int, LabelScores], with_cldice: bool = False) -> dict[str, float]:
    """Case ``dice``, ``b0_error``, ``hd95`` (and per-label ``cldice``): means over L, all 0 if L is empty."""
    keys = ["dice", "b0_error", "hd95", *(["cldice"] if with_cldice else [])]
    if not scores:
        return {k: 0.0 for k in keys}
    return {k: float(mean(float(getattr(s, k)) for s in scores.values())) for k in keys}


@dataclass(frozen=True)
class CowCase:
    """Everything one TopCoW case contributes to the aggregates."""

    means: dict[str, float]
    detections: dict[int, str]
    truth_variants: tuple[str, str]
    pred_variants: tuple[str, str]
    matched: tuple[bool, bool]


def score_cow_case(pred: np.ndarray, truth: np.ndarray, spacing: Sequence[float]) -> CowCase:
    """All TopCoW task-1 per-case quantities from two (z, y, x) label arrays on the same grid.

    Shared products are made once: one sparse index per volume (boxes, counts, median x), one
    skeleton per merged mask. The two skeletons and the per-label work run together on all cores.
    """
    index_p, index_g = label_indexes(pred, truth)
    labels = sorted(set(index_p.labels) | set(index_g.labels))
    fg_p, fg_g = pred != 0, truth != 0
    tasks = [(lambda: skeleton_xyz(fg_p), 4 * box_volume(bounding_box(fg_p))),
             (lambda: skeleton_xyz(fg_g), 4 * box_volume(bounding_box(fg_g))),
             adjacency_task(pred, index_p), adjacency_task(truth, index_g)]
    tasks += [_label_task(pred, truth, index_p, index_g, label, spacing, HD95_ABSENT_MM, False) for label in labels]
    skel_p, skel_g, adj_p, adj_g, *per_label = _run_tasks(tasks)
    scores = dict(zip(labels, per_label, strict=True))
    means = class_means(scores)
    means["cldice"] = cldice_from_skeletons(fg_p, fg_g, skel_p, skel_g)
    detections = {label: scores[label].detection if label in scores else TN
                  for label in (*GROUP2_LABELS, *ANTERIOR_LABELS, *POSTERIOR_LABELS)}
    b0_p = {label: s.b0_pred for label, s in scores.items()}
    b0_g = {label: s.b0_truth for label, s in scores.items()}
    ant_p, pos_p = edge_lists(adj_p)
    ant_g, pos_g = edge_lists(adj_g)
    matched = tuple(region_matches(region, detections, adj_p, adj_g, b0_p, b0_g,
                                   lr_flipped(pred, region, adj_p.keys(), index_p.median_x))
                    for region in ("anterior", "posterior"))
    return CowCase(means, detections,
                   (variant("anterior", ant_g), variant("posterior", pos_g)),
                   (variant("anterior", ant_p), variant("posterior", pos_p)),
                   matched)  # type: ignore[arg-type]


def aggregate_cow(cases: Sequence[CowCase]) -> dict[str, float]:
    """Task 1's aggregates over the test cases."""
    out = {k: float(mean(c.means[k] for c in cases)) for k in ("dice", "cldice", "b0_error", "hd95")}
    out["f1_grp2"] = mean_detection_f1((c.detections for c in cases), GROUP2_LABELS)
    for i, region in enumerate(("anterior", "posterior")):
        truth = [c.truth_variants[i] for c in cases]
        out[f"{region}_graph_acc"] = balanced_accuracy(truth, [c.pred_variants[i] for c in cases])
        out[f"{region}_topology"] = balanced_accuracy(
            truth, [t if c.matched[i] else "FAIL" for t, c in zip(truth, cases, strict=True)])
    return out
