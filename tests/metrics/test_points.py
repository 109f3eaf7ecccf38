"""Centroid matching and per-class F1 of PUMA nuclei, by hand and against a
plain transcription of the organisers' pairwise loop."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_rexmle.metrics.points import (
    Point,
    case_class_f1,
    f1_from_counts,
    macro_f1_over_cases,
    match_counts,
    polygon_centroid,
)


# == centroids ==========================================================================================
def test_centroid_is_the_vertex_mean():
    # square (0,0),(2,0),(2,2),(0,2): mean = (1, 1)
    assert polygon_centroid([[0, 0], [2, 0], [2, 2], [0, 2]]) == (1.0, 1.0)
    # a listed closing duplicate counts: x = (0+2+2+0+0)/5 = 0.8, y = (0+0+2+2+0)/5 = 0.8
    assert polygon_centroid([[0, 0], [2, 0], [2, 2], [0, 2], [0, 0]]) == pytest.approx((0.8, 0.8))
    # a third coordinate is ignored
    assert polygon_centroid([[0, 0, 99], [3, 0, 99], [0, 3, -5]]) == (1.0, 1.0)


# == matching ===========================================================================================
def test_radius_is_strict():
    gt = [Point("a", 0, 0)]
    # (9, 12) is exactly 15 px away: not a match; (9, 11.9) is 14.93 px away: a match
    assert match_counts(gt, [Point("a", 9, 12)]) == {}
    assert match_counts(gt, [Point("a", 9, 11.9)]) == {"a": 1}


def test_classes_never_match_each_other():
    assert match_counts([Point("a", 0, 0)], [Point("b", 0, 0)]) == {}


def test_highest_score_wins_then_distance_then_file_order():
    # g0 at 0: candidates A (d 1, s .5) and B (d 10, s .9) -> B (score first); g1 at 2 then takes A.
    gt = [Point("a", 0, 0), Point("a", 2, 0)]
    pred = [Point("a", 1, 0, 0.5), Point("a", 10, 0, 0.9)]
    assert match_counts(gt, pred) == {"a": 2}
    # with B's score lowered to .5 the tie goes to the nearer A; g1 at 14 then still reaches B (d 4)
    gt = [Point("a", 0, 0), Point("a", 14, 0)]
    assert match_counts(gt, [Point("a", 1, 0, 0.5), Point("a", 10, 0, 0.5)]) == {"a": 2}
    # g0 at 0 with candidates at x=-3 and x=3 (same score, same distance): the first listed (x=-3) wins,
    # so g1 at 16 (13 px from x=3, 19 px from x=-3) still finds x=3
    gt = [Point("a", 0, 0), Point("a", 16, 0)]
    assert match_counts(gt, [Point("a", -3, 0), Point("a", 3, 0)]) == {"a": 2}
    # ... and in the other file order g0 takes x=3 and g1 is left with nothing within 15 px
    assert match_counts(gt, [Point("a", 3, 0), Point("a", -3, 0)]) == {"a": 1}


def test_exact_duplicates_follow_the_organisers_removal():
    # P0 (5,0) s.1 and P1 (5,0) s.9 share a centroid; P2 (-5,0) s.5.
    # g0 (0,0): P1 wins, but the organisers delete the FIRST prediction at (5,0), i.e. P0; P1 stays.
    # g1 (8,0): P1 again (d 3, s .9) beats P2 (d 13). g2 (-14,0): P2 (d 9). -> 3 matches.
    # (Deleting the winner itself would leave g1 with P2 and g2 with nothing: 2 matches.)
    gt = [Point("a", 0, 0), Point("a", 8, 0), Point("a", -14, 0)]
    pred = [Point("a", 5, 0, 0.1), Point("a", 5, 0, 0.9), Point("a", -5, 0, 0.5)]
    assert match_counts(gt, pred) == {"a": 3}


# == F1 =================================================================================================
def test_f1_from_counts():
    # tp 2, 3 predictions, 4 truths: P = 2/3, R = 1/2, F1 = 2·(1/3)/(7/6) = 4/7
    assert f1_from_counts(2, 3, 4) == pytest.approx(4 / 7)
    assert f1_from_counts(0, 0, 5) == 0.0     # no predictions: P undefined -> 0, F1 0
    assert f1_from_counts(0, 3, 0) == 0.0     # no truths
    assert f1_from_counts(0, 0, 0) == 0.0


def test_case_f1_covers_classes_of_truth_or_prediction():
    gt = [Point("a", 0, 0), Point("a", 50, 50), Point("b", 100, 100)]
    pred = [Point("a", 1, 1), Point("c", 100, 100)]
    # a: tp 1, 1 pred, 2 gt -> P 1, R 1/2 -> 2/3; b: no pred -> 0; c: no gt -> 0
    assert case_class_f1(gt, pred) == pytest.approx({"a": 2 / 3, "b": 0.0, "c": 0.0})
    assert case_class_f1([], []) == {}


def test_macro_divides_by_all_cases():
    # a: (1 + .5)/2 = .75; b occurs only in case 1: .5/2 = .25 (case 2 adds 0); f1 = (.75+.25)/2 = .5
    macro, per_class = macro_f1_over_cases([{"a": 1.0, "b": 0.5}, {"a": 0.5}])
    assert macro == pytest.approx(0.5)
    assert per_class == pytest.approx({"a": 0.75, "b": 0.25})
    assert macro_f1_over_cases([{}, {}]) == (0.0, {})
    assert macro_f1_over_cases([]) == (0.0, {})
    assert isinstance(macro, float) and all(type(v) is float for v in per_class.values())


# == equality with the organisers' pairwise loop ========================================================
def organisers_loop(gt: list[Point], pred: list[Point]) -> dict[str, int]:
    """Transcription of the published rule: every pair, stable sort by (-score, distance), then delete
    the first remaining same-class prediction whose centroid equals the winner's."""
    pool: dict[str, list[Point]] = {}
    for p in pred:
        pool.setdefault(p.name, []).append(p)
    tp: dict[str, int] = {}
    for g in gt:
        eligible = []
        for p in pool.get(g.name, []):
            d = float(np.linalg.norm(np.array([g.x, g.y]) - np.array([p.x, p.y])))
            if d < 15:
                eligible.append((p, d))
        eligible.sort(key=lambda e: (-e[0].score, e[1]))
        if eligible:
            best = eligible[0][0]
            tp[g.name] = tp.get(g.name, 0) + 1
            for i, p in enumerate(pool[g.name]):
                if (p.x, p.y) == (best.x, best.y):
                    del pool[g.name][i]
                    break
    return tp


coordinate = st.integers(0, 40).map(float)
points = st.lists(st.builds(Point, st.sampled_from("ab"), coordinate, coordinate,
                            st.sampled_from([1.0, 0.5, 0.9])), max_size=25)


@settings(max_examples=30, deadline=None)
@given(gt=points, pred=points)
def test_tree_matching_equals_the_pairwise_loop(gt, pred):
    # small integer grid and few score levels force many exact ties and duplicate centroids
    assert match_counts(gt, pred) == organisers_loop(gt, pred)


def test_tree_matching_equals_the_pairwise_loop_on_dense_random_scenes():
    rng = np.random.default_rng(7)
    for _ in range(20):
        gt = [Point(str(rng.choice(["a", "b", "c"])), *rng.uniform(0, 100, 2)) for _ in range(150)]
        pred = [Point(str(rng.choice(["a", "b", "c"])), *rng.uniform(0, 100, 2), float(rng.choice([0.3, 0.7, 1.0])))
                for _ in range(150)]
        assert match_counts(gt, pred) == organisers_loop(gt, pred)


def test_overflowing_centroids_never_match_but_count():
    # vertices of 1e308 overflow the mean to inf; the organisers' `distance < 15` is then false
    far = polygon_centroid([[1e308, 1e308]] * 3)
    assert far == (float("inf"), float("inf"))
    gt = [Point("a", 0, 0)]
    pred = [Point("a", *far), Point("a", float("nan"), 0.0), Point("a", 1, 0)]
    assert match_counts(gt, [Point("a", *far)]) == {}
    # one match among 3 predictions: P = 1/3, R = 1 -> F1 = 2·(1/3)/(4/3) = 1/2
    assert case_class_f1(gt, pred) == {"a": 0.5}
    assert match_counts(gt, pred) == organisers_loop(gt, pred)
