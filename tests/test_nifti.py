"""Empty NIfTI masks written from a header alone read back on exactly the source's grid."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest
import SimpleITK as sitk

from pytest_rexmle.medimage.geometry import Geometry, reference_geometry
from pytest_rexmle.medimage.nifti import read_header, write_empty_like


def oblique_image(seed: int, dtype=np.float32) -> sitk.Image:
    rng = np.random.default_rng(seed)
    shape = tuple(int(v) for v in rng.integers(3, 12, 3))
    img = sitk.GetImageFromArray((rng.random(shape) * 100).astype(dtype))
    img.SetSpacing(tuple(float(v) for v in rng.uniform(0.2, 2.0, 3)))
    img.SetOrigin(tuple(float(v) for v in rng.uniform(-100, 100, 3)))
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))  # a random rotation (possibly with a reflection)
    img.SetDirection(tuple(float(v) for v in q.ravel()))
    return img


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("suffix", [".nii.gz", ".nii"])
def test_empty_mask_has_the_sources_geometry_and_no_foreground(tmp_path, seed, suffix):
    source = tmp_path / f"image{suffix}"
    sitk.WriteImage(oblique_image(seed, np.float32 if seed % 2 else np.int16), str(source))
    target = tmp_path / f"mask{suffix}"
    assert write_empty_like(source, target)
    mask = sitk.ReadImage(str(target))
    assert Geometry.of(mask) == Geometry.of(reference_geometry(source))
    assert mask.GetPixelID() == sitk.sitkUInt8
    assert not sitk.GetArrayViewFromImage(mask).any()
    assert read_header(source).shape == tuple(mask.GetSize())


def test_intensity_scaling_of_the_source_is_not_copied(tmp_path):
    source = tmp_path / "scaled.nii"
    sitk.WriteImage(oblique_image(1, np.int16), str(source))
    raw = bytearray(source.read_bytes())
    struct.pack_into("<ff", raw, 112, 2.5, 7.0)  # scl_slope, scl_inter: zeros would read back as 7.0
    source.write_bytes(bytes(raw))
    target = tmp_path / "mask.nii.gz"
    assert write_empty_like(source, target)
    assert not sitk.GetArrayViewFromImage(sitk.ReadImage(str(target))).any()


def test_non_nifti1_sources_are_left_to_simpleitk(tmp_path):
    mha = tmp_path / "image.mha"
    sitk.WriteImage(oblique_image(2), str(mha))
    assert not write_empty_like(mha, tmp_path / "mask.nii.gz")
    nifti = tmp_path / "image.nii.gz"
    sitk.WriteImage(oblique_image(2), str(nifti))
    assert not write_empty_like(nifti, tmp_path / "mask.mha")  # the target format must be NIfTI too
    damaged = tmp_path / "damaged.nii.gz"
    damaged.write_bytes(gzip.compress(b"\x5c\x01\x00\x00" + b"\x00" * 100))
    assert read_header(damaged) is None
    assert not (tmp_path / "mask.mha").exists()
