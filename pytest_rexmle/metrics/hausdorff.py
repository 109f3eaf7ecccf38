"""Symmetric Hausdorff distance in mm between the voxel surfaces of two 3-D masks (SEG.A).

Surface voxels are foreground voxels with at least one face neighbour (6-connectivity) in the
background, voxels outside the array counting as background (a binary erosion with a cross-shaped
structuring element and ``border_value=0``). Distances are between voxel centres scaled by the spacing.

Distances are exact: each surface voxel's nearest voxel of the other surface is looked up at the
offsets near it first and, for the few voxels with nothing near (outliers), in a k-d tree, so a grade
imports SciPy only for predictions that need it (its ``spatial`` and ``ndimage`` imports were about a
third of every SEG.A grade). ``tests/metrics`` compares it with brute force and with a k-d tree.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .crop import bounding_box, union_box
from .parallel import parallel_map


def surface_voxels(mask: np.ndarray) -> np.ndarray:
    """Boolean map of the 6-connected surface voxels of a 3-D mask (outside counts as background)."""
    mask = np.asarray(mask, dtype=bool)
    if mask.ndim != 3:
        raise ValueError(f"surface_voxels needs a 3-D mask, got shape {mask.shape}")
    padded = np.pad(mask, 1)  # the background shell outside the array
    interior = mask.copy()
    for lo, hi in (((0, 1, 1), (-2, -1, -1)), ((2, 1, 1), (None, -1, -1)), ((1, 0, 1), (-1, -2, -1)),
                   ((1, 2, 1), (-1, None, -1)), ((1, 1, 0), (-1, -1, -2)), ((1, 1, 2), (-1, -1, None))):
        interior &= padded[tuple(slice(a, b) for a, b in zip(lo, hi, strict=True))]  # one face neighbour
    return mask & ~interior


def image_diagonal(shape: tuple[int, ...], spacing: tuple[float, ...]) -> float:
    """sqrt(Σ (shape_i · spacing_i)²) with shape and spacing in the same axis order."""
    return math.sqrt(sum((float(n) * float(s)) ** 2 for n, s in zip(shape, spacing, strict=True)))


def hausdorff_mm(pred: np.ndarray, truth: np.ndarray, spacing: tuple[float, float, float]) -> float:
    """max(d(P→G), d(G→P)); both empty → 0; exactly one empty → the image diagonal (SEG.A's rule).

    ``spacing`` is in array-axis order (a SimpleITK spacing reversed for its (z, y, x) array).
    """
    pred, truth = np.asarray(pred, dtype=bool), np.asarray(truth, dtype=bool)
    if pred.shape != truth.shape or pred.ndim != 3:
        raise ValueError(f"need two 3-D masks of one shape, got {pred.shape} and {truth.shape}")
    has_pred, has_truth = bool(pred.any()), bool(truth.any())
    if not has_pred and not has_truth:
        return 0.0
    if has_pred != has_truth:
        return image_diagonal(pred.shape, spacing)
    both_boxes = union_box(bounding_box(pred), bounding_box(truth))
    assert both_boxes is not None   # both masks have voxels here
    box = _grown(both_boxes, pred.shape)
    surface_p, surface_g = parallel_map(lambda m: surface_voxels(m[box]), (pred, truth))
    return max(directed_mm(surface_p, surface_g, spacing), directed_mm(surface_g, surface_p, spacing))


def _grown(box: tuple[slice, ...], shape: tuple[int, ...]) -> tuple[slice, ...]:
    """The box grown by one voxel on every side, clamped to the array: the extra layer is background or
    outside the array, so surfaces found inside it are the surfaces of the full volume."""
    return tuple(slice(max(s.start - 1, 0), min(s.stop + 1, n)) for s, n in zip(box, shape, strict=True))


def directed_mm(source: np.ndarray, target: np.ndarray, spacing: tuple[float, float, float]) -> float:
    """max over ``source``'s True voxels of the distance to the nearest True voxel of ``target`` (both
    non-empty maps of one shape), exact.

    A prediction's surface mostly lies within a few voxels of the truth's, so the target is first looked
    up at every offset within :data:`NEAR_VOXELS` voxels of the finest axis, nearest offsets first: a
    voxel found there has its exact nearest distance. Only the voxels with nothing that near (outliers)
    go to a k-d tree over the target's voxels, the one case that needs SciPy; so do all the rest when
    fewer than half are found within one voxel (a scattered, hostile prediction would otherwise cost
    one pass over most of its voxels per offset).
    """
    step = np.asarray(spacing, dtype=np.float64)
    offsets, lengths = _near_offsets(tuple(float(s) for s in spacing))
    reach = np.max(np.abs(offsets), axis=0)
    lookup = np.pad(target, [(int(r), int(r)) for r in reach])
    left = np.argwhere(source) + reach
    total = left.shape[0]
    shell = float(step.max())  # one voxel along any axis
    farthest = 0.0  # offsets come nearest first: the last one that finds something is the largest
    for offset, length in zip(offsets, lengths, strict=True):
        if length > shell and 2 * left.shape[0] > total:
            break  # most voxels are not near the target (a scattered prediction): the k-d tree is cheaper
        spot = left + offset
        hit = lookup[spot[:, 0], spot[:, 1], spot[:, 2]]
        if hit.any():
            farthest, left = float(length), left[~hit]
            if left.size == 0:
                return farthest
    from scipy.spatial import cKDTree  # only for voxels farther than the offsets reach

    far, _ = cKDTree((np.argwhere(target) + reach) * step).query(left * step, k=1)
    return max(farthest, float(far.max()))


#: how far (in voxels of the finest axis) the offset search looks before the k-d tree takes over
NEAR_VOXELS = 3


@functools.cache
def _near_offsets(spacing: tuple[float, float, float]) -> tuple[np.ndarray, np.ndarray]:
    """Every index offset within ``NEAR_VOXELS`` finest-axis voxels (a ball in mm), sorted by length in
    mm, with those lengths. The ball is complete: any voxel closer than its radius is one of them."""
    step = np.asarray(spacing)
    radius = NEAR_VOXELS * float(step.min())
    reach = [int(math.floor(radius / s + 1e-9)) for s in step]  # 3·s/s may round just below 3
    grid = np.stack(np.meshgrid(*[np.arange(-r, r + 1) for r in reach], indexing="ij"), axis=-1).reshape(-1, 3)
    lengths = np.sqrt(np.add.reduce(np.square(grid * step), axis=1))
    keep = lengths <= radius
    order = np.argsort(lengths[keep], kind="stable")
    return grid[keep][order], lengths[keep][order]
