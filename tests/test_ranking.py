"""Positions, mean position, percentile, overall score and medals (docs/reading-the-report.md).

Every expected value below is computed by hand from the task's leaderboard.csv; the computation is written
next to it.
"""

from __future__ import annotations

import math

import pytest

from pytest_rexmle.errors import RankingError
from pytest_rexmle.leaderboard import Leaderboard
from pytest_rexmle.report.model import SessionReport, build_report
from pytest_rexmle.report.render import pct
from pytest_rexmle.scoring.ranking import (
    check_metric_names,
    medal_thresholds,
    overall_score,
    percentile,
    position,
    rank,
)
from pytest_rexmle.scoring.result import TaskResult
from pytest_rexmle.task import registry


def task(task_id):
    return registry().get(task_id)


# -- the worked example of docs/reading-the-report.md ------------------------------------------------------

def test_worked_example_topcow_cta_det():
    # iou 0.6707: humans strictly above: 0.79 0.76 0.74 0.74 0.72 0.72 -> 6 -> position 7
    # boundary_iou 0.6110: humans strictly above: 0.69 0.65 0.62 0.62 -> 4 -> position 5
    # mean = (7 + 5) / 2 = 6.0; percentile = 1 - (6 - 1) / 8 = 0.375
    r = rank(task("topcow-cta-det"), {"boundary_iou": 0.6110, "iou": 0.6707})
    assert r.positions == {"boundary_iou": 5, "iou": 7}
    assert r.mean_position == 6.0
    assert r.n_humans == 8
    assert r.percentile == pytest.approx(0.375, abs=1e-12)
    assert r.task_id == "topcow-cta-det"
    assert r.to_json() == {"task": "topcow-cta-det", "positions": {"boundary_iou": 5, "iou": 7},
                           "mean_position": 6.0, "percentile": 0.375, "n_humans": 8}


def test_alias_task_gives_same_ranking():
    r = rank(task("topcow-track1-task2"), {"boundary_iou": 0.6110, "iou": 0.6707})
    assert r.positions == {"boundary_iou": 5, "iou": 7}


def test_tie_gets_the_shared_best_position():
    # iou 0.74 ties ARG and IMR; strictly above: 0.79, 0.76 -> position 3
    # boundary_iou 0.60 ties CLAIM and junqiangchen; strictly above: .69 .65 .62 .62 -> position 5
    # mean (3 + 5) / 2 = 4.0; percentile 1 - 3/8 = 0.625
    r = rank(task("topcow-cta-det"), {"boundary_iou": 0.60, "iou": 0.74})
    assert r.positions == {"boundary_iou": 5, "iou": 3}
    assert r.mean_position == 4.0
    assert r.percentile == pytest.approx(0.625)


def test_no_rounding_before_comparison():
    # 0.62 + 1e-12 beats both 0.62 rows: strictly above are 0.69, 0.65 -> 3
    # 0.62 - 1e-12 loses to both: strictly above 0.69 0.65 0.62 0.62 -> 5
    t = task("topcow-cta-det")
    assert rank(t, {"boundary_iou": 0.62 + 1e-12, "iou": 0.80}).positions["boundary_iou"] == 3
    assert rank(t, {"boundary_iou": 0.62 - 1e-12, "iou": 0.80}).positions["boundary_iou"] == 5


# -- test vectors -------------------------------------------------------------------------------------

VECTORS = [
    # topcow-cta-det: boundary_iou .6518 < .69 only -> 2; iou .6999 below 6 humans (.79..0.72) -> 7
    # mean 4.5; 1 - 3.5/8 = 0.5625
    ("topcow-cta-det", {"boundary_iou": 0.6518, "iou": 0.6999}, {"boundary_iou": 2, "iou": 7}, 4.5, 0.5625),
    # boundary .5873 below .69 .65 .62 .62 .60 .60 -> 7; iou .6485 below .79 .76 .74 .74 .72 .72 -> 7
    # mean 7; 1 - 6/8 = 0.25
    ("topcow-cta-det", {"boundary_iou": 0.5873, "iou": 0.6485}, {"boundary_iou": 7, "iou": 7}, 7.0, 0.25),
    # topcow-mra-det (N=7): boundary .5993 below .77 .72 .70 .67 .66 .65 -> 7 (only .01 below);
    # iou .6587 below .85 .82 .80 .77 .77 .77 -> 7; mean 7; 1 - 6/7 = 1/7
    ("topcow-mra-det", {"boundary_iou": 0.5993, "iou": 0.6587}, {"boundary_iou": 7, "iou": 7}, 7.0, 1 / 7),
    # topcow-cta-cls (N=6): anterior .2778 below .73 .87 .36 -> 4 (the three .25 are below);
    # posterior .1917 below .87 .64 .38 -> 4 (.19 .17 .16 are below); mean 4; 1 - 3/6 = 0.5
    ("topcow-cta-cls", {"anterior_acc": 0.2778, "posterior_acc": 0.1917},
     {"anterior_acc": 4, "posterior_acc": 4}, 4.0, 0.5),
    # topcow-mra-cls (N=6): anterior .3333 below .89 .86 .37 -> 4; posterior .0714 below all 6 -> 7
    # mean 5.5; 1 - 4.5/6 = 0.25
    ("topcow-mra-cls", {"anterior_acc": 0.3333, "posterior_acc": 0.0714},
     {"anterior_acc": 4, "posterior_acc": 7}, 5.5, 0.25),
    # ldct-iqa (N=6): 2.6248 below 2.7427 2.6843 2.6719 2.655 -> 5; 1 - 4/6 = 1/3
    ("ldct-iqa", {"score": 2.6248}, {"score": 5}, 5.0, 1 / 3),
    # 2.60897 also below 2.6202 -> 6; 1 - 5/6 = 1/6
    ("ldct-iqa", {"score": 2.60897}, {"score": 6}, 6.0, 1 / 6),
    # panther-t2 (N=10): dsc .2844 above only .1836, .0 -> 9; msd .4458 above only .4257 .0149 -> 9;
    # hd95 21.7672 (lower) smaller than every human (min 23.011) -> 1; masd 9.3905 (lower): smaller humans
    # 5.1319 6.1722 7.6881 8.1224 9.1115 -> 6; rmse 12778.1561 (lower) < min 16647.2197 -> 1
    # mean 26/5 = 5.2; 1 - 4.2/10 = 0.58
    ("panther-t2", {"dsc": 0.2844, "msd": 0.4458, "hd95": 21.7672, "masd": 9.3905, "rmse": 12778.1561},
     {"dsc": 9, "msd": 9, "hd95": 1, "masd": 6, "rmse": 1}, 5.2, 0.58),
    # panther-t1: dsc .3301 and msd .4593 below all 10 -> 11, 11; hd95 33.3998: humans below are
    # 8.5993 10.9263 12.3546 16.8751 12.4084 12.5297 -> 7; masd 18.9004: 1.673 2.2711 2.4296 3.9667 2.7267
    # 2.519 -> 7; rmse 25134.9312 above every human (max 19692.7241... 14846.3593) -> 11
    # mean 47/5 = 9.4; 1 - 8.4/10 = 0.16
    ("panther-t1", {"dsc": 0.3301, "msd": 0.4593, "hd95": 33.3998, "masd": 18.9004, "rmse": 25134.9312},
     {"dsc": 11, "msd": 11, "hd95": 7, "masd": 7, "rmse": 11}, 9.4, 0.16),
    # topbrain-cta-seg: dice .2591 < min .436 -> 11; cldice .3204 < min .499 -> 11; b0_error 5.6267 (lower):
    # all humans but 11.838 are smaller -> 10; hd95 86.5582 > max 80.217 -> 11; neighbor_error 1.5962: all but
    # 3.94 smaller -> 10; f1_side_road .1290 < min .226 -> 11; mean 64/6 = 10.667; 1 - 9.667/10 = 0.03333
    ("topbrain-cta-seg", {"dice": 0.2591, "cldice": 0.3204, "b0_error": 5.6267, "hd95": 86.5582,
                          "neighbor_error": 1.5962, "f1_side_road": 0.1290},
     {"dice": 11, "cldice": 11, "b0_error": 10, "hd95": 11, "neighbor_error": 10, "f1_side_road": 11},
     64 / 6, 1 - (64 / 6 - 1) / 10),
    # topbrain-mra-seg: dice, cldice -> 11; b0_error 2.8767: all but 5.307 smaller -> 10; hd95 275.209 -> 11;
    # neighbor_error .1107: smaller are 0.0 .008 .008 .016 .019 -> 6; f1_side_road 0.0 -> 11
    # mean 60/6 = 10; 1 - 9/10 = 0.10
    ("topbrain-mra-seg", {"dice": 0.0138, "cldice": 0.0172, "b0_error": 2.8767, "hd95": 275.2090,
                          "neighbor_error": 0.1107, "f1_side_road": 0.0},
     {"dice": 11, "cldice": 11, "b0_error": 10, "hd95": 11, "neighbor_error": 6, "f1_side_road": 11}, 10.0, 0.10),
]


@pytest.mark.parametrize("task_id, metrics, positions, mean_position, pct", VECTORS,
                         ids=[f"{v[0]}-{i}" for i, v in enumerate(VECTORS)])
def test_paper_vectors(task_id, metrics, positions, mean_position, pct):
    r = rank(task(task_id), metrics)
    assert r.positions == positions
    assert r.mean_position == pytest.approx(mean_position, abs=1e-12)
    assert r.percentile == pytest.approx(pct, abs=1e-12)


def test_paper_vector_rounded_values():
    # the table prints 10.667 / 0.03333 and 0.33333 / 0.16667 (5 significant digits)
    r = rank(task("topbrain-cta-seg"), {"dice": 0.2591, "cldice": 0.3204, "b0_error": 5.6267, "hd95": 86.5582,
                                        "neighbor_error": 1.5962, "f1_side_road": 0.1290})
    assert round(r.mean_position, 3) == 10.667
    assert round(r.percentile, 5) == 0.03333
    assert round(rank(task("ldct-iqa"), {"score": 2.60897}).percentile, 5) == 0.16667


def test_percentile_display_one_decimal():
    # displayed with one decimal (0.375 -> "37.5%"); 0.5625 prints as "56.3%" (56.25 rounded
    # half up), 0.142857 as "14.3%", 0.58 as "58.0%"
    assert pct(0.375) == "37.5%"
    assert pct(1 / 7) == "14.3%"
    assert pct(0.58) == "58.0%"
    assert pct(rank(task("topcow-cta-det"), {"boundary_iou": 0.6518, "iou": 0.6999}).percentile) == "56.3%"


# -- position(): directions and special values -----------------------------------------------------------

HUMANS = [1.0, 2.0, 3.0, 3.0, 5.0]  # N = 5


@pytest.mark.parametrize("agent, higher, lower", [
    # higher_better: 1 + #{h > a}; lower_better: 1 + #{h < a}
    (3.0, 2, 3),    # > 3: {5}; < 3: {1, 2}
    (4.0, 2, 5),    # > 4: {5}; < 4: {1, 2, 3, 3}
    (0.5, 6, 1),    # every human is above; none below
    (6.0, 1, 6),
    (1.0, 5, 1),    # tie with the best lower-better human -> shared position 1
    (5.0, 1, 5),    # tie with the best higher-better human -> 1; lower: 1 2 3 3 below -> 5
])
def test_position_both_directions(agent, higher, lower):
    assert position(agent, HUMANS, True) == higher
    assert position(agent, HUMANS, False) == lower


def test_position_nan_is_last_in_both_directions():
    assert position(float("nan"), HUMANS, True) == 6
    assert position(float("nan"), HUMANS, False) == 6


def test_position_infinities_compare_as_numbers():
    assert position(math.inf, HUMANS, True) == 1
    assert position(math.inf, HUMANS, False) == 6
    assert position(-math.inf, HUMANS, True) == 6
    assert position(-math.inf, HUMANS, False) == 1


def test_position_accepts_an_iterator():
    assert position(2.5, iter(HUMANS), True) == 4  # > 2.5: 3 3 5


def test_percentile_formula():
    assert percentile(1.0, 8) == 1.0
    assert percentile(9.0, 8) == 0.0
    assert percentile(6.0, 8) == 0.375
    assert percentile(4.5, 8) == 0.5625


def test_nan_metric_ranks_last_through_rank():
    # iou NaN -> N + 1 = 9; boundary .69 ties the best -> 1; mean 5; 1 - 4/8 = 0.5
    r = rank(task("topcow-cta-det"), {"boundary_iou": 0.69, "iou": float("nan")})
    assert r.positions == {"boundary_iou": 1, "iou": 9}
    assert r.percentile == pytest.approx(0.5)


def test_psnr_plus_inf_gets_position_one():
    # usenhance (N=10): psnr +inf -> 1; lncc .9065 ties NCIA, only .908 above -> 2; ssim .70 below all -> 11
    # mean 14/3; percentile 1 - (14/3 - 1)/10 = 1 - 11/30 = 19/30
    r = rank(task("usenhance"), {"lncc": 0.9065, "ssim": 0.70, "psnr": math.inf})
    assert r.positions == {"lncc": 2, "ssim": 11, "psnr": 1}
    assert r.mean_position == pytest.approx(14 / 3)
    assert r.percentile == pytest.approx(19 / 30)


def test_lower_better_minus_inf_is_best_plus_inf_is_worst():
    # isles22 (N=10), lesion_count_diff and abs_volume_diff are lower-better
    t = task("isles22")
    best = rank(t, {"dice": 1.0, "lesion_f1": 1.0, "lesion_count_diff": -math.inf, "abs_volume_diff": 0.0})
    assert best.positions == {"dice": 1, "lesion_f1": 1, "lesion_count_diff": 1, "abs_volume_diff": 1}
    worst = rank(t, {"dice": 0.0, "lesion_f1": 0.0, "lesion_count_diff": math.inf, "abs_volume_diff": 1e9})
    assert worst.positions == {"dice": 11, "lesion_f1": 11, "lesion_count_diff": 11, "abs_volume_diff": 11}


def test_extremes():
    # better than (or equal to the best) human on every isles22 metric -> positions 1 -> percentile 1.0
    t = task("isles22")
    best = rank(t, {"dice": 1.0, "lesion_f1": 1.0, "lesion_count_diff": 0.0, "abs_volume_diff": 0.0})
    assert best.mean_position == 1.0
    assert best.percentile == 1.0
    # worse than everyone -> N + 1 = 11 everywhere -> 1 - 10/10 = 0.0, the value a FAIL gets
    worst = rank(t, {"dice": 0.0, "lesion_f1": 0.0, "lesion_count_diff": 100.0, "abs_volume_diff": 100.0})
    assert worst.mean_position == 11.0
    assert worst.percentile == 0.0


def test_mixed_directions_seg_a():
    # seg-a: hd_50pc lower-better, dsc_50pc higher-better. humans hd_50pc include 2.6125 twice (the best).
    # hd 2.6125 ties the best -> 1; dsc 0.9234 is NVAUTO's value -> humans strictly above it decide.
    t = task("seg-a")
    board = Leaderboard.read(t.leaderboard_path)
    above = sum(1 for h in board.values["dsc_50pc"] if h > 0.9234)
    r = rank(t, {"hd_50pc": 2.6125, "dsc_50pc": 0.9234})
    assert r.positions["hd_50pc"] == 1
    assert r.positions["dsc_50pc"] == 1 + above == 2  # NVAUTO's stored dsc position is 2.0
    # std keys are not ranking metrics and need not be present
    assert set(r.positions) == {"hd_50pc", "dsc_50pc"}


# -- errors ----------------------------------------------------------------------------------------------

def test_missing_metric_is_an_error():
    with pytest.raises(RankingError, match=r"missing ranking metric.*boundary_iou"):
        rank(task("topcow-cta-det"), {"iou": 0.6707})


def test_missing_metric_all():
    with pytest.raises(RankingError, match="score"):
        rank(task("ldct-iqa"), {"plcc": 0.9, "srocc": 0.9, "krocc": 0.8})


def test_non_numeric_metric_is_an_error():
    with pytest.raises(RankingError, match="iou"):
        rank(task("topcow-cta-det"), {"boundary_iou": 0.6, "iou": "high"})


def test_unknown_metric_name_is_an_error():
    with pytest.raises(RankingError, match=r"unknown metric.*'ioux'"):
        check_metric_names(task("topcow-cta-det"), {"iou": 0.6, "boundary_iou": 0.6, "ioux": 1.0})


def test_known_extra_metrics_pass_the_name_check_and_do_not_rank():
    t = task("ldct-iqa")
    check_metric_names(t, {"score": 2.6, "plcc": 0.9, "srocc": 0.9, "krocc": 0.8})  # no error
    r = rank(t, {"score": 2.6248, "plcc": 0.01, "srocc": 0.01, "krocc": 0.01})
    assert r.positions == {"score": 5}


# -- overall score ------------------------------------------------------------------------------------

AIDE = {  # the paper's Table 3 overall example
    "ldct-iqa": 1 / 3, "panther-t1": 0.16, "panther-t2": 0.10, "topbrain-cta-seg": 1 / 60,
    "topbrain-mra-seg": 0.10, "topcow-cta-det": 0.375, "topcow-mra-det": 1 / 7, "topcow-cta-cls": 1 / 3,
    "topcow-mra-cls": 0.25,
}
AIDE_FAILS = ("puma-t1-tissue-seg", "puma-t2-nuclei-det")


def _aide_records():
    records = []
    for t in registry():
        n = Leaderboard.read(t.leaderboard_path).n
        if t.id in AIDE:
            mean = 1 + (1 - AIDE[t.id]) * n  # invert the percentile formula
            records.append(TaskResult(t.id, t.reference_id, "ok", None, {}, [m.key for m in t.ranking_metrics],
                                           {}, mean, n, AIDE[t.id]))
        elif t.id in AIDE_FAILS:
            records.append(TaskResult.failed(t, "invalid", "no valid submission", n))
        else:  # graded but worse than every human: percentile 0
            keys = [m.key for m in t.ranking_metrics]
            records.append(TaskResult(t.id, t.reference_id, "ok", None, {}, keys, {k: n + 1 for k in keys},
                                           float(n + 1), n, 0.0))
    return records


def test_overall_score_aide_example():
    # sum = 1/3 + .16 + .10 + 1/60 + .10 + .375 + 1/7 + 1/3 + .25 = 1.811190... ; / 20 = 0.0905595
    percentiles = [AIDE.get(t, 0.0) for t in registry().ids]
    assert len(percentiles) == 20
    assert sum(percentiles) == pytest.approx(1.81119, abs=1e-5)
    assert overall_score(percentiles) == pytest.approx(0.090560, abs=1e-6)
    assert f"{100 * overall_score(percentiles):.2f}%" == "9.06%"


def test_overall_score_fails_count_as_zero_not_skipped():
    # two challenges: 0.5 and a FAIL -> (0.5 + 0) / 2 = 0.25, not 0.5
    assert overall_score([0.5, 0.0]) == 0.25
    assert overall_score([]) == 0.0


def test_report_score_aide_example():
    doc = build_report(_aide_records(), agent="aide", agent_options={}, settings={}, run_id="r1")
    SessionReport.check(doc)
    assert doc["partial"] is False
    assert doc["n_fail"] == 2
    assert doc["selected"] == registry().ids
    assert doc["score"] == pytest.approx(0.090560, abs=1e-6)
    fails = {c["task_id"]: c for c in doc["tasks"] if c["status"] != "ok"}
    assert sorted(fails) == sorted(AIDE_FAILS)
    assert all(c["percentile"] == 0.0 and c["metrics"] is None for c in fails.values())


def test_report_partial_selection():
    # two selected challenges: topcow-cta-det 0.375 and a FAIL -> score (0.375 + 0) / 2 = 0.1875, partial
    records = [r for r in _aide_records() if r.task_id in ("topcow-cta-det", "puma-t1-tissue-seg")]
    doc = build_report(records, agent="aide", agent_options={}, settings={}, run_id="r2")
    assert doc["partial"] is True
    assert doc["selected"] == ["puma-t1-tissue-seg", "topcow-cta-det"]
    assert doc["score"] == pytest.approx(0.1875)
    assert doc["n_fail"] == 1


# -- medals (never in the score) --------------------------------------------------------------------------

def test_medal_thresholds_topcow_cta_det():
    # stored mean_position by rank: 1, 2, 3, 3, 5, 5, 7, 8; gold/silver/bronze = rows 1/2/3;
    # median = row at 0-based index 8 // 2 = 4 -> 5.0
    board = Leaderboard.read(task("topcow-cta-det").leaderboard_path)
    assert medal_thresholds(board) == {"gold": 1.0, "silver": 2.0, "bronze": 3.0, "median": 5.0}


def test_medal_thresholds_topcow_mra_det():
    # stored means 1, 2, 3, 4, 4.5, 5, 7 (N = 7); median index 7 // 2 = 3 -> 4.0
    board = Leaderboard.read(task("topcow-mra-det").leaderboard_path)
    assert medal_thresholds(board) == {"gold": 1.0, "silver": 2.0, "bronze": 3.0, "median": 4.0}


@pytest.mark.parametrize("metrics, mean_position, medal, above_median", [
    # boundary .69 -> 1, iou .79 -> 1: mean 1.0 <= gold 1.0
    ({"boundary_iou": 0.69, "iou": 0.79}, 1.0, "gold", True),
    # boundary .69 -> 1, iou .76 -> 2: mean 1.5 > 1.0, <= silver 2.0
    ({"boundary_iou": 0.69, "iou": 0.76}, 1.5, "silver", True),
    # boundary .65 -> 2, iou .74 -> 3: mean 2.5 <= bronze 3.0
    ({"boundary_iou": 0.65, "iou": 0.74}, 2.5, "bronze", True),
    # boundary .62 -> 3, iou .72 -> 5: mean 4.0 > 3.0, <= median 5.0
    ({"boundary_iou": 0.62, "iou": 0.72}, 4.0, None, True),
    # boundary .60 -> 5, iou .72 -> 5: mean 5.0 == median -> above_median
    ({"boundary_iou": 0.60, "iou": 0.72}, 5.0, None, True),
    # the worked example: mean 6.0 > 5.0
    ({"boundary_iou": 0.6110, "iou": 0.6707}, 6.0, None, False),
])
def test_medals_topcow_cta_det(metrics, mean_position, medal, above_median):
    r = rank(task("topcow-cta-det"), metrics)
    assert r.mean_position == mean_position
    assert r.medal == medal
    assert r.above_median is above_median


def test_fail_earns_no_medal():
    t = task("topcow-cta-det")
    rec = TaskResult.failed(t, "timeout", "ran out of time", 8)
    assert rec.medal is None
    assert rec.above_median is False
