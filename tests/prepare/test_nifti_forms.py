"""Prepared 3-D NIfTI files have qform = sform (docs/reference/grading.md: reading images).

A release file whose qform and sform disagree reads as two grids: SimpleITK takes the qform (unless the
sform is coded "scanner"), nibabel the sform. The preparer writes such a file with both forms set to
SimpleITK's grid (the graders'), header only, and lists it in the manifest.
"""

from __future__ import annotations

import gzip

import nibabel as nib
import numpy as np
import pytest
import SimpleITK as sitk

from pytest_rexmle.medimage.nifti import forms_disagreement, simpleitk_affine, write_with_aligned_forms

from .test_prepared_forms import SHAPE_XYZ, SHIFT_MM, split_forms_bytes


def test_the_rewrite_changes_the_header_only(tmp_path):
    rng = np.random.default_rng(3)
    data = rng.integers(-500, 900, SHAPE_XYZ).astype(np.int16)
    source = tmp_path / "raw.nii.gz"
    source.write_bytes(split_forms_bytes(data, scale=0.5))
    before = forms_disagreement(source)
    assert before == {"qform_code": 1, "sform_code": 2, "offset_mm": {"qform": 0.0, "sform": SHIFT_MM},
                      "matrix_difference": {"qform": 0.0, "sform": 0.0}}
    itk_before = sitk.ReadImage(str(source))
    assert nib.load(source).affine[0, 3] != pytest.approx(simpleitk_affine(source)[0, 3])    # two grids

    target = tmp_path / "prepared.nii.gz"
    assert write_with_aligned_forms(source, target) == before
    assert forms_disagreement(target) is None
    written = nib.load(target)
    assert np.allclose(written.header.get_qform(), written.header.get_sform(), atol=1e-5)
    assert np.allclose(written.affine, simpleitk_affine(source), atol=1e-5)               # one grid
    assert (int(written.header["qform_code"]), int(written.header["sform_code"])) == (1, 2)
    itk_after = sitk.ReadImage(str(target))
    for get in ("GetSpacing", "GetOrigin", "GetDirection"):           # SimpleITK's grid is kept
        assert np.allclose(getattr(itk_after, get)(), getattr(itk_before, get)(), atol=1e-5), get
    assert np.array_equal(np.asanyarray(written.dataobj), np.asanyarray(nib.load(source).dataobj))  # scaled values
    with gzip.open(source) as a, gzip.open(target) as b:              # and every byte after the header
        assert a.read()[348:] == b.read()[348:]


def test_agreeing_forms_are_left_alone(tmp_path):
    source = tmp_path / "raw.nii.gz"
    source.write_bytes(split_forms_bytes(np.zeros(SHAPE_XYZ, np.uint8), shift=0.0))
    assert forms_disagreement(source) is None
    assert write_with_aligned_forms(source, tmp_path / "out.nii.gz") is None
    assert not (tmp_path / "out.nii.gz").exists()
