"""CellSeg instance matching on hand-made label images."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from pytest_rexmle.metrics.instance import (
    Counts,
    f1,
    image_counts,
    image_f1,
    pair_iou,
    remove_border_cells,
    true_positives,
)


def blank(h: int = 12, w: int = 12) -> np.ndarray:
    return np.zeros((h, w), dtype=np.int64)


# == boundary-cell removal ============================================================================
def test_border_cells_are_removed_and_the_rest_relabelled():
    m = blank(8, 8)
    m[0:2, 0:2] = 5      # in the outer rows -> removed
    m[2:4, 2:4] = 7      # rows/cols 2-3: interior of an 8×8 image (frame = rows/cols 0,1,6,7)
    m[3:6, 5] = 30       # cols 5 only, rows 3-5: interior
    m[5:7, 3] = 9        # reaches row 6 (second-to-last) -> removed
    out = remove_border_cells(m)
    expected = blank(8, 8)
    expected[2:4, 2:4] = 1   # 7 -> 1 (order kept)
    expected[3:6, 5] = 2     # 30 -> 2
    np.testing.assert_array_equal(out, expected)


def test_border_removal_of_an_empty_image():
    assert remove_border_cells(blank(5, 5)).max() == 0


# == IoU and matching ==================================================================================
def test_single_cell_iou_075_matches_up_to_threshold_07():
    g, p = blank(), blank()
    g[3:7, 3:7] = 1          # 16 px
    p[3:6, 3:7] = 4          # 12 px inside it -> IoU = 12/16 = 0.75
    ti, pi, iou = pair_iou(g, remove_border_cells(p))
    assert iou.tolist() == [0.75]
    scores = image_f1(g, p)
    assert scores == {0.5: 1.0, 0.6: 1.0, 0.7: 1.0, 0.8: 0.0, 0.9: 0.0}


def test_f1_from_counts_three_true_two_predicted():
    g, p = blank(16, 16), blank(16, 16)
    g[2:4, 2:4], g[6:8, 6:8], g[10:12, 10:12] = 1, 2, 3
    p[2:4, 2:4], p[6:8, 6:8] = 8, 9
    c = image_counts(g, p, (0.5,))[0.5]
    assert c == Counts(tp=2, fp=0, fn=1, n_true=3, n_pred=2)
    # P = 2/2, R = 2/3 -> F1 = 2·(2/3)/(5/3) = 0.8
    assert f1(c) == pytest.approx(0.8)


def test_empty_prediction_counts_zero_as_the_organisers():
    g = blank()
    g[4:7, 4:7] = 1
    c = image_counts(g, blank(), (0.5,))[0.5]
    assert (c.tp, c.fp, c.fn) == (0, 0, 0)      # organisers: FN = 0 when nothing is predicted
    assert f1(c) == 0.0
    assert image_f1(blank(), blank()) == {t: 0.0 for t in (0.5, 0.6, 0.7, 0.8, 0.9)}  # TP = 0 -> F1 = 0


def test_iou_exactly_half_is_matched_once():
    g, p = blank(), blank()
    g[4:6, 3:7] = 1          # 2×4 = 8 px
    p[4:6, 3:5] = 1          # left half  -> IoU 4/8 = 0.5
    p[4:6, 5:7] = 2          # right half -> IoU 4/8 = 0.5
    c = image_counts(g, p, (0.5, 0.6))
    # both pairs reach 0.5 but one ground-truth cell matches one prediction: TP 1, FP 1, FN 0
    assert c[0.5] == Counts(1, 1, 0, 1, 2)
    assert f1(c[0.5]) == pytest.approx(2 / 3)   # P = 1/2, R = 1 -> 2·0.5/1.5
    assert c[0.6].tp == 0


def _organisers_tp(g: np.ndarray, p: np.ndarray, t: float) -> int:
    """The dense formulation of compute_metric: full IoU matrix, Hungarian on the full cost."""
    ng, np_ = g.max(), p.max()
    overlap = np.zeros((ng + 1, np_ + 1))
    np.add.at(overlap, (g.ravel(), p.ravel()), 1)
    iou = overlap / (overlap.sum(0, keepdims=True) + overlap.sum(1, keepdims=True) - overlap)
    iou = iou[1:, 1:]
    cost = -(iou >= t).astype(float) - iou / (2 * min(ng, np_))
    r, c = linear_sum_assignment(cost)
    return int((iou[r, c] >= t).sum())


def test_reduced_assignment_equals_the_dense_one():
    rng = np.random.default_rng(3)
    for _ in range(40):
        g = rng.integers(0, 6, (10, 10))
        p = rng.integers(0, 7, (10, 10))
        # make them blocky so that good matches exist
        g = np.repeat(np.repeat(g[:5, :5], 2, 0), 2, 1)
        p = np.repeat(np.repeat(p[:5, :5], 2, 0), 2, 1)
        p = np.where(rng.random(p.shape) < 0.1, 0, p)
        _, g = np.unique(g, return_inverse=True)
        _, p = np.unique(p, return_inverse=True)
        g, p = g.reshape(10, 10), p.reshape(10, 10)
        if g.max() == 0 or p.max() == 0:
            continue
        ti, pi, iou = pair_iou(g, p)
        for t in (0.3, 0.5, 0.7):
            assert true_positives(ti, pi, iou, int(g.max()), int(p.max()), t) == _organisers_tp(g, p, t)


# == tiling of large images ==============================================================================
def test_tiling_follows_the_organisers_counts():
    g, p = blank(14, 14), blank(14, 14)
    g[2:4, 2:4] = p[2:4, 2:4] = 1        # c1: interior of tile (0,0), predicted
    g[2:4, 10:12] = 2                    # c2: interior of tile (0,1) (local cols 2-3), not predicted
    g[6:10, 3:5] = p[6:10, 3:5] = 3      # c3: crosses the tile row boundary at 8 -> in both tiles' frames
    untiled = image_counts(g, p, (0.5,))[0.5]
    # untiled: all three true cells interior, c1 and c3 predicted -> P 1, R 2/3 -> F1 0.8
    assert untiled == Counts(2, 0, 1, 3, 2)
    assert f1(untiled) == pytest.approx(0.8)
    # tiles of 8 (padded to 16×16): c3 touches a frame in both tiles -> dropped. Tile (0,0): c1 TP.
    # Tile (0,1): nG 1, nP 0 -> TP = FP = FN = 0 but its cell still counts in nG (organisers' recall
    # = TP / true_num) -> P = 1/1, R = 1/2 -> F1 = 2/3 (summing FN would give R = 1 and F1 = 1).
    tiled = image_counts(g, p, (0.5,), max_untiled_pixels=1, tile=8)[0.5]
    assert tiled == Counts(1, 0, 0, 2, 1)
    assert f1(tiled) == pytest.approx(2 / 3)


def test_tiling_threshold_is_strictly_below():
    g = blank(14, 14)
    g[4:8, 4:8] = 1
    # 14·14 = 196 pixels: untiled when 196 < limit, tiled (8×8 tiles: the cell crosses into the frame) otherwise
    assert image_f1(g, g, (0.5,), max_untiled_pixels=197, tile=8) == {0.5: 1.0}
    assert image_f1(g, g, (0.5,), max_untiled_pixels=196, tile=8) == {0.5: 0.0}


def test_border_zero_removes_no_cell():
    """A frame of width 0 touches nothing: every cell stays, relabelled 1..K in order."""
    m = blank(6, 6)
    m[0, 0], m[2:4, 2:4], m[5, 5] = 7, 3, 9
    assert np.array_equal(np.unique(remove_border_cells(m, border=0)), [0, 1, 2, 3])


def padded_tiles_counts(truth, pred, tile, thresholds=(0.5, 0.7, 0.9)):
    """The organisers' tiling written out: every tile filled with background to tile×tile, then scored."""
    from pytest_rexmle.metrics.instance import _count

    h, w = truth.shape
    total = {t: Counts(0, 0, 0, 0, 0) for t in thresholds}
    for i in range(-(-h // tile)):
        for j in range(-(-w // tile)):
            box = (slice(i * tile, (i + 1) * tile), slice(j * tile, (j + 1) * tile))
            g, p = (np.pad(a[box], ((0, tile - a[box].shape[0]), (0, tile - a[box].shape[1]))) for a in (truth, pred))
            counts = _count(remove_border_cells(g), remove_border_cells(p), thresholds)
            total = {t: total[t] + counts[t] for t in thresholds}
    return total


@pytest.mark.parametrize("seed", range(8))
def test_tiles_cut_at_the_edge_count_as_the_filled_tiles(seed):
    # tiles cut past the right/bottom edge are scored unfilled, with the frame of the filled size; the cut
    # often lands inside the frame's width (a remainder of 1 or 2), where cells must still be dropped
    rng = np.random.default_rng(seed)
    tile = 16
    h, w = (int(x) for x in rng.integers(17, 60, size=2))
    h, w = (h, 2 * tile + 1) if seed == 0 else (2 * tile + 2, w) if seed == 1 else (h, w)
    truth = np.zeros((h, w), np.int64)
    for k in range(1, 40):               # square cells anywhere, some across tile lines and edges
        y, x, s = int(rng.integers(0, h)), int(rng.integers(0, w)), int(rng.integers(1, 5))
        truth[y:y + s, x:x + s] = k
    pred = np.where(rng.random((h, w)) < 0.9, truth, 0) + (truth == 0) * (rng.random((h, w)) < 0.01) * 99
    thresholds = (0.5, 0.7, 0.9)
    expected = padded_tiles_counts(truth, pred, tile, thresholds)
    assert image_counts(truth, pred, thresholds, max_untiled_pixels=1, tile=tile) == expected
    assert sum(c.n_true for c in expected.values()) > 0
