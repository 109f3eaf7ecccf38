"""Symmetric Hausdorff distance in mm between the voxel surfaces of two 3-D masks (SEG.A).

Surface voxels are foreground voxels with at least one face neighbour (6-connectivity) in the
background, voxels outside the array counting as background — a binary erosion with a cross-shaped
structuring element and ``border_value=0``. Distances are between voxel centres scaled by the spacing.
Nearest-surface queries use a k-d tree on the surface points only: exact Euclidean distances, with
memory proportional to the surface rather than to the (large, CTA-sized) volume.
"""

from __future__ import annotations

import math

import numpy as np

from .crop import bounding_box
from .parallel import parallel_map

#: the 6-connected (face) neighbourhood, as ``ndimage.generate_binary_structure(3, 1)``
_FACE_NEIGHBOURS = np.array([[[0, 0, 0], [0, 1, 0], [0, 0, 0]],
                             [[0, 1, 0], [1, 1, 1], [0, 1, 0]],
                             [[0, 0, 0], [0, 1, 0], [0, 0, 0]]], dtype=bool)


def surface_voxels(mask: np.ndarray) -> np.ndarray:
    """Boolean map of the 6-connected surface voxels of a 3-D mask (outside counts as background)."""
    from scipy import ndimage  # SciPy is imported where it is used, not by every importer

    mask = np.asarray(mask, dtype=bool)
    return mask & ~ndimage.binary_erosion(mask, structure=_FACE_NEIGHBOURS, border_value=0)


def image_diagonal(shape: tuple[int, ...], spacing: tuple[float, ...]) -> float:
    """sqrt(Σ (shape_i · spacing_i)²) with shape and spacing in the same axis order."""
    return math.sqrt(sum((float(n) * float(s)) ** 2 for n, s in zip(shape, spacing, strict=True)))


def directed_hausdorff_mm(from_points: np.ndarray, to_points: np.ndarray) -> float:
    """max over ``from_points`` of the distance to the nearest of ``to_points`` (both (k, 3) in mm)."""
    from scipy.spatial import cKDTree

    distances, _ = cKDTree(to_points).query(from_points, k=1)
    return float(np.max(distances))


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
    import scipy.ndimage  # noqa: F401  (imported once here, before the two threads use it)
    import scipy.spatial  # noqa: F401

    # the two surfaces, then the two directed distances: independent pairs, on two cores
    p, g = parallel_map(lambda m: surface_points_mm(m, spacing), (pred, truth))
    return max(parallel_map(lambda pair: directed_hausdorff_mm(*pair), ((p, g), (g, p))))


def surface_points_mm(mask: np.ndarray, spacing: tuple[float, float, float]) -> np.ndarray:
    """(k, 3) physical offsets (index · spacing) of the surface voxels of a non-empty mask.

    The erosion runs on the bounding box grown by one voxel (clamped to the array): the extra layer is
    background or lies outside the array, so the surface is the same as on the full volume, at a
    fraction of the cost for a small structure in a large CTA.
    """
    box = tuple(slice(max(s.start - 1, 0), min(s.stop + 1, n))
                for s, n in zip(bounding_box(mask), mask.shape, strict=False))
    points = np.argwhere(surface_voxels(mask[box])) + np.asarray([s.start for s in box])
    return points * np.asarray(spacing, dtype=np.float64)
