"""Correlation metrics for quality-score regression (LDCT-IQA, challenges.md §2)."""

from __future__ import annotations

import math

import numpy as np


def _defined(value: float) -> float:
    """A coefficient that is undefined (zero variance) counts as 0, never NaN."""
    return 0.0 if value is None or not math.isfinite(value) else abs(float(value))


def correlation_scores(pred: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """|Pearson|, |Spearman| (average ranks), |Kendall tau-b| and their sum ``score``."""
    from scipy import stats  # about a second to import: only when something is scored

    pred = np.asarray(pred, dtype=np.float64)
    truth = np.asarray(truth, dtype=np.float64)
    if pred.size < 2 or np.ptp(pred) == 0 or np.ptp(truth) == 0:
        plcc = srocc = krocc = 0.0
    else:
        plcc = _defined(stats.pearsonr(pred, truth).statistic)
        srocc = _defined(stats.spearmanr(pred, truth).statistic)
        krocc = _defined(stats.kendalltau(pred, truth, variant="b").statistic)
    return {"score": plcc + srocc + krocc, "plcc": plcc, "srocc": srocc, "krocc": krocc}
