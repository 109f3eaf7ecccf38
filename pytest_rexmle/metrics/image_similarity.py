"""Full-reference image similarity for USenhance: lncc, ssim, psnr.

All three take two 2-D float64 grayscale arrays of equal shape (values 0–255). The definitions are the
reference's *intended* ones, computed in float64; every edge case has a defined value so a valid
submission never yields NaN (psnr of identical images is the documented ``+inf``).
"""

from __future__ import annotations

import math

import numpy as np

LNCC_WINDOW = 11
LNCC_EPS = 1e-8
LNCC_VALID = 1e-10


def _minmax(x: np.ndarray) -> np.ndarray:
    """Scale to [0, 1); the +1e-8 keeps a constant image finite (all zeros) instead of 0/0."""
    lo, hi = float(x.min()), float(x.max())
    return (x - lo) / (hi - lo + LNCC_EPS)


def lncc(pred: np.ndarray, truth: np.ndarray) -> float:
    """Mean local normalised cross-correlation over pixels where both local variances are positive.

    The 11×11 box mean uses SciPy ``mode="mirror"`` (reflect-101, OpenCV's default border), which is
    what the reference's cv2.blur did. With no valid pixel (e.g. flat images) the value is 1.0 when the
    normalised images agree (``numpy.allclose`` defaults) and 0.0 otherwise.
    """
    x1, x2 = _minmax(np.asarray(pred, dtype=np.float64)), _minmax(np.asarray(truth, dtype=np.float64))

    from scipy.ndimage import uniform_filter  # imported when images are scored, not by every importer

    def box(a: np.ndarray) -> np.ndarray:
        return uniform_filter(a, size=LNCC_WINDOW, mode="mirror")

    mu1, mu2 = box(x1), box(x2)
    var1 = box(x1 * x1) - mu1 * mu1
    var2 = box(x2 * x2) - mu2 * mu2
    cov = box(x1 * x2) - mu1 * mu2
    valid = (var1 > LNCC_VALID) & (var2 > LNCC_VALID)
    if not valid.any():
        return 1.0 if bool(np.allclose(x1, x2)) else 0.0
    return float(np.mean(cov[valid] / np.sqrt(var1[valid] * var2[valid])))


def data_range(pred: np.ndarray, truth: np.ndarray) -> float:
    """The joint value range of the pair (not the dtype range): max(max p, max g) − min(min p, min g)."""
    return float(max(pred.max(), truth.max()) - min(pred.min(), truth.min()))


def ssim(pred: np.ndarray, truth: np.ndarray) -> float:
    """scikit-image ``structural_similarity`` with its defaults (7×7 uniform window, K1 0.01, K2 0.03,
    sample covariance, 3-pixel crop) and the pair's joint data range; 1.0 for identical constants."""
    p, g = np.asarray(pred, dtype=np.float64), np.asarray(truth, dtype=np.float64)
    rng = data_range(p, g)
    if rng == 0.0:
        return 1.0
    from skimage.metrics import structural_similarity  # start-up: skimage only where this runs

    return float(structural_similarity(p, g, data_range=rng))


def psnr(pred: np.ndarray, truth: np.ndarray) -> float:
    """10·log10(range²/MSE) with the pair's joint range; identical images give +inf (documented)."""
    p, g = np.asarray(pred, dtype=np.float64), np.asarray(truth, dtype=np.float64)
    mse = float(np.mean((p - g) ** 2))
    if mse == 0.0:
        return math.inf
    return float(10.0 * math.log10(data_range(p, g) ** 2 / mse))


def similarity_scores(pred: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    return {"lncc": lncc(pred, truth), "ssim": ssim(pred, truth), "psnr": psnr(pred, truth)}
