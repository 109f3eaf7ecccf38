"""The grading fast paths give exactly what the straightforward computations give.

Sparse label index vs ``find_objects``/counts/medians, own-box skeletons through the directly loaded Lee
kernel vs scikit-image's public ``skeletonize`` on the whole array, SimpleITK component counts vs
scipy's, and the thread map's ordering and error behaviour.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage
from skimage.morphology import skeletonize

from pytest_rexmle.metrics.components import label_components
from pytest_rexmle.metrics.crop import bounding_box
from pytest_rexmle.metrics.labelindex import LabelIndex, nonzero_flat
from pytest_rexmle.metrics.parallel import parallel_map
from pytest_rexmle.metrics.topology import components, skeleton_xyz


def random_labels(seed: int, shape=(14, 17, 19), labels: int = 6) -> np.ndarray:
    rng = np.random.default_rng(seed)
    seeds = (rng.random(shape) < 0.01) * rng.integers(1, labels + 1, shape)
    return ndimage.grey_dilation(seeds.astype(np.uint8), size=(3, 3, 3))


@pytest.mark.parametrize("seed", range(8))
def test_label_index_matches_find_objects_counts_and_medians(seed):
    arr = random_labels(seed)
    index = LabelIndex.of(arr)
    top = int(arr.max())
    boxes = ndimage.find_objects(arr, max_label=top)
    counts = np.bincount(arr.ravel(), minlength=top + 1)
    assert index.labels == tuple(v for v in range(1, top + 1) if counts[v])
    for label in range(1, top + 2):
        expected_box = boxes[label - 1] if label <= top else None
        assert index.box(label) == expected_box
        assert index.count(label) == (int(counts[label]) if label <= top else 0)
        if label <= top and counts[label]:
            assert index.median_x(label) == float(np.median(np.nonzero(arr == label)[2]))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.int64, bool])
@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 1001])
def test_nonzero_flat_equals_flatnonzero(dtype, size):
    rng = np.random.default_rng(size)
    arr = ((rng.random(size) < 0.1) * rng.integers(-3, 4, size)).astype(dtype)
    arr[-1:] = 1                                   # the tail after the last whole word
    assert np.array_equal(nonzero_flat(arr), np.flatnonzero(arr))
    cube = np.zeros((6, 7, 9), dtype)
    cube[::2, 1, ::3] = 1
    assert np.array_equal(nonzero_flat(cube), np.flatnonzero(cube))
    assert np.array_equal(nonzero_flat(cube[:, ::2]), np.flatnonzero(cube[:, ::2]))   # not contiguous


def test_nonzero_flat_leaves_floats_to_numpy():
    arr = np.array([0.0, -0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, -0.0, 2.0], np.float32)
    assert nonzero_flat(arr).tolist() == [2, 9]        # -0.0 is zero, although its bits are not


@pytest.mark.parametrize("seed", range(6))
def test_own_box_skeleton_equals_the_whole_array_skeleton(seed):
    mask = random_labels(seed, labels=1) != 0
    whole = skeletonize(np.ascontiguousarray(mask.transpose(2, 1, 0))).transpose(2, 1, 0)
    skeleton, box = skeleton_xyz(mask)
    placed = np.zeros_like(mask)
    placed[box] = skeleton
    assert np.array_equal(placed, whole)


@pytest.mark.parametrize("seed", range(6))
def test_skeleton_from_given_components_and_box_equals_its_own(seed):
    # the per-label work passes the b0 labelling and the index's box; the skeleton must not change
    mask = random_labels(seed, shape=(20, 23, 25), labels=1) != 0
    mask &= np.random.default_rng(seed).random(mask.shape) < 0.8      # several components
    own = skeleton_xyz(mask)
    given = skeleton_xyz(mask, label_components(mask), bounding_box(mask))
    assert own is not None and given is not None
    assert own[1] == given[1] and np.array_equal(own[0], given[0])


def test_empty_mask_has_no_skeleton():
    assert skeleton_xyz(np.zeros((3, 4, 5), bool)) is None


@pytest.mark.parametrize("seed", range(6))
def test_simpleitk_component_count_equals_scipy(seed):
    mask = random_labels(seed, labels=1) != 0
    mask &= np.random.default_rng(seed).random(mask.shape) < 0.7      # break it into pieces
    assert components(mask) == ndimage.label(mask, structure=np.ones((3, 3, 3)))[1]


def test_parallel_map_keeps_order_and_raises_the_first_error_in_order():
    assert parallel_map(lambda x: x * x, range(10), cost=lambda x: x) == [x * x for x in range(10)]

    def fail_on_odd(x):
        if x % 2:
            raise ValueError(f"odd {x}")
        return x

    with pytest.raises(ValueError, match="odd 1"):
        parallel_map(fail_on_odd, range(6))


def test_parallel_map_runs_serially_when_capped(monkeypatch):
    import threading

    monkeypatch.setenv("REXMLE_GRADE_THREADS", "1")
    names = parallel_map(lambda _: threading.current_thread().name, range(4))
    assert names == [threading.current_thread().name] * 4


def test_scattered_components_thin_each_on_its_own_box():
    # a vessel-like blob plus stray voxels far away: split into components, same skeleton as the whole
    rng = np.random.default_rng(11)
    mask = np.zeros((40, 60, 70), bool)
    mask[2:14, 3:25, 4:30] = ndimage.binary_dilation(rng.random((12, 22, 26)) < 0.02, iterations=2)
    mask[35:38, 55:58, 60:66] = True
    mask[30, 5, 68] = True
    whole = skeletonize(np.ascontiguousarray(mask.transpose(2, 1, 0))).transpose(2, 1, 0)
    skeleton, box = skeleton_xyz(mask)
    placed = np.zeros_like(mask)
    placed[box] = skeleton
    assert np.array_equal(placed, whole)
