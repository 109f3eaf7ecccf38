"""USenhance similarity metrics on hand-computable images."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_rexmle.metrics.image_similarity import data_range, lncc, psnr, similarity_scores, ssim


def ramp(h: int = 16, w: int = 20) -> np.ndarray:
    yy, xx = np.mgrid[:h, :w]
    return (7.0 * xx + 3.0 * yy + (xx * yy) % 5).astype(np.float64)


# == psnr ============================================================================================
def test_psnr_single_bright_pixel():
    truth = np.zeros((4, 4))
    truth[1, 2] = 255.0
    pred = np.zeros((4, 4))
    # range = 255 - 0; MSE = 255²/16 -> psnr = 10·log10(16) = 12.0412 dB
    assert psnr(pred, truth) == pytest.approx(10 * math.log10(16))


def test_psnr_uses_the_joint_range_not_the_dtype_range():
    truth = np.full((3, 3), 100.0)
    pred = np.full((3, 3), 110.0)
    # range = 110 - 100 = 10, MSE = 100 -> 10·log10(100/100) = 0 dB (not 10·log10(255²/100))
    assert psnr(pred, truth) == pytest.approx(0.0)


def test_psnr_identical_is_plus_infinity():
    img = ramp()
    assert psnr(img, img.copy()) == math.inf
    flat = np.full((8, 8), 42.0)
    assert psnr(flat, flat) == math.inf


# == ssim ============================================================================================
def test_ssim_shifted_7x7_has_only_the_luminance_term():
    truth = np.zeros((7, 7))
    truth.flat[::2] = 10.0               # 25 pixels of 10, 24 of 0
    pred = truth + 10.0
    # 7×7 image -> after the 3-pixel crop only the centre pixel remains, whose window is the whole image.
    # Same variance, perfect correlation -> contrast-structure term = 1 exactly.
    # range = 20 - 0 = 20, C1 = (0.01·20)² = 0.04, μx = 250/49, μy = 740/49:
    # ssim = (2μxμy + C1) / (μx² + μy² + C1)
    mx, my, c1 = 250 / 49, 740 / 49, (0.01 * 20) ** 2
    assert ssim(pred, truth) == pytest.approx((2 * mx * my + c1) / (mx * mx + my * my + c1), rel=1e-12)


def test_ssim_identical_and_constant_cases():
    img = ramp()
    assert ssim(img, img.copy()) == pytest.approx(1.0)
    flat = np.full((9, 9), 3.0)
    assert ssim(flat, flat.copy()) == 1.0          # data_range = 0 -> defined as 1.0
    assert data_range(flat, flat) == 0.0


def test_ssim_drops_for_noise():
    rng = np.random.default_rng(0)
    img = ramp()
    assert ssim(img + rng.normal(0, 20, img.shape), img) < 0.9


# == lncc ============================================================================================
def _lncc_bruteforce(a: np.ndarray, b: np.ndarray) -> float:
    """Independent reference: explicit reflect-101 indices and per-pixel 11×11 window statistics."""
    def norm(x):
        return (x - x.min()) / (x.max() - x.min() + 1e-8)

    def reflect101(i, n):
        while i < 0 or i >= n:
            i = -i if i < 0 else 2 * (n - 1) - i
        return i

    a, b = norm(a), norm(b)
    h, w = a.shape
    vals = []
    for y in range(h):
        for x in range(w):
            rows = [reflect101(y + d, h) for d in range(-5, 6)]
            cols = [reflect101(x + d, w) for d in range(-5, 6)]
            wa, wb = a[np.ix_(rows, cols)], b[np.ix_(rows, cols)]
            m1, m2 = wa.mean(), wb.mean()
            v1, v2 = (wa * wa).mean() - m1 * m1, (wb * wb).mean() - m2 * m2
            c = (wa * wb).mean() - m1 * m2
            if v1 > 1e-10 and v2 > 1e-10:
                vals.append(c / math.sqrt(v1 * v2))
    return float(np.mean(vals))


def test_lncc_matches_a_bruteforce_reflect101_window():
    rng = np.random.default_rng(1)
    a = rng.random((13, 15)) * 255
    b = 0.5 * a + rng.random((13, 15)) * 100
    assert lncc(a, b) == pytest.approx(_lncc_bruteforce(a, b), abs=1e-9)


def test_lncc_linear_maps():
    img = ramp()
    assert lncc(img, img.copy()) == 1.0                    # identical: every ratio is exactly 1
    assert lncc(2.0 * img + 5.0, img) == pytest.approx(1.0)  # min-max normalisation removes gain/offset
    assert lncc(255.0 - img, img) == pytest.approx(-1.0)     # inverted contrast: perfectly anti-correlated


def test_lncc_without_valid_pixels():
    flat_a, flat_b = np.full((12, 12), 7.0), np.full((12, 12), 200.0)
    # both normalise to all-zero images -> allclose -> 1.0
    assert lncc(flat_a, flat_b) == 1.0
    # one flat (zero variance everywhere -> no valid pixel), the other not: normalised images differ -> 0.0
    assert lncc(flat_a, ramp(12, 12)) == 0.0


def test_similarity_scores_are_python_floats():
    rng = np.random.default_rng(2)
    img = ramp()
    out = similarity_scores(img + rng.normal(0, 5, img.shape), img)
    assert set(out) == {"lncc", "ssim", "psnr"}
    assert all(type(v) is float and math.isfinite(v) for v in out.values())
