"""Volumetric overlap metrics on boolean masks."""

from __future__ import annotations

import numpy as np


def dice(pred: np.ndarray, truth: np.ndarray, empty: float = 1.0) -> float:
    """2|P∩G|/(|P|+|G|); ``empty`` is returned when both masks are empty (task-specific)."""
    p, g = np.count_nonzero(pred), np.count_nonzero(truth)
    if p + g == 0:
        return empty
    return 2.0 * int(np.count_nonzero(np.logical_and(pred, truth))) / (p + g)
