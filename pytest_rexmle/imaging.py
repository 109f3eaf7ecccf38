"""Reading and checking image files the way every grader must (challenges.md §0.4).

Predictions are never resampled: a different size, spacing, origin or direction is an invalid
submission, reported with the case id and the numbers that differ.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import SimpleITK as sitk

from .errors import InvalidSubmission

SPACING_TOL = 1e-4
ORIGIN_TOL = 1e-3
DIRECTION_TOL = 1e-4


def read_image(path: Path, case_id: str) -> sitk.Image:
    """Read any SimpleITK-readable file; unreadable files are an agent fault."""
    try:
        img = sitk.ReadImage(str(path))
    except (RuntimeError, OSError) as exc:
        first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise InvalidSubmission(f"case {case_id!r}: cannot read {path.name}: {first}") from None
    if path.name.endswith((".nii", ".nii.gz")) and img.GetPixelID() in (sitk.sitkFloat32, sitk.sitkFloat64):
        _reject_hidden_non_finite(path, case_id)
    return img


def _reject_hidden_non_finite(path: Path, case_id: str) -> None:
    """SimpleITK's NIfTI reader turns NaN and ±inf into 0; read the raw values to see them."""
    import nibabel as nib

    try:
        data = np.asanyarray(nib.load(str(path)).dataobj)
    except Exception as exc:  # nibabel raises many types for damaged files
        raise InvalidSubmission(f"case {case_id!r}: cannot read {path.name}: {exc}") from None
    if data.dtype.kind == "f" and not np.isfinite(data).all():
        raise InvalidSubmission(f"case {case_id!r}: prediction contains NaN or infinite values")


def check_geometry(pred: sitk.Image, ref: sitk.Image, case_id: str) -> None:
    if pred.GetDimension() != ref.GetDimension():
        raise InvalidSubmission(f"case {case_id!r}: prediction is {pred.GetDimension()}-D, expected {ref.GetDimension()}-D")
    if pred.GetNumberOfComponentsPerPixel() != 1:
        raise InvalidSubmission(f"case {case_id!r}: prediction has {pred.GetNumberOfComponentsPerPixel()} components per voxel, expected 1")
    if pred.GetSize() != ref.GetSize():
        raise InvalidSubmission(f"case {case_id!r}: prediction size {pred.GetSize()} differs from the ground truth {ref.GetSize()}")
    for name, a, b, tol in (("spacing", pred.GetSpacing(), ref.GetSpacing(), SPACING_TOL),
                            ("origin", pred.GetOrigin(), ref.GetOrigin(), ORIGIN_TOL),
                            ("direction", pred.GetDirection(), ref.GetDirection(), DIRECTION_TOL)):
        if np.max(np.abs(np.subtract(a, b))) > tol:
            raise InvalidSubmission(
                f"case {case_id!r}: prediction {name} {tuple(round(x, 6) for x in a)} differs from the "
                f"ground truth {tuple(round(x, 6) for x in b)} (tolerance {tol})")


def label_array(img: sitk.Image, case_id: str, allowed: set[int] | None = None) -> np.ndarray:
    """Voxel labels (z, y, x) as integers; non-integral, non-finite or disallowed values are invalid.

    Integer images keep their own type (a 512×512×256 uint8 volume stays 64 MB instead of 512 MB as
    int64); floats with integral values become int64; booleans become uint8.
    """
    arr = sitk.GetArrayFromImage(img)  # an owned copy: views die with the image
    if arr.dtype.kind == "f":
        if not np.isfinite(arr).all():
            raise InvalidSubmission(f"case {case_id!r}: prediction contains NaN or infinite values")
        if not np.array_equal(arr, np.round(arr)):
            raise InvalidSubmission(f"case {case_id!r}: prediction has non-integer label values")
        labels = arr.astype(np.int64)
    elif arr.dtype.kind == "b":
        labels = arr.view(np.uint8)
    elif arr.dtype.kind in "iu":
        labels = arr
    else:
        raise InvalidSubmission(f"case {case_id!r}: unsupported voxel type {arr.dtype}")
    if allowed is not None:
        bad = sorted(present_values(labels) - allowed)
        if bad:
            raise InvalidSubmission(f"case {case_id!r}: label value(s) {bad[:10]} are not allowed; allowed: {sorted(allowed)}")
    return labels


def present_values(labels: np.ndarray) -> set[int]:
    """The distinct values of an integer array; a lookup table for 8/16-bit labels (no sort, no copy)."""
    if labels.dtype in (np.uint8, np.uint16):
        seen = np.zeros(256 if labels.dtype == np.uint8 else 65536, dtype=bool)
        seen[labels.ravel()] = True
        return set(np.flatnonzero(seen).tolist())
    return set(np.unique(labels).tolist())


def read_mask(path: Path, ref: sitk.Image, case_id: str, allowed: set[int] | None = None) -> np.ndarray:
    """Read a prediction, check it against ``ref`` and return its label array."""
    img = read_image(path, case_id)
    check_geometry(img, ref, case_id)
    return label_array(img, case_id, allowed)


def image_like(array: np.ndarray, ref: sitk.Image) -> sitk.Image:
    img = sitk.GetImageFromArray(array)
    img.CopyInformation(ref)
    return img


def write_image(img: sitk.Image, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    sitk.WriteImage(img, str(path), useCompression=True)


def reference_geometry(path: Path) -> sitk.Image:
    """Header-only read: an empty image with the file's geometry (cheap for big volumes)."""
    reader = sitk.ImageFileReader()
    reader.SetFileName(str(path))
    reader.ReadImageInformation()
    ref = sitk.Image([int(s) for s in reader.GetSize()], sitk.sitkUInt8)
    ref.SetSpacing(reader.GetSpacing())
    ref.SetOrigin(reader.GetOrigin())
    ref.SetDirection(reader.GetDirection())
    return ref


def zyx_spacing(img: sitk.Image) -> tuple[float, float, float]:
    """SimpleITK's (x, y, z) spacing reordered to the (z, y, x) axes of its NumPy array."""
    return tuple(float(s) for s in reversed(img.GetSpacing()))  # type: ignore[return-value]


def voxel_volume_mm3(img: sitk.Image) -> float:
    """|det(direction · diag(spacing))| — the physical volume of one voxel."""
    dim = img.GetDimension()
    direction = np.asarray(img.GetDirection(), dtype=float).reshape(dim, dim)
    return float(abs(np.linalg.det(direction @ np.diag(img.GetSpacing()))))
