"""Surface metrics with the DeepMind ``surface-distance`` definitions, on numpy/scipy/scikit-image.

The PANTHER organisers score with PyPI ``surface-distance`` (DeepMind), so its definitions are normative
for PANTHER's distances. It is re-implemented here rather than imported because the package is
unmaintained (it still calls ``np.Inf``, removed in NumPy 2) and pulls in ``absl``; the tests compare
this module with the package whenever it is installed.

The definitions, for 3-D boolean masks and ``spacing`` in array-axis order (z, y, x for a SimpleITK
array):

* A surface lives on the *corner* grid: every corner of the voxel lattice (one more per axis than
  voxels, outside voxels being background) gets an 8-bit code from its 2×2×2 neighbourhood
  (weights 128…1, highest bit for the voxel at the lowest index on every axis). Corners whose code is
  neither 0 nor 255 are surface points ("surfels").
* A surfel's area is the marching-cubes surface inside its cube, scaled by the spacing (an area vector
  ``n`` becomes ``(s1·s2·n0, s0·s2·n1, s0·s1·n2)``). DeepMind's table is the classic (Lorensen)
  triangulation of whichever side of the cube has *fewer* set corners, so a configuration and its
  complement have the same area; :func:`surfel_area_table` rebuilds it that way from
  ``skimage.measure.marching_cubes(method="lorensen")``.
* The distance of a surfel to the other surface is the Euclidean distance transform (with spacing) of
  the other mask's surfels, read at the surfel's corner.
* Directed percentiles are surfel-area weighted: distances sorted ascending (ties by area), and the
  first distance whose cumulative area fraction reaches ``percent/100`` (``searchsorted``, left side).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ._surfel_table import UNIT_AREA_VECTORS_X8
from .crop import bounding_box
from .distance import distance_to_background
from .overlap import dice
from .parallel import parallel_map

#: bit weight of each voxel of a corner's 2×2×2 neighbourhood, indexed [dz, dy, dx]
CORNER_WEIGHTS = np.array([[[128, 64], [32, 16]], [[8, 4], [2, 1]]], dtype=np.uint8)


@functools.cache
def _unit_area_vectors() -> tuple[np.ndarray, ...]:
    """Per neighbour code, the (k, 3) area vectors of its marching-cubes triangles at unit spacing.

    Area *vectors* (not scalar areas) are kept so that any anisotropic spacing can be applied exactly
    afterwards: a linear map diag(s) turns an area vector into its cofactor-scaled version. Read from
    the precomputed :mod:`._surfel_table` (``tests/metrics/test_surfel.py`` derives it again with
    scikit-image's marching cubes and compares).
    """
    vectors = []
    for word in UNIT_AREA_VECTORS_X8.split():
        digits = [] if word == "-" else [ord(c) - ord("0") - 4 for c in word]
        vectors.append(np.array(digits, dtype=np.float64).reshape(-1, 3) / 8.0)
    return tuple(vectors)


@functools.lru_cache(maxsize=128)
def surfel_area_table(spacing: tuple[float, ...]) -> np.ndarray:
    """Area in mm² of the surface element of each of the 256 neighbour codes at ``spacing`` (z, y, x)."""
    s0, s1, s2 = (float(s) for s in spacing)
    scale = np.array([s1 * s2, s0 * s2, s0 * s1])
    table = np.zeros(256)
    for code, vecs in enumerate(_unit_area_vectors()):
        if len(vecs):
            table[code] = float(np.linalg.norm(vecs * scale, axis=1).sum())
    table.setflags(write=False)
    return table


@dataclass(frozen=True)
class SurfaceDistances:
    """Each mask's surfels: distance to the other surface (ascending) and area, aligned."""

    distances_gt_to_pred: np.ndarray
    areas_gt: np.ndarray
    distances_pred_to_gt: np.ndarray
    areas_pred: np.ndarray


def _corner_codes(padded: np.ndarray) -> np.ndarray:
    """Neighbour code of every corner of a mask padded by one background voxel on every side."""
    out_shape = tuple(n - 1 for n in padded.shape)
    codes = np.zeros(out_shape, dtype=np.uint8)
    for dz in (0, 1):
        for dy in (0, 1):
            for dx in (0, 1):
                block = padded[dz:dz + out_shape[0], dy:dy + out_shape[1], dx:dx + out_shape[2]]
                codes |= block * CORNER_WEIGHTS[dz, dy, dx]
    return codes


def _sorted(distances: np.ndarray, areas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ascending by (distance, area), the package's order, so cumulative sums match bit for bit."""
    order = np.lexsort((areas, distances))
    return distances[order], areas[order]


def compute_surface_distances(mask_gt: np.ndarray, mask_pred: np.ndarray,
                              spacing: Sequence[float]) -> SurfaceDistances:
    """Surfel distances and areas of two 3-D masks; spacing in array-axis order, in mm.

    Work is restricted to the bounding box of both masks (plus the one-corner border); distances are
    unaffected because every surfel of either mask lies inside it. A mask without surfels gives an
    empty array, and the other mask's distances are +inf (nothing to be near to).
    """
    gt, pred = np.asarray(mask_gt, dtype=bool), np.asarray(mask_pred, dtype=bool)
    if gt.ndim != 3 or gt.shape != pred.shape:
        raise ValueError(f"need two 3-D masks of one shape, got {gt.shape} and {pred.shape}")
    zyx = tuple(float(s) for s in spacing)
    if len(zyx) != 3:
        raise ValueError(f"spacing must have 3 values, got {zyx}")
    empty = np.zeros(0)
    box = bounding_box(gt | pred)
    if box is None:
        return SurfaceDistances(empty, empty, empty, empty)
    table = surfel_area_table(zyx)

    def surfels(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        codes = _corner_codes(np.pad(m[box].astype(np.uint8), 1))
        return codes, (codes != 0) & (codes != 255)

    def distance_to(border: np.ndarray) -> np.ndarray:
        if not border.any():
            return np.full(border.shape, np.inf)
        return distance_to_background(~border, zyx)

    # the two masks' surfels, then the two distance transforms, each pair on two cores
    (code_gt, border_gt), (code_pred, border_pred) = parallel_map(surfels, (gt, pred))
    codes, borders = (code_gt, code_pred), (border_gt, border_pred)
    to_gt, to_pred = parallel_map(distance_to, borders)
    d_gt, a_gt = _sorted(to_pred[borders[0]], table[codes[0][borders[0]]])
    d_pred, a_pred = _sorted(to_gt[borders[1]], table[codes[1][borders[1]]])
    return SurfaceDistances(d_gt, a_gt, d_pred, a_pred)


def volumetric_dice(mask_gt: np.ndarray, mask_pred: np.ndarray) -> float:
    """2|P∩G|/(|P|+|G|); NaN when both are empty, as in the package (callers define that case)."""
    return dice(np.asarray(mask_pred, dtype=bool), np.asarray(mask_gt, dtype=bool), empty=float("nan"))


def average_surface_distance(sd: SurfaceDistances) -> tuple[float, float]:
    """(gt→pred, pred→gt) surfel-area-weighted mean distances; NaN for a side without surfels."""
    def mean(d: np.ndarray, a: np.ndarray) -> float:
        return float(np.sum(d * a) / np.sum(a)) if d.size else float("nan")
    return mean(sd.distances_gt_to_pred, sd.areas_gt), mean(sd.distances_pred_to_gt, sd.areas_pred)


def _directed_percentile(d: np.ndarray, a: np.ndarray, percent: float) -> float:
    if d.size == 0:
        return float("inf")
    cumulative = np.cumsum(a) / np.sum(a)
    index = int(np.searchsorted(cumulative, percent / 100.0))
    return float(d[min(index, d.size - 1)])


def robust_hausdorff(sd: SurfaceDistances, percent: float) -> float:
    """Maximum of the two directed surfel-area-weighted ``percent`` percentiles (mm)."""
    return max(_directed_percentile(sd.distances_gt_to_pred, sd.areas_gt, percent),
               _directed_percentile(sd.distances_pred_to_gt, sd.areas_pred, percent))


def surface_dice_at_tolerance(sd: SurfaceDistances, tolerance_mm: float) -> float:
    """Area of both surfaces within ``tolerance_mm`` of the other, over the total area (NaN if none)."""
    total = float(np.sum(sd.areas_gt) + np.sum(sd.areas_pred))
    if total == 0.0:
        return float("nan")
    close = np.sum(sd.areas_gt[sd.distances_gt_to_pred <= tolerance_mm]) + \
        np.sum(sd.areas_pred[sd.distances_pred_to_gt <= tolerance_mm])
    return float(close / total)
