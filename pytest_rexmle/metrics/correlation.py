"""Correlation metrics for quality-score regression (LDCT-IQA).

The organisers' evaluation calls ``scipy.stats.pearsonr``, ``spearmanr`` and ``kendalltau`` (tau-b)
and sums their absolute values; so does this module, through SciPy itself, so that the values are
SciPy's on every release rather than those of a copy that could drift from it. ``scipy.stats`` is
imported when a score is computed, not when the module is, so commands that never grade this task
do not pay for it.
"""

from __future__ import annotations

import math
import warnings

import numpy as np


def _defined(value: float | None) -> float:
    """A coefficient that is undefined (zero variance, non-finite input) counts as 0, never NaN."""
    return 0.0 if value is None or not math.isfinite(value) else abs(float(value))


def correlation_scores(pred: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """|Pearson|, |Spearman| (average ranks), |Kendall tau-b| and their sum ``score``.

    Fewer than two cases or a constant vector has no defined correlation: every coefficient is 0
    (SciPy would return NaN with a warning)."""
    pred = np.asarray(pred, dtype=np.float64).ravel()
    truth = np.asarray(truth, dtype=np.float64).ravel()
    if pred.size < 2 or np.ptp(pred) == 0 or np.ptp(truth) == 0:
        plcc = srocc = krocc = 0.0
    else:
        from scipy import stats  # start-up: scipy only where this runs

        with warnings.catch_warnings():  # NaN from non-finite input is mapped to 0 by _defined
            warnings.simplefilter("ignore", RuntimeWarning)
            plcc = _defined(stats.pearsonr(pred, truth).statistic)
            srocc = _defined(stats.spearmanr(pred, truth).statistic)
            krocc = _defined(stats.kendalltau(pred, truth, variant="b").statistic)
    return {"score": plcc + srocc + krocc, "plcc": plcc, "srocc": srocc, "krocc": krocc}
