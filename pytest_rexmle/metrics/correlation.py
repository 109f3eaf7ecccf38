"""Correlation metrics for quality-score regression (LDCT-IQA, challenges.md §2).

The three coefficients follow SciPy's definitions operation by operation (``pearsonr``'s scaled
norms, ``spearmanr``'s average ranks through ``np.corrcoef``, ``kendalltau``'s tau-b from exact pair
counts), so the values are those of ``scipy.stats`` bit for bit, without importing ``scipy.stats``
(most of a second of CPU, paid by every process that grades this task). Inputs that are not all
finite never come from a checked submission; they still go to SciPy so that NaN and infinity keep
SciPy's exact behaviour, as does everything under NumPy 1.x (no ``vecdot``, which SciPy's Pearson uses).
"""

from __future__ import annotations

import math

import numpy as np


def _defined(value: float) -> float:
    """A coefficient that is undefined (zero variance) counts as 0, never NaN."""
    return 0.0 if value is None or not math.isfinite(value) else abs(float(value))


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's r of two non-constant float64 vectors, as ``scipy.stats.pearsonr`` computes it:
    deviations scaled by their largest magnitude before the norm (no premature overflow), reduced
    along the last axis of a 1×n array (a 1-D norm would take BLAS's dot and round differently)."""
    x, y = x.reshape(1, -1), y.reshape(1, -1)
    xm, ym = x - x.mean(axis=-1, keepdims=True), y - y.mean(axis=-1, keepdims=True)
    xmax = np.max(np.abs(xm), axis=-1, keepdims=True)
    ymax = np.max(np.abs(ym), axis=-1, keepdims=True)
    normx = xmax * np.linalg.norm(xm / xmax, axis=-1, keepdims=True)
    normy = ymax * np.linalg.norm(ym / ymax, axis=-1, keepdims=True)
    r = float(np.clip(np.vecdot(xm / normx, ym / normy, axis=-1), -1.0, 1.0)[0])
    return float(round(r)) if x.shape[-1] == 2 else r  # two points lie on a line: exactly ±1


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties sharing the mean of their positions (``scipy.stats.rankdata``'s default)."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    first = np.r_[True, ordered[1:] != ordered[:-1]]
    starts = np.flatnonzero(np.r_[first, True])
    ranks = np.empty(values.size, dtype=np.float64)
    ranks[order] = ((starts[:-1] + starts[1:] + 1) / 2.0)[np.cumsum(first) - 1]
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rho: Pearson's correlation of the average ranks, through ``np.corrcoef`` as SciPy does."""
    ranked = np.column_stack((average_ranks(x), average_ranks(y)))
    return float(np.corrcoef(ranked, rowvar=False)[1, 0])


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's tau-b from exact counts of concordant minus discordant pairs and of ties in x and y
    (one vectorised pass per element: memory stays linear in the number of cases)."""
    n = x.size
    con_minus_dis = x_ties = y_ties = 0
    for i in range(n - 1):
        dx, dy = np.sign(x[i + 1:] - x[i]), np.sign(y[i + 1:] - y[i])
        both = dx * dy
        con_minus_dis += int(np.count_nonzero(both > 0)) - int(np.count_nonzero(both < 0))
        x_ties += int(np.count_nonzero(dx == 0))
        y_ties += int(np.count_nonzero(dy == 0))
    pairs = n * (n - 1) // 2
    tau = con_minus_dis / np.sqrt(pairs - x_ties) / np.sqrt(pairs - y_ties)
    return float(min(1.0, max(-1.0, tau)))


def _scipy_coefficients(pred: np.ndarray, truth: np.ndarray) -> tuple[float, float, float]:
    from scipy import stats  # only for non-finite input, which a checked submission never holds

    return (_defined(stats.pearsonr(pred, truth).statistic), _defined(stats.spearmanr(pred, truth).statistic),
            _defined(stats.kendalltau(pred, truth, variant="b").statistic))


def correlation_scores(pred: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """|Pearson|, |Spearman| (average ranks), |Kendall tau-b| and their sum ``score``."""
    pred = np.asarray(pred, dtype=np.float64).ravel()
    truth = np.asarray(truth, dtype=np.float64).ravel()
    if pred.size < 2 or np.ptp(pred) == 0 or np.ptp(truth) == 0:
        plcc = srocc = krocc = 0.0
    elif not (np.isfinite(pred).all() and np.isfinite(truth).all()) or not hasattr(np, "vecdot"):
        plcc, srocc, krocc = _scipy_coefficients(pred, truth)  # NumPy < 2 has no vecdot: SciPy's own
    else:
        plcc = _defined(pearson(pred, truth))
        srocc = _defined(spearman(pred, truth))
        krocc = _defined(kendall_tau_b(pred, truth))
    return {"score": plcc + srocc + krocc, "plcc": plcc, "srocc": srocc, "krocc": krocc}
