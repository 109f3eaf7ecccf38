"""LDCT-IQA's three coefficients are SciPy's (absolute) values, ties and tiny samples included."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from pytest_rexmle.metrics.correlation import correlation_scores


def sample(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Continuous, heavily tied, rounded and skewed score vectors of 2 to 200 cases."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 200))
    kind = seed % 4
    if kind == 0:
        x = rng.normal(size=n)
        return x, x * rng.normal() + rng.normal(size=n)
    if kind == 1:
        return rng.integers(0, 5, n).astype(float), rng.integers(0, 4, n).astype(float)
    if kind == 2:
        x = np.round(rng.normal(size=n) * 3, 1) * 1e3
        return x, np.round(x + rng.normal(size=n))
    return rng.uniform(0, 10, n), rng.uniform(0, 10, n) ** 3


@pytest.mark.parametrize("seed", range(40))
def test_coefficients_equal_scipy(seed):
    pred, truth = sample(seed)
    if np.ptp(pred) == 0 or np.ptp(truth) == 0:
        pred[0] += 1.0
        truth[-1] += 1.0
    got = correlation_scores(pred, truth)
    expected = (abs(stats.pearsonr(pred, truth).statistic), abs(stats.spearmanr(pred, truth).statistic),
                abs(stats.kendalltau(pred, truth, variant="b").statistic))
    assert (got["plcc"], got["srocc"], got["krocc"]) == pytest.approx(expected, rel=1e-12, abs=1e-15)
    assert got["score"] == got["plcc"] + got["srocc"] + got["krocc"]


def test_hand_computed_tau_b_with_ties():
    # pairs of (1,1),(2,2),(2,3),(3,1): concordant 2, discordant 2... counted by hand below
    pred, truth = np.array([1.0, 2.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0, 1.0])
    # 6 pairs: (0,1) C, (0,2) C, (0,3) tie in truth, (1,2) tie in pred, (1,3) D, (2,3) D
    # tau-b = (2 - 2) / sqrt((6 - 1) * (6 - 1)) = 0
    assert correlation_scores(pred, truth)["krocc"] == 0.0
    pred, truth = np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 2.0, 2.0, 4.0])
    # 5 concordant, 0 discordant, 1 tie in truth: 5 / sqrt(6 * 5)
    assert correlation_scores(pred, truth)["krocc"] == pytest.approx(5 / np.sqrt(30), rel=1e-15)


def test_two_cases_are_exactly_correlated_and_constants_score_zero():
    got = correlation_scores(np.array([1.0, 2.0]), np.array([5.0, 3.0]))
    assert (got["plcc"], got["krocc"]) == (1.0, 1.0)  # SciPy rounds Pearson's two-point r to exactly ±1
    assert got["srocc"] == 0.9999999999999999         # np.corrcoef's rounding, as in scipy.stats.spearmanr
    assert correlation_scores(np.array([1.0, 1.0, 1.0]), np.array([1.0, 2.0, 3.0]))["score"] == 0.0


def test_non_finite_input_keeps_scipys_answer():
    pred, truth = np.array([1.0, np.inf, 3.0, 2.0]), np.array([1.0, 2.0, 3.0, 4.0])
    got = correlation_scores(pred, truth)
    assert got["plcc"] == 0.0  # SciPy's Pearson is NaN with an infinite value: counted as 0
    assert got["srocc"] == pytest.approx(abs(stats.spearmanr(pred, truth).statistic))
