"""Building blocks for 3-D twins: geometry with real-looking anisotropic spacing, blobs and tubes."""

from __future__ import annotations

import numpy as np
import SimpleITK as sitk


def make_image(array: np.ndarray, spacing: tuple[float, float, float], origin=(0.0, 0.0, 0.0),
               direction=(1, 0, 0, 0, 1, 0, 0, 0, 1)) -> sitk.Image:
    """``array`` is (z, y, x); spacing/origin are SimpleITK (x, y, z)."""
    img = sitk.GetImageFromArray(array)
    img.SetSpacing(tuple(float(s) for s in spacing))
    img.SetOrigin(tuple(float(o) for o in origin))
    img.SetDirection(tuple(float(d) for d in direction))
    return img


def ellipsoid(shape: tuple[int, int, int], center, radii) -> np.ndarray:
    zz, yy, xx = np.ogrid[:shape[0], :shape[1], :shape[2]]
    return ((zz - center[0]) / radii[0]) ** 2 + ((yy - center[1]) / radii[1]) ** 2 + \
        ((xx - center[2]) / radii[2]) ** 2 <= 1.0


def tube(shape: tuple[int, int, int], start, end, radius: float) -> np.ndarray:
    """Voxels within ``radius`` (voxels) of the segment start→end, both (z, y, x)."""
    zz, yy, xx = np.meshgrid(*(np.arange(s) for s in shape), indexing="ij")
    p = np.stack([zz, yy, xx], axis=-1).astype(np.float32)
    a, b = np.asarray(start, np.float32), np.asarray(end, np.float32)
    ab = b - a
    t = np.clip(((p - a) @ ab) / max(float(ab @ ab), 1e-6), 0.0, 1.0)
    nearest = a + t[..., None] * ab
    return np.sum((p - nearest) ** 2, axis=-1) <= radius * radius


def noisy_intensity(mask_levels: np.ndarray, rng: np.random.Generator, noise: float, dtype=np.int16) -> np.ndarray:
    return (mask_levels + rng.normal(0, noise, mask_levels.shape)).astype(dtype)
