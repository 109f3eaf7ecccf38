"""Topology metrics of TopCoW / TopBrain on hand-computable cases."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import ndimage
from skimage.morphology import skeletonize

from pytest_rexmle.metrics.labelindex import LabelIndex
from pytest_rexmle.metrics.topology import (
    FN,
    FP,
    TN,
    TP,
    balanced_accuracy,
    cldice_from_skeletons,
    components,
    detection,
    edge_lists,
    f1_from_counts,
    label_adjacency,
    lr_flipped,
    neighbor_error,
    region_matches,
    skeleton_xyz,
    variant,
)


def cldice(pred: np.ndarray, truth: np.ndarray) -> float:
    """clDice of two masks as the graders compute it (skeletons of the (x, y, z) transposes)."""
    p, g = pred != 0, truth != 0
    return cldice_from_skeletons(p, g, skeleton_xyz(p), skeleton_xyz(g))


# -- components / clDice ---------------------------------------------------------------------------
def test_components_use_26_connectivity():
    m = np.zeros((3, 3, 3), bool)
    m[0, 0, 0] = m[1, 1, 1] = True          # corner-touching only: one 26-component
    assert components(m) == 1
    m[1, 1, 1] = False
    m[2, 2, 2] = True                       # two voxels two steps apart: two components
    assert components(m) == 2
    assert components(np.zeros((2, 2, 2), bool)) == 0


def rod(length: int, n: int = 7) -> np.ndarray:
    """A 1-voxel rod along the array's first axis (z) starting at z = 1."""
    m = np.zeros((n, 3, 3), bool)
    m[1:1 + length, 1, 1] = True
    return m


def test_cldice_hand_example():
    # A 1-voxel-wide rod is its own Lee skeleton. G = 5 voxels, P = its first 3 voxels.
    # tprec = |S_P ∩ G| / |S_P| = 3/3 = 1; tsens = |S_G ∩ P| / |S_G| = 3/5 = 0.6;
    # clDice = 2·1·0.6 / 1.6 = 0.75.
    assert cldice(rod(3), rod(5)) == pytest.approx(0.75)
    assert cldice(rod(5), rod(5)) == pytest.approx(1.0)


def test_cldice_empty_rules():
    empty = np.zeros((7, 3, 3), bool)
    assert cldice(empty, empty) == 0.0            # both skeletons empty -> tprec = tsens = 0
    assert cldice(empty, rod(5)) == 0.0           # tprec 0 (empty S_P), tsens 0 (S_G ∩ ∅)
    assert cldice(rod(5), empty) == 0.0


def test_cldice_skeletonizes_the_xyz_transpose():
    # Lee thinning is not axis-order invariant; the organisers skeletonise the (x, y, z) array.
    rng = np.random.default_rng(7)
    g = ndimage.binary_dilation(rng.random((14, 16, 18)) < 0.01, iterations=2)
    p = ndimage.binary_dilation(g, iterations=1) & (rng.random(g.shape) < 0.9)
    gx, px = g.transpose(2, 1, 0), p.transpose(2, 1, 0)
    sp, sg = skeletonize(px), skeletonize(gx)
    tprec, tsens = (sp & gx).sum() / sp.sum(), (sg & px).sum() / sg.sum()
    assert cldice(p, g) == pytest.approx(2 * tprec * tsens / (tprec + tsens))


# -- detection / F1 ----------------------------------------------------------------------------------
def test_detection_threshold_and_absent_cases():
    # IoU = both / (pred + truth - both): 1 / (2 + 3 - 1) = 0.25 -> TP exactly at the threshold
    assert detection(n_pred=2, n_truth=3, n_both=1) == TP
    assert detection(n_pred=3, n_truth=3, n_both=1) == FN         # 1/5 = 0.2
    assert detection(n_pred=0, n_truth=3, n_both=0) == FN
    assert detection(n_pred=4, n_truth=0, n_both=0) == FP
    assert detection(n_pred=0, n_truth=0, n_both=0) == TN


def test_f1_from_counts():
    assert f1_from_counts(1, 1, 0) == pytest.approx(2 / 3)     # 2·1 / (2 + 1 + 0)
    assert f1_from_counts(0, 0, 0) == 0.0
    assert f1_from_counts(0, 2, 3) == 0.0


# -- adjacency ----------------------------------------------------------------------------------------
def test_label_adjacency_hand_example():
    a = np.zeros((3, 4, 5), np.uint8)
    a[0, 0, 0] = 1
    a[1, 1, 1] = 2          # diagonal to label 1: 26-neighbours
    a[1, 1, 2] = 3          # face neighbour of 2; diagonal to nothing else
    a[2, 3, 4] = 4          # isolated
    adj = label_adjacency(a)
    assert adj == {1: {2}, 2: {1, 3}, 3: {2}, 4: set()}


def brute_force_adjacency(a: np.ndarray) -> dict[int, set[int]]:
    """The organisers' way: visit every voxel and its 26 neighbours."""
    out = {int(v): set() for v in np.unique(a) if v}
    for z, y, x in itertools.product(*(range(s) for s in a.shape)):
        if not a[z, y, x]:
            continue
        for dz, dy, dx in itertools.product((-1, 0, 1), repeat=3):
            q = (z + dz, y + dy, x + dx)
            if all(0 <= c < s for c, s in zip(q, a.shape, strict=True)) and a[q] and a[q] != a[z, y, x]:
                out[int(a[z, y, x])].add(int(a[q]))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_label_adjacency_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 6, size=(5, 6, 7)).astype(np.uint8) * (rng.random((5, 6, 7)) < 0.3)
    assert label_adjacency(a) == brute_force_adjacency(a)
    assert label_adjacency(a, LabelIndex.of(a)) == brute_force_adjacency(a)
    wide = a.astype(np.uint16) * 300                         # labels above 255 (a uint16 prediction)
    assert label_adjacency(wide) == brute_force_adjacency(wide)


def test_label_adjacency_does_not_wrap_around_the_array():
    # label 2 sits at the far end of the previous row / slice in raster order: a flat-index neighbour of
    # label 1, but not a 26-neighbour
    a = np.zeros((3, 4, 5), np.uint8)
    a[1, 1, 0] = 1
    a[1, 0, 4] = 2        # flat index just before a[1, 1, 0]
    a[0, 3, 4] = 3        # the last voxel of the previous slice
    a[2, 2, 4] = 4        # x = 4 of the row below: wraps to x = 0 of the next row only by flat offset
    assert label_adjacency(a) == brute_force_adjacency(a) == {1: set(), 2: set(), 3: set(), 4: set()}


# -- CoW edges, flip test, topology match ------------------------------------------------------------
def test_edge_lists_and_variants():
    # present labels are the keys; 12 touches 6 (L-A1), 11 does not touch 4 (no R-A1), Acom present;
    # 3 touches BA (L-P1), 2 present but not touching BA (fetal R-PCA), R-Pcom present.
    adj = {1: {3}, 2: {8}, 3: {1}, 4: {8}, 6: {12}, 8: {2, 4}, 10: {11, 12}, 11: {10}, 12: {6, 10}}
    ant, pos = edge_lists(adj)
    assert ant == [1, 1, 0, 0] and pos == [0, 1, 0, 1]
    assert variant("anterior", ant) == "Var_Ant_1_1_0_0"
    assert variant("posterior", pos) == "Var_Pos_0_1_0_1"
    assert edge_lists({}) == ([0, 0, 0, 0], [0, 0, 0, 0])


def two_blobs(left: int, right: int, left_x: int, right_x: int) -> np.ndarray:
    a = np.zeros((2, 2, 10), np.uint8)
    a[:, :, left_x] = left
    a[:, :, right_x] = right
    return a


def test_lr_flip_test():
    # LPS+: the patient's left has the larger x index. L-ICA (6) at x=7, R-ICA (4) at x=2: fine.
    assert lr_flipped(two_blobs(6, 4, 7, 2), "anterior") is False
    assert lr_flipped(two_blobs(6, 4, 2, 7), "anterior") is True
    # ICAs incomplete -> ACAs (12 left, 11 right) decide
    assert lr_flipped(two_blobs(12, 11, 1, 8), "anterior") is True
    # nothing to compare -> not flipped
    assert lr_flipped(two_blobs(12, 4, 1, 8), "anterior") is False
    assert lr_flipped(two_blobs(3, 2, 0, 9), "posterior") is True
    assert lr_flipped(two_blobs(6, 4, 2, 7), "posterior") is False


def test_region_matches_each_criterion():
    det = {10: TP, 11: TP, 12: TP, 15: TN}
    adj = {10: {11, 12}, 11: {4, 10}, 12: {6, 10}}
    b0 = {10: 1, 11: 1, 12: 1}
    assert region_matches("anterior", det, adj, adj, b0, b0, flipped=False)
    assert not region_matches("anterior", {**det, 15: FP}, adj, adj, b0, b0, flipped=False)     # (i)
    assert not region_matches("anterior", det, {**adj, 11: {10}}, adj, b0, b0, flipped=False)   # (ii)
    assert not region_matches("anterior", det, adj, adj, {**b0, 12: 2}, b0, flipped=False)      # (iii)
    assert not region_matches("anterior", det, adj, adj, b0, b0, flipped=True)                  # (iv)
    # posterior labels are all absent in both: TN everywhere, nothing else to compare -> match
    assert region_matches("posterior", {2: TN, 3: TN, 8: TN, 9: TN}, {}, {}, {}, {}, flipped=False)


# -- aggregation -------------------------------------------------------------------------------------
def test_balanced_accuracy_sklearn_semantics():
    # class a: 1 of 2 right -> 0.5; class b: 2 of 3 right -> 2/3; class c only predicted: ignored.
    # mean = (0.5 + 2/3) / 2 = 7/12.
    assert balanced_accuracy(list("aabbb"), list("abbbc")) == pytest.approx(7 / 12)
    assert balanced_accuracy(["x"], ["x"]) == 1.0
    assert balanced_accuracy(["x", "y"], ["FAIL", "FAIL"]) == 0.0
    with pytest.raises(ValueError):
        balanced_accuracy([], [])


def test_neighbor_error():
    # label 1 touches {2, 3} but only 2 is valid -> 1; label 2 -> 0; label 3 touches 1, invalid -> 1.
    # mean over predicted labels {1, 2, 3} = 2/3. A label missing from the table has no valid neighbour.
    adj = {1: {2, 3}, 2: {1}, 3: {1}}
    valid = {1: frozenset({2}), 2: frozenset({1}), 3: frozenset()}
    assert neighbor_error(adj, valid) == pytest.approx(2 / 3)
    assert neighbor_error({}, valid) == 0.0
    assert neighbor_error({7: {1}, 1: {7}}, valid) == pytest.approx(1.0)   # (1 + 1) / 2
