"""DeepMind surface-distance definitions (pytest_rexmle.metrics.surfel) on hand-computable masks,
plus a value-for-value comparison with PyPI ``surface-distance`` when it is installed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_rexmle.metrics.surfel import (
    CORNER_WEIGHTS,
    average_surface_distance,
    compute_surface_distances,
    robust_hausdorff,
    surface_dice_at_tolerance,
    surfel_area_table,
    volumetric_dice,
)


def code_of(corners: list[tuple[int, int, int]]) -> int:
    return int(sum(CORNER_WEIGHTS[c] for c in corners))


# --- surfel area table ---------------------------------------------------------------------------

def test_single_corner_is_the_midpoint_triangle():
    # One set corner: triangle through three edge midpoints at distance 1/2 → equilateral with side
    # sqrt(1/2): area sqrt(3)/4 · 1/2 = sqrt(3)/8.
    assert surfel_area_table((1.0, 1.0, 1.0))[1] == pytest.approx(math.sqrt(3) / 8, abs=1e-12)
    # With spacing (2, 1, 1) its area vector (1, 1, 1)/8 scales by (s1·s2, s0·s2, s0·s1) = (1, 2, 2):
    # |(1, 2, 2)|/8 = 3/8.
    assert surfel_area_table((2.0, 1.0, 1.0))[128] == pytest.approx(3 / 8, abs=1e-12)


def test_half_cube_is_a_plane_scaled_by_the_other_two_spacings():
    # Code 15 = the whole dz=1 layer set: the plane z = 1/2, a unit square; in mm its area is s1·s2.
    lower_layer = code_of([(1, 0, 0), (1, 0, 1), (1, 1, 0), (1, 1, 1)])
    assert lower_layer == 15
    assert surfel_area_table((1.0, 1.0, 1.0))[15] == pytest.approx(1.0, abs=1e-12)
    assert surfel_area_table((2.0, 3.0, 5.0))[15] == pytest.approx(15.0, abs=1e-12)


def test_ambiguous_configurations_separate_the_set_corners():
    # Code 60: two diagonally opposite x-edges set. Separated, each edge is cut off by a 1 × sqrt(1/2)
    # rectangle: 2 · sqrt(1/2) = sqrt(2).
    assert surfel_area_table((1.0, 1.0, 1.0))[60] == pytest.approx(math.sqrt(2), abs=1e-12)
    # Code 105: four alternate corners (a tetrahedron): four corner triangles, 4 · sqrt(3)/8.
    assert code_of([(0, 0, 1), (0, 1, 0), (1, 0, 0), (1, 1, 1)]) == 105
    assert surfel_area_table((1.0, 1.0, 1.0))[105] == pytest.approx(math.sqrt(3) / 2, abs=1e-12)


def test_table_is_complement_symmetric_and_matches_the_package_totals():
    for spacing in ((1.0, 1.0, 1.0), (2.5, 0.7, 1.3)):
        table = surfel_area_table(spacing)
        assert table[0] == 0.0 and table[255] == 0.0
        np.testing.assert_array_equal(table, table[::-1])
    # Totals over the 256 codes printed by surface_distance.lookup_tables.
    # create_table_neighbour_code_to_surface_area (version 0.1) for these spacings.
    assert surfel_area_table((1.0, 1.0, 1.0)).sum() == pytest.approx(241.34313970553745, rel=1e-12)
    assert surfel_area_table((2.5, 0.7, 1.3)).sum() == pytest.approx(515.3582780047532, rel=1e-12)


# --- distances and the four metrics --------------------------------------------------------------

def two_voxels(shift_x: int = 2) -> tuple[np.ndarray, np.ndarray]:
    gt = np.zeros((9, 9, 12), dtype=bool)
    pred = np.zeros_like(gt)
    gt[4, 4, 4] = True
    pred[4, 4, 4 + shift_x] = True
    return gt, pred


def test_single_voxels_two_apart_along_x():
    # Each voxel has 8 surfel corners, all single-bit codes of area |(s1 s2, s0 s2, s0 s1)|/8 =
    # |(2, 3, 6)|/8 = 7/8 for spacing (3, 2, 1). The voxels are 2 voxels = 2 mm apart along x: the gt
    # corners at x = 5 are 1 mm from the pred corners at x = 7, those at x = 4 are 2 mm away (same y, z).
    gt, pred = two_voxels()
    sd = compute_surface_distances(gt, pred, (3.0, 2.0, 1.0))
    np.testing.assert_allclose(sd.areas_gt, [7 / 8] * 8)
    np.testing.assert_allclose(sd.distances_gt_to_pred, [1, 1, 1, 1, 2, 2, 2, 2])
    np.testing.assert_allclose(sd.distances_pred_to_gt, [1, 1, 1, 1, 2, 2, 2, 2])
    assert average_surface_distance(sd) == pytest.approx((1.5, 1.5))
    # Cumulative area fractions 1/8 … 8/8: the first reaching 0.95 is the 8th (2 mm), 0.5 the 4th (1 mm).
    assert robust_hausdorff(sd, 95) == 2.0
    assert robust_hausdorff(sd, 50) == 1.0
    # Within 1 mm: 4 of 8 equal-area surfels on each side → 0.5; within 5 mm: everything.
    assert surface_dice_at_tolerance(sd, 1.0) == pytest.approx(0.5)
    assert surface_dice_at_tolerance(sd, 5.0) == pytest.approx(1.0)
    assert volumetric_dice(gt, pred) == 0.0


def test_identical_masks_are_perfect_and_areas_sum_to_the_surface():
    # Identical masks: every surfel is at distance 0 from the other surface.
    mask = np.zeros((6, 7, 8), dtype=bool)
    mask[2:4, 2:5, 2:6] = True
    sd = compute_surface_distances(mask, mask, (1.0, 1.0, 1.0))
    assert np.all(sd.distances_gt_to_pred == 0) and np.all(sd.distances_pred_to_gt == 0)
    assert robust_hausdorff(sd, 95) == 0.0
    assert surface_dice_at_tolerance(sd, 0.0) == 1.0
    assert average_surface_distance(sd) == (0.0, 0.0)
    assert volumetric_dice(mask, mask) == 1.0
    # Single voxel: 8 single-bit corners of sqrt(3)/8 each → sqrt(3) in total.
    one = np.zeros((3, 3, 3), dtype=bool)
    one[1, 1, 1] = True
    assert compute_surface_distances(one, one, (1.0, 1.0, 1.0)).areas_gt.sum() == pytest.approx(math.sqrt(3))


def test_distances_use_the_spacing_of_each_axis():
    # Same two voxels, shifted along z (axis 0) instead: 1 and 2 voxels become 3 and 6 mm.
    gt = np.zeros((12, 5, 5), dtype=bool)
    pred = np.zeros_like(gt)
    gt[3, 2, 2] = pred[5, 2, 2] = True
    sd = compute_surface_distances(gt, pred, (3.0, 2.0, 1.0))
    np.testing.assert_allclose(sd.distances_gt_to_pred, [3] * 4 + [6] * 4)
    assert robust_hausdorff(sd, 95) == 6.0


def test_empty_inputs():
    empty = np.zeros((4, 4, 4), dtype=bool)
    one = empty.copy()
    one[1, 1, 1] = True
    sd = compute_surface_distances(empty, empty, (1, 1, 1))
    assert sd.distances_gt_to_pred.size == 0 and sd.distances_pred_to_gt.size == 0
    assert math.isnan(volumetric_dice(empty, empty))
    assert math.isnan(surface_dice_at_tolerance(sd, 1.0))
    sd = compute_surface_distances(one, empty, (1, 1, 1))
    assert sd.distances_pred_to_gt.size == 0
    assert np.all(np.isinf(sd.distances_gt_to_pred))
    assert robust_hausdorff(sd, 95) == math.inf
    with pytest.raises(ValueError):
        compute_surface_distances(np.zeros((3, 3)), np.zeros((3, 3)), (1, 1, 1))


def test_mask_touching_the_array_border_still_has_a_surface():
    # Outside the array is background: a full array is a closed box with distances to a centre voxel.
    full = np.ones((3, 3, 3), dtype=bool)
    centre = np.zeros_like(full)
    centre[1, 1, 1] = True
    sd = compute_surface_distances(full, centre, (1.0, 1.0, 1.0))
    # Outer box corners lie at distance 1 per axis from the nearest centre-voxel corner: the corner
    # points of the full box (x, y, z ∈ {0, 3}) are sqrt(3) from the nearest inner corner (1 or 2).
    assert sd.distances_gt_to_pred.max() == pytest.approx(math.sqrt(3))
    assert sd.distances_gt_to_pred.min() == pytest.approx(1.0)


# --- the package itself, when installed ----------------------------------------------------------

@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the package uses scipy's deprecated namespaces
def test_matches_pypi_surface_distance_on_random_masks():
    sdpkg = pytest.importorskip("surface_distance")
    from scipy import ndimage

    rng = np.random.default_rng(7)
    checked = 0
    for trial in range(60):
        shape = tuple(int(n) for n in rng.integers(3, 12, 3))
        spacing = tuple(float(s) for s in rng.uniform(0.3, 3.0, 3))
        gt = rng.random(shape) < rng.uniform(0.1, 0.8)
        if trial % 2:
            gt = ndimage.binary_opening(gt)
        pred = rng.random(shape) < rng.uniform(0.1, 0.8)
        if not gt.any() or not pred.any():
            continue
        ref = sdpkg.compute_surface_distances(gt, pred, spacing)
        ours = compute_surface_distances(gt, pred, spacing)
        np.testing.assert_allclose(ours.distances_gt_to_pred, ref["distances_gt_to_pred"], rtol=1e-12)
        np.testing.assert_allclose(ours.distances_pred_to_gt, ref["distances_pred_to_gt"], rtol=1e-12)
        np.testing.assert_allclose(ours.areas_gt, ref["surfel_areas_gt"], rtol=1e-12)
        np.testing.assert_allclose(ours.areas_pred, ref["surfel_areas_pred"], rtol=1e-12)
        for percent in (50, 95, 100):
            assert robust_hausdorff(ours, percent) == pytest.approx(sdpkg.compute_robust_hausdorff(ref, percent))
        assert average_surface_distance(ours) == pytest.approx(sdpkg.compute_average_surface_distance(ref), rel=1e-12)
        assert surface_dice_at_tolerance(ours, 1.0) == pytest.approx(
            sdpkg.compute_surface_dice_at_tolerance(ref, 1.0), rel=1e-12)
        assert volumetric_dice(gt, pred) == pytest.approx(sdpkg.compute_dice_coefficient(gt, pred))
        checked += 1
    assert checked >= 40


def test_area_table_matches_pypi_surface_distance():
    lookup = pytest.importorskip("surface_distance.lookup_tables")
    for spacing in ((1.0, 1.0, 1.0), (2.5, 0.7, 1.3), (0.3, 3.1, 1.7)):
        np.testing.assert_allclose(surfel_area_table(spacing),
                                   lookup.create_table_neighbour_code_to_surface_area(spacing), rtol=1e-12)


def _marching_cubes_area_vectors() -> tuple[np.ndarray, ...]:
    """The table derived from scikit-image's Lorensen marching cubes on each code's minority side
    (how ``pytest_rexmle/metrics/_surfel_table.py`` was generated)."""
    from skimage.measure import marching_cubes

    vectors: list[np.ndarray] = []
    for code in range(256):
        minority = code if bin(code).count("1") <= 4 else 255 - code
        if minority == 0:
            vectors.append(np.zeros((0, 3)))
            continue
        cube = ((minority & CORNER_WEIGHTS) != 0).astype(np.float64)
        verts, faces, _, _ = marching_cubes(cube, 0.5, method="lorensen")
        tri = verts.astype(np.float64)[faces]
        vectors.append(np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]) / 2.0)
    return tuple(vectors)


def test_embedded_area_vectors_are_the_marching_cubes_ones():
    # grading reads the precomputed table; it must be bit-identical to the marching-cubes derivation
    from pytest_rexmle.metrics.surfel import _unit_area_vectors

    embedded, derived = _unit_area_vectors(), _marching_cubes_area_vectors()
    assert len(embedded) == len(derived) == 256
    for code, (a, b) in enumerate(zip(embedded, derived, strict=True)):
        assert a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b), code
