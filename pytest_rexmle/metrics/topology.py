"""Topology metrics of the TopCoW / TopBrain organisers.

Arrays are SimpleITK's (z, y, x) NumPy view unless a function says otherwise; the organisers'
definitions that depend on axis order (Lee skeletons, the left-right test on the x index) are applied
on the (x, y, z) order they use.

* components: 26-connectivity (scipy ``ndimage.label`` with a full 3×3×3 structure: the same count as
  SimpleITK's fully connected ``ConnectedComponent`` and scikit-image ``label(connectivity=3)``);
* clDice: scikit-image's Lee thinning (``skeletonize``) of the (x, y, z) array, each skeleton computed
  on its own mask's bounding box (Lee thinning is translation invariant and local; scikit-image pads
  by one voxel itself), the two skeletons on two cores;
* 26-adjacency of labels: the 13 "forward" neighbours of every foreground voxel, gathered in one
  vectorised pass each, instead of the organisers' per-voxel neighbourhood loops; both give the set of
  label pairs with 26-neighbour voxels;
* detection by IoU ≥ 0.25, the CoW edge lists / variant strings, topology matching, the flip test,
  balanced accuracy (scikit-learn semantics, re-implemented) and the TopBrain neighbour error.
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from statistics import mean

import numpy as np

from .compiled import load_extension
from .components import count_components, label_components
from .cow_anatomy import (  # noqa: F401
    ACOM,
    ANTERIOR_EDGES,
    ANTERIOR_LABELS,
    BA,
    L_ACA,
    L_ICA,
    L_MCA,
    L_PCA,
    L_PCOM,
    POSTERIOR_EDGES,
    POSTERIOR_LABELS,
    R_ACA,
    R_ICA,
    R_MCA,
    R_PCA,
    R_PCOM,
    THIRD_A2,
)
from .crop import bounding_box
from .labelindex import LabelIndex, box_volume

IOU_THRESHOLD = 0.25
TP, FP, FN, TN = "TP", "FP", "FN", "TN"

# the 13 offsets that, with their negatives, make up the 26-neighbourhood
_FORWARD_OFFSETS = [o for o in itertools.product((-1, 0, 1), repeat=3) if o > (0, 0, 0)]


# -- components and clDice -----------------------------------------------------------------------
#: number of 26-connected components, 0 for an empty mask (see the module docstring)
components = count_components


@functools.cache
def _lee_kernel() -> Callable[[np.ndarray], np.ndarray]:
    """scikit-image's compiled Lee thinning, loaded without importing ``skimage.morphology`` (why:
    :mod:`.compiled`); anything unexpected falls back to ``skeletonize``, which runs the same kernel."""
    try:
        module = load_extension("skimage.morphology._skeletonize_lee_cy")
        thin = module._compute_thin_image

        def kernel(padded: np.ndarray) -> np.ndarray:
            return np.asarray(thin(padded))

        probe = np.zeros((3, 3, 7), np.uint8)   # a one-voxel rod is its own skeleton
        probe[1, 1, 1:6] = 1
        if not np.array_equal(kernel(probe.copy()), probe):
            raise ImportError("the compiled Lee kernel does not behave as expected")
        return kernel
    except Exception:  # any surprise: the public API, same result, slower import
        return lambda padded: np.pad(_public_skeleton(padded[1:-1, 1:-1, 1:-1]), 1)


def _public_skeleton(mask: np.ndarray) -> np.ndarray:
    from skimage.morphology import skeletonize  # start-up: skimage only where this runs

    return np.asarray(skeletonize(np.ascontiguousarray(mask)), dtype=bool)


def _thin_xyz(crop: np.ndarray) -> np.ndarray:
    """Lee thinning of the (x, y, z) transpose of a (z, y, x) boolean crop, returned in (z, y, x)."""
    padded = np.zeros(tuple(n + 2 for n in crop.shape[::-1]), np.uint8)
    padded[1:-1, 1:-1, 1:-1] = crop.transpose(2, 1, 0)
    thin = _lee_kernel()(padded)
    return np.ascontiguousarray(thin[1:-1, 1:-1, 1:-1].transpose(2, 1, 0) != 0)


def skeleton_xyz(mask: np.ndarray, components: tuple[np.ndarray, int] | None = None,
                 box: tuple[slice, ...] | None = None) -> tuple[np.ndarray, tuple[slice, ...]] | None:
    """Lee skeleton of the (x, y, z) transpose of a (z, y, x) mask, on the mask's own bounding box.

    Returns ``(skeleton, box)``: the skeleton in (z, y, x) order covering ``mask[box]``, or None for an
    empty mask. Thinning is translation invariant and looks only at 3×3×3 neighbourhoods (the kernel
    works on a one-voxel zero border, as ``skeletonize`` pads), so the tight box gives the skeleton of the
    whole array; its cost grows with the box's volume, not with the foreground. For the same reason
    26-connected components thin independently (no voxel of one is in a neighbourhood of another, and
    thinning only removes voxels), so scattered components, e.g. a prediction's stray voxels far from
    the vessels, are thinned each on its own box instead of on the box spanning them all.

    A caller that has them already passes the mask's ``components`` (:func:`.label_components` of the
    whole mask, as the b0 count takes them) and its tight ``box``: the same skeleton without a second
    labelling or the projections that find the box.
    """
    mask = np.asarray(mask)
    if mask.dtype != bool:
        mask = mask != 0
    if box is None:
        box = bounding_box(mask)
    if box is None:
        return None
    crop = mask[box]
    labels: np.ndarray | None
    if components is not None:
        labels, n = components[0][box], components[1]
    else:
        # components can only have clearly smaller boxes when some plane across the box is empty; a
        # single connected vessel tree (the usual case) skips the labelling
        planes_empty = any(not crop.any(axis=tuple(a for a in range(3) if a != axis)).all() for axis in range(3))
        labels, n = label_components(crop) if planes_empty else (None, 1)
    if n > 1 and labels is not None:
        index = LabelIndex.of(labels)
        boxes = [index.box(c) for c in index.labels]
        if sum(box_volume(b) for b in boxes) <= 0.75 * crop.size:
            out = np.zeros(crop.shape, bool)
            for c, b in zip(index.labels, boxes, strict=True):
                out[b] |= _thin_xyz(labels[b] == c)
            return out, box
    return _thin_xyz(crop), box


def _cl_score(skeleton: tuple[np.ndarray, tuple[slice, ...]] | None, volume: np.ndarray) -> float:
    """|S ∩ V| / |S| with S given on its own box (0 for an empty skeleton)."""
    if skeleton is None:
        return 0.0
    sk, box = skeleton
    n = int(np.count_nonzero(sk))
    return 0.0 if n == 0 else int(np.count_nonzero(sk & (np.asarray(volume)[box] != 0))) / n


def cldice_from_skeletons(pred: np.ndarray, truth: np.ndarray, skel_pred, skel_truth) -> float:
    """clDice of two binary (z, y, x) masks from their :func:`skeleton_xyz` skeletons (of the (x, y, z)
    transposes, as the organisers): tprec = |S_P ∩ G| / |S_P|, tsens = |S_G ∩ P| / |S_G| (0 for an
    empty skeleton); clDice = 2·tprec·tsens / (tprec + tsens), 0 when the sum is 0."""
    tprec = _cl_score(skel_pred, truth)
    tsens = _cl_score(skel_truth, pred)
    if tprec + tsens == 0:
        return 0.0
    return 2.0 * tprec * tsens / (tprec + tsens)


# -- detection -----------------------------------------------------------------------------------
def detection(n_pred: int, n_truth: int, n_both: int) -> str:
    """TP/FN (label in G: IoU ≥ 0.25 or not), FP/TN (label not in G: in P or not), from voxel counts."""
    if n_truth > 0:
        iou = n_both / (n_pred + n_truth - n_both)
        return TP if iou >= IOU_THRESHOLD else FN
    return FP if n_pred > 0 else TN


def f1_from_counts(tp: int, fp: int, fn: int) -> float:
    """2TP / (2TP + FP + FN), 0 when the denominator is 0 (TopCoW's ``f1_grp2``, TopBrain's ``f1_side_road``)."""
    denominator = 2 * tp + fp + fn
    return 0.0 if denominator == 0 else 2.0 * tp / denominator


def mean_detection_f1(cases: Iterable[Mapping[int, str]], labels: Iterable[int]) -> float:
    """Mean over ``labels`` of :func:`f1_from_counts` pooled over the cases (each maps label → TP/FP/FN/TN)."""
    cases = list(cases)
    f1s = []
    for label in labels:
        counts = Counter(case[label] for case in cases)
        f1s.append(f1_from_counts(counts[TP], counts[FP], counts[FN]))
    return float(mean(f1s))


# -- label adjacency -----------------------------------------------------------------------------
def label_adjacency(labels: np.ndarray, index: LabelIndex | None = None) -> dict[int, set[int]]:
    """For every positive label present, the other positive labels with a 26-neighbouring voxel.

    Symmetric by construction; background is never listed. A label present without neighbours maps
    to an empty set. Only the foreground voxels are visited (vessels fill a few per mille of a CTA
    crop), from the volume's :class:`.LabelIndex` (``index``, when the caller has it already): each
    voxel's 13 "forward" neighbours are looked up where they lie inside the array; a neighbour outside
    it is background, as in the organisers' bounds checks. No padded copy, no pass over the whole array.
    """
    arr = np.ascontiguousarray(labels)
    if arr.ndim != 3:
        raise ValueError(f"label_adjacency needs a 3-D label array, got shape {arr.shape}")
    if index is None:
        index = LabelIndex.of(arr)
    out: dict[int, set[int]] = {int(v): set() for v in index.labels}
    if len(out) < 2:
        return out
    ravel = arr.reshape(-1)
    values = index.values()
    steps = [int(np.prod(arr.shape[a + 1:])) for a in range(3)]
    inside = {(a, o): (index.coords[a] > 0) if o < 0 else (index.coords[a] < arr.shape[a] - 1)
              for a in range(3) for o in (-1, 1)}
    base = int(values.max()) + 1
    codes = []
    for offset in _FORWARD_OFFSETS:
        keep = functools.reduce(np.logical_and, [inside[a, o] for a, o in enumerate(offset) if o])
        mine = values[keep]
        other = ravel[index.flat[keep] + sum(o * s for o, s in zip(offset, steps, strict=True))].astype(np.int64)
        hit = (other != mine) & (other > 0)
        if hit.any():
            codes.append(np.unique(mine[hit] * base + other[hit]))
    for code in np.unique(np.concatenate(codes)) if codes else ():
        a, b = divmod(int(code), base)
        out[a].add(b)
        out[b].add(a)
    return out


# -- CoW graph (TopCoW) ------------------------------------------------------------------------
def edge_lists(adjacency: Mapping[int, set[int]]) -> tuple[list[int], list[int]]:
    """Anterior [L-A1, Acom, 3rd-A2, R-A1] and posterior [L-Pcom, L-P1, R-P1, R-Pcom] as 0/1.

    ``adjacency`` is :func:`label_adjacency` of the mask (its keys are the labels present).
    """
    def present(label: int) -> bool:
        return label in adjacency

    def touch(a: int, b: int) -> bool:
        return b in adjacency.get(a, ())

    anterior = [present(L_ACA) and touch(L_ACA, L_ICA), present(ACOM), present(THIRD_A2),
                present(R_ACA) and touch(R_ACA, R_ICA)]
    posterior = [present(L_PCOM), present(L_PCA) and touch(L_PCA, BA), present(R_PCA) and touch(R_PCA, BA),
                 present(R_PCOM)]
    return [int(v) for v in anterior], [int(v) for v in posterior]


def variant(region: str, edges: Sequence[int]) -> str:
    """``Var_Ant_a_b_c_d`` / ``Var_Pos_a_b_c_d``."""
    prefix = {"anterior": "Var_Ant", "posterior": "Var_Pos"}[region]
    return "_".join([prefix, *(str(int(e)) for e in edges)])


def _median_x(labels: np.ndarray, label: int) -> float:
    return float(np.median(np.nonzero(labels == label)[2]))


def lr_flipped(labels: np.ndarray, region: str, present: Iterable[int] | None = None,
               median_x: Callable[[int], float] | None = None) -> bool:
    """The organisers' left-right flip test on a (z, y, x) label array (x = last axis, LPS+).

    Anterior: ICAs (6 left, 4 right) if both present, else ACAs (12, 11), else not flipped;
    posterior: PCAs (3, 2) if both present, else not flipped. Flipped iff median_x(left) < median_x(right).
    ``median_x`` (label → median x index of its voxels) may come from a precomputed voxel index.
    """
    have = set(present) if present is not None else set(np.unique(labels).tolist())
    median = median_x or (lambda label: _median_x(labels, label))
    pairs = [(L_ICA, R_ICA), (L_ACA, R_ACA)] if region == "anterior" else [(L_PCA, R_PCA)]
    for left, right in pairs:
        if left in have and right in have:
            return median(left) < median(right)
    return False


def region_matches(region: str, detections: Mapping[int, str], adj_pred: Mapping[int, set[int]],
                   adj_truth: Mapping[int, set[int]], b0_pred: Mapping[int, int], b0_truth: Mapping[int, int],
                   flipped: bool) -> bool:
    """Topology match of one region: for every label of the region detection ∈ {TP, TN}, the same
    set of 26-neighbour labels and the same component count in P and G; and P not LR-flipped.

    ``b0_*`` may omit absent labels (0 components).
    """
    labels = ANTERIOR_LABELS if region == "anterior" else POSTERIOR_LABELS
    for label in labels:
        if detections[label] not in (TP, TN):
            return False
        if set(adj_pred.get(label, ())) != set(adj_truth.get(label, ())):
            return False
        if b0_pred.get(label, 0) != b0_truth.get(label, 0):
            return False
    return not flipped


# -- aggregation helpers -------------------------------------------------------------------------
def balanced_accuracy(y_true: Sequence[str], y_pred: Sequence[str]) -> float:
    """scikit-learn's ``balanced_accuracy_score`` (adjusted=False): mean recall over the classes that
    occur in ``y_true``; classes only predicted are ignored."""
    if len(y_true) != len(y_pred) or not y_true:
        raise ValueError("balanced_accuracy needs two equally long, non-empty sequences")
    hits: dict[str, int] = defaultdict(int)
    totals: dict[str, int] = defaultdict(int)
    for t, p in zip(y_true, y_pred, strict=False):
        totals[t] += 1
        hits[t] += int(t == p)
    return sum(hits[c] / totals[c] for c in totals) / len(totals)


def neighbor_error(adjacency: Mapping[int, set[int]], valid: Mapping[int, Iterable[int]]) -> float:
    """TopBrain case ``neighbor_error``: mean over the predicted labels of |N_P(l) \\ V(l)|, 0 when none.

    A predicted label absent from the table has no valid neighbours.
    """
    if not adjacency:
        return 0.0
    return sum(len(set(n) - set(valid.get(label, ()))) for label, n in adjacency.items()) / len(adjacency)
