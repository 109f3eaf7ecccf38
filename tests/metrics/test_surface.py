"""Contour-based HD95: hand-computed values and the exactness of the crop."""

from __future__ import annotations

import numpy as np
import pytest
import SimpleITK as sitk
from scipy import ndimage

from pytest_rexmle.metrics.crop import bounding_box, union_box
from pytest_rexmle.metrics.surface import _contour, contour_distances, hd95

SPACING = (0.5, 0.5, 2.0)   # SimpleITK (x, y, z): the arrays' last axis is x (0.5 mm), the first z (2 mm)


def hd95_full_volume(pred: np.ndarray, truth: np.ndarray, spacing, absent: float) -> float:
    """The same value without cropping: the organisers' literal pipeline, the oracle of the crop."""
    if not np.any(pred) or not np.any(truth):
        return float(absent)
    g2p, p2g = contour_distances(truth, pred, spacing, crop=False)
    return float(max(np.percentile(g2p, 95), np.percentile(p2g, 95)))


def organisers_contour_distances(a: np.ndarray, b: np.ndarray, spacing) -> tuple[np.ndarray, np.ndarray]:
    """The organisers' pipeline written out in SimpleITK, filter for filter, on the whole padded volume:
    LabelContour(fullyConnected) of each mask, |SignedMaurerDistanceMap| of the other's contour read at
    its contour voxels, 0 on the other's own contour."""
    def contour_and_map(mask):
        img = sitk.GetImageFromArray(np.pad(mask, 1).astype(np.uint8))
        img.SetSpacing(tuple(float(s) for s in spacing))
        contour = sitk.LabelContour(img, fullyConnected=True)
        distance = sitk.SignedMaurerDistanceMap(contour, squaredDistance=False, useImageSpacing=True)
        return sitk.GetArrayFromImage(contour) != 0, np.abs(sitk.GetArrayFromImage(distance))

    (ca, da), (cb, db) = contour_and_map(a), contour_and_map(b)
    db[cb] = 0.0
    da[ca] = 0.0
    return db[ca].astype(np.float64), da[cb].astype(np.float64)


@pytest.mark.parametrize("seed", range(40))
def test_numpy_contour_equals_label_contour_fully_connected(seed):
    rng = np.random.default_rng(seed)
    shape = tuple(int(s) for s in rng.integers(3, 20, size=3))
    mask = ndimage.binary_dilation(rng.random(shape) < 0.05, iterations=int(rng.integers(0, 3)))
    mask[tuple(rng.integers(0, s) for s in shape)] = True
    padded = np.pad(mask, 1)
    expected = sitk.GetArrayFromImage(sitk.LabelContour(sitk.GetImageFromArray(padded.astype(np.uint8)),
                                                        fullyConnected=True))
    assert np.array_equal(_contour(padded), expected)


def cubes(offset_axis: int, offset: int = 1, shape=(6, 6, 7)) -> tuple[np.ndarray, np.ndarray]:
    a = np.zeros(shape, bool)
    b = np.zeros(shape, bool)
    a[1:4, 1:4, 1:4] = True
    lo = [1, 1, 1]
    lo[offset_axis] += offset
    b[lo[0]:lo[0] + 3, lo[1]:lo[1] + 3, lo[2]:lo[2] + 3] = True
    return a, b


def test_spec_example_two_cubes_offset_by_one_voxel():
    # A and B are 3×3×3 cubes, B shifted by one voxel along x (0.5 mm). The fully connected contour of
    # a 3×3×3 cube is its 26 outer voxels (only the centre has no background among its 26 neighbours).
    # Local x of A: layers 0, 1, 2; B covers A's layers 1, 2 and one more.
    # d(A→B) over A's 26 contour voxels:
    #   layer 0 (9 voxels): nearest B contour voxel is the same (y, z) in layer 1 → 0.5 mm each;
    #   layer 1 (8 voxels, centre excluded): they lie on B's first face → 0;
    #   layer 2 (9 voxels): 8 lie on B's contour → 0; its centre is B's centre (not contour), whose
    #   nearest B contour voxel is one step in x (0.5 mm) or y (0.5 mm) → 0.5 mm.
    # Sorted: 16 zeros, then ten 0.5 → 95th percentile at rank 0.95·25 = 23.75 → between two 0.5 → 0.5.
    # B→A is the mirror image → 0.5. HD95 = max(0.5, 0.5) = 0.5 mm.
    a, b = cubes(offset_axis=2)
    a2b, b2a = contour_distances(a, b, SPACING)
    assert len(a2b) == len(b2a) == 26
    assert sorted(a2b) == [0.0] * 16 + [0.5] * 10
    assert hd95(a, b, SPACING, absent=90.0) == 0.5
    # The same offset along z costs one z step of 2 mm instead: HD95 = 2.0 mm.
    a, b = cubes(offset_axis=0)
    assert hd95(a, b, SPACING, absent=90.0) == 2.0


def test_percentile_is_linearly_interpolated():
    # A = one voxel at x = 0, B = a 1×1×5 rod x = 0..4 (x spacing 0.5 mm); every voxel is contour.
    # A→B: [0] (A lies on B). B→A: [0, 0.5, 1.0, 1.5, 2.0]; rank 0.95·4 = 3.8 → 1.5 + 0.8·0.5 = 1.9.
    a = np.zeros((1, 1, 5), bool)
    b = np.zeros((1, 1, 5), bool)
    a[0, 0, 0] = True
    b[0, 0, :] = True
    a2b, b2a = contour_distances(a, b, SPACING)
    assert a2b.tolist() == [0.0]
    assert sorted(b2a.tolist()) == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert hd95(a, b, SPACING, absent=90.0) == pytest.approx(1.9)
    assert hd95(b, a, SPACING, absent=90.0) == pytest.approx(1.9)    # symmetric


def test_fully_connected_contour_counts_diagonal_background():
    # A 3×3×3 cube with its centre column (along z) removed: the 6 voxels around the hole's ends
    # now see background diagonally or by face; all 24 voxels are contour. A perfect match is 0.
    a = np.zeros((5, 5, 5), bool)
    a[1:4, 1:4, 1:4] = True
    a[1:4, 2, 2] = False
    d, _ = contour_distances(a, a, SPACING)
    assert len(d) == 24 and not d.any()


def test_absent_label_gets_the_task_bound():
    a = np.zeros((3, 3, 3), bool)
    b = a.copy()
    b[1, 1, 1] = True
    assert hd95(a, b, SPACING, absent=90.0) == 90.0
    assert hd95(b, a, SPACING, absent=290.0) == 290.0
    assert hd95(a, a, SPACING, absent=90.0) == 90.0   # callers only ask for labels in G ∪ P


def test_identical_masks_are_exactly_zero_with_non_dyadic_spacing():
    # The raw Maurer map has float32 round-off (~1e-6 mm) on contour voxels for spacings like 0.45 mm;
    # the organisers' definition gives 0 there, so a perfect prediction must be exactly 0.
    rng = np.random.default_rng(3)
    a = ndimage.binary_dilation(rng.random((10, 12, 14)) < 0.03, iterations=2)
    assert hd95(a, a, (0.45, 0.45, 0.6), absent=90.0) == 0.0


@pytest.mark.parametrize("seed", range(12))
def test_crop_equals_full_volume_pipeline(seed):
    # The cropped computation must equal the organisers' literal uncropped one bit for bit, including
    # masks that touch the volume border (where the padding supplies the background).
    rng = np.random.default_rng(seed)
    shape = tuple(int(s) for s in rng.integers(6, 16, size=3))
    spacing = tuple(float(s) for s in rng.choice([0.3, 0.45, 0.5, 0.7, 1.0, 2.0], size=3))
    a = ndimage.binary_dilation(rng.random(shape) < 0.02, iterations=int(rng.integers(0, 3)))
    b = ndimage.binary_dilation(rng.random(shape) < 0.02, iterations=int(rng.integers(0, 3)))
    if seed % 3 == 0:
        a[0, :, 0] = True                   # on the border
        b[-1, -1, :] = True
    if not a.any() or not b.any():
        a[shape[0] // 2, 0, 0] = b[0, shape[1] // 2, shape[2] - 1] = True
    cropped = contour_distances(a, b, spacing, crop=True)
    full = contour_distances(a, b, spacing, crop=False)
    literal = organisers_contour_distances(a, b, spacing)
    for c, f, o in zip(cropped, full, literal, strict=True):
        assert np.array_equal(np.sort(c), np.sort(f))
        assert np.array_equal(np.sort(f), np.sort(o))
    assert hd95(a, b, spacing, 90.0) == hd95_full_volume(a, b, spacing, 90.0)


def test_bounding_boxes():
    m = np.zeros((4, 5, 6), bool)
    assert bounding_box(m) is None
    m[1, 2, 3] = m[2, 4, 0] = True
    assert bounding_box(m) == (slice(1, 3), slice(2, 5), slice(0, 4))
    assert union_box(None, (slice(0, 1),) * 3, (slice(2, 3),) * 3) == (slice(0, 3),) * 3
    assert union_box(None, None) is None
