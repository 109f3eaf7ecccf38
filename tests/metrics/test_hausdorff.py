"""SEG.A symmetric Hausdorff distance (pytest_rexmle.metrics.hausdorff) on hand-computable masks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from pytest_rexmle.metrics.crop import bounding_box
from pytest_rexmle.metrics.hausdorff import _grown, hausdorff_mm, image_diagonal, surface_voxels


def surface_points_mm(mask: np.ndarray, spacing) -> np.ndarray:
    """Physical offsets of the surface voxels, found on the grader's crop (the mask's box grown by one)."""
    crop = _grown(bounding_box(mask), mask.shape)
    return (np.argwhere(surface_voxels(mask[crop])) + [s.start for s in crop]) * np.asarray(spacing, dtype=np.float64)


def box(shape, lo, hi) -> np.ndarray:
    mask = np.zeros(shape, dtype=bool)
    mask[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]] = True
    return mask


def test_surface_voxels_use_face_neighbours_and_a_background_outside():
    # 3×3×3 cube inside a 5×5×5 volume: only the centre voxel has all 6 face neighbours set → 26.
    assert surface_voxels(box((5, 5, 5), (1, 1, 1), (4, 4, 4))).sum() == 26
    # The same cube filling the whole array: outside counts as background, still 26 (not 0).
    assert surface_voxels(np.ones((3, 3, 3), dtype=bool)).sum() == 26
    # 5×5×5 cube: the inner 3×3×3 have all face neighbours set → 125 − 27 = 98.
    assert surface_voxels(box((7, 7, 7), (1, 1, 1), (6, 6, 6))).sum() == 98
    # A one-voxel-thick plate is all surface.
    assert surface_voxels(box((3, 6, 6), (1, 0, 0), (2, 6, 6))).sum() == 36


def test_single_voxels_with_anisotropic_spacing():
    # Offsets (dz, dy, dx) = (1, 0, 2) at spacing (z, y, x) = (2.5, 1, 0.5): sqrt(2.5² + 1²) = sqrt(7.25).
    a, b = np.zeros((4, 4, 6), dtype=bool), np.zeros((4, 4, 6), dtype=bool)
    a[1, 1, 1] = True
    b[2, 1, 3] = True
    assert hausdorff_mm(a, b, (2.5, 1.0, 0.5)) == pytest.approx(math.sqrt(7.25))


def test_outlier_voxel_and_symmetry():
    # G = 5³ cube at x 1..5; P = G plus a voxel at x = 15 on the cube's middle row. d(P→G): the
    # outlier to the nearest G surface voxel (3, 3, 5) = 10; d(G→P) = 0 (G's surface ⊂ P's surface).
    g = box((7, 7, 20), (1, 1, 1), (6, 6, 6))
    p = g.copy()
    p[3, 3, 15] = True
    assert hausdorff_mm(p, g, (1.0, 1.0, 1.0)) == pytest.approx(10.0)
    assert hausdorff_mm(g, p, (1.0, 1.0, 1.0)) == pytest.approx(10.0)


def test_distances_go_to_the_surface_not_the_interior():
    # P = the centre voxel (3, 3, 3) of the G cube 1..5: d(P→G) = 2 voxels to a face centre
    # (the interior voxels around it do not count); d(G→P) = G's corner (1, 1, 1) → sqrt(3 · 2²).
    g = box((7, 7, 7), (1, 1, 1), (6, 6, 6))
    p = np.zeros_like(g)
    p[3, 3, 3] = True
    assert hausdorff_mm(p, g, (1.0, 1.0, 1.0)) == pytest.approx(math.sqrt(12))
    # Spacing (2, 1, 1): the far corner is at (4, 2, 2) mm → sqrt(24).
    assert hausdorff_mm(p, g, (2.0, 1.0, 1.0)) == pytest.approx(math.sqrt(24))


def test_mask_filling_the_volume():
    # P = the whole 3³ array, G = its centre: P's surface is its 26 border voxels; the farthest is a
    # corner at sqrt(3); G's single voxel is 1 from the nearest face centre. HD = sqrt(3).
    p = np.ones((3, 3, 3), dtype=bool)
    g = np.zeros_like(p)
    g[1, 1, 1] = True
    assert hausdorff_mm(p, g, (1.0, 1.0, 1.0)) == pytest.approx(math.sqrt(3))


def test_empty_rules():
    empty = np.zeros((2, 3, 4), dtype=bool)
    one = empty.copy()
    one[0, 0, 0] = True
    assert hausdorff_mm(empty, empty, (3.0, 2.0, 1.0)) == 0.0
    # Diagonal sqrt((2·3)² + (3·2)² + (4·1)²) = sqrt(36 + 36 + 16) = sqrt(88), either side empty.
    assert hausdorff_mm(one, empty, (3.0, 2.0, 1.0)) == pytest.approx(math.sqrt(88))
    assert hausdorff_mm(empty, one, (3.0, 2.0, 1.0)) == pytest.approx(math.sqrt(88))
    assert image_diagonal((2, 3, 4), (3.0, 2.0, 1.0)) == pytest.approx(math.sqrt(88))
    with pytest.raises(ValueError):
        hausdorff_mm(empty, np.zeros((2, 3, 5), dtype=bool), (1, 1, 1))


def test_cropped_surface_equals_full_volume_surface_and_brute_force_distance():
    rng = np.random.default_rng(3)
    for _ in range(30):
        shape = tuple(int(n) for n in rng.integers(2, 10, 3))
        spacing = tuple(float(s) for s in rng.uniform(0.3, 3.0, 3))
        a = rng.random(shape) < 0.35
        b = rng.random(shape) < 0.25
        if not a.any() or not b.any():
            continue
        full_a = np.argwhere(surface_voxels(a)) * np.asarray(spacing)
        full_b = np.argwhere(surface_voxels(b)) * np.asarray(spacing)
        np.testing.assert_allclose(np.sort(surface_points_mm(a, spacing), axis=0), np.sort(full_a, axis=0))
        d = cdist(full_a, full_b)
        assert hausdorff_mm(a, b, spacing) == pytest.approx(max(d.min(axis=1).max(), d.min(axis=0).max()))


def test_surface_is_the_face_erosion_and_distances_match_a_kd_tree_on_a_larger_case():
    """The numpy erosion equals SciPy's (cross element, background outside), and the distances equal a k-d
    tree's on surfaces of a few thousand voxels inside a bigger array (the crop at work), an outlier
    included (the k-d tree part of the lookup)."""
    from scipy import ndimage
    from scipy.spatial import cKDTree

    rng = np.random.default_rng(11)
    cross = ndimage.generate_binary_structure(3, 1)
    for _ in range(10):
        mask = ndimage.binary_dilation(rng.random((12, 15, 9)) < 0.05, iterations=int(rng.integers(0, 3)))
        assert np.array_equal(surface_voxels(mask), mask & ~ndimage.binary_erosion(mask, cross, border_value=0))
    spacing = (1.7, 0.45, 0.8)
    a, b = np.zeros((60, 70, 80), bool), np.zeros((60, 70, 80), bool)
    a[10:30, 20:50, 15:40] = True
    b[12:33, 18:47, 20:44] = True
    b[50, 60, 70] = True  # a far outlier decides d(P→G)
    pa, pb = surface_points_mm(a, spacing), surface_points_mm(b, spacing)
    expected = max(cKDTree(pb).query(pa)[0].max(), cKDTree(pa).query(pb)[0].max())
    assert hausdorff_mm(a, b, spacing) == pytest.approx(expected, rel=1e-12)
