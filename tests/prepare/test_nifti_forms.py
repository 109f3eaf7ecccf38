"""Prepared 3-D NIfTI files have qform = sform (challenges.md §0.4 errata, turn 4).

A release file whose qform and sform disagree reads as two grids: SimpleITK takes the qform (unless the
sform is coded "scanner"), nibabel the sform. The preparer writes such a file with both forms set to
SimpleITK's grid (the graders'), header only, and lists it in the manifest.
"""

from __future__ import annotations

import gzip
import io
import json
import tempfile
import zipfile
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import SimpleITK as sitk

from pytest_rexmle.data.prepare import prepare_task
from pytest_rexmle.data.taskdata import MANIFEST
from pytest_rexmle.medimage.nifti import forms_disagreement, simpleitk_affine, write_with_aligned_forms

from . import releases

SHAPE_XYZ = (8, 8, 5)
SPACING = (2.0, 2.0, 3.0)
SHIFT_MM = 0.5


def split_forms_bytes(array_xyz: np.ndarray, shift: float = SHIFT_MM, scale: float | None = None) -> bytes:
    """A NIfTI whose qform (code 1) and sform (code 2, "aligned") are ``shift`` mm apart along x."""
    qform = np.diag([*SPACING, 1.0])
    qform[:3, 3] = (-30.0, 25.0, 7.5)
    sform = qform.copy()
    sform[0, 3] += shift
    header = nib.Nifti1Header()
    header.set_data_dtype(array_xyz.dtype)
    header.set_qform(qform, code=1)
    header.set_sform(sform, code=2)
    image = nib.Nifti1Image(array_xyz, None, header)
    if scale is not None:
        image.header.set_slope_inter(scale, 10.0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "v.nii.gz"
        nib.save(image, path)
        return path.read_bytes()


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


def isles_release_with_split_forms() -> dict[str, bytes]:
    """The fake ISLES'22 release, with case 1's four files (DWI, ADC, FLAIR, mask) written by nibabel
    with qform and sform 0.5 mm apart."""
    files = {}
    with zipfile.ZipFile(io.BytesIO(releases.isles()["ISLES-2022.zip"])) as zf:
        for name in zf.namelist():
            files[name] = zf.read(name)
    rng = np.random.default_rng(5)
    mask = np.zeros(SHAPE_XYZ, np.uint8)
    mask[2:5, 3:6, 1:3] = 1
    sub, base = "sub-strokecase0001", "ISLES-2022/sub-strokecase0001/ses-0001"
    files[f"{base}/dwi/{sub}_ses-0001_dwi.nii.gz"] = split_forms_bytes(rng.integers(0, 900, SHAPE_XYZ).astype(np.int16))
    files[f"{base}/dwi/{sub}_ses-0001_adc.nii.gz"] = split_forms_bytes(rng.integers(0, 900, SHAPE_XYZ).astype(np.int16))
    files[f"{base}/anat/{sub}_ses-0001_FLAIR.nii.gz"] = split_forms_bytes(np.zeros(SHAPE_XYZ, np.int16))
    files[f"ISLES-2022/derivatives/{sub}/ses-0001/{sub}_ses-0001_msk.nii.gz"] = split_forms_bytes(mask)
    return {"ISLES-2022.zip": releases.zip_bytes(files), "center_ids.xlsx": b"PK\x03\x04 not really a workbook"}


def test_prepared_isles_files_have_one_grid_and_the_manifest_says_which_were_rewritten(fake_sources, tmp_path):
    state, _ = fake_sources
    state.zenodo = {**state.zenodo, "7960856": isles_release_with_split_forms()}
    data = prepare_task("isles22", tmp_path, progress=False)
    manifest = json.loads((data.private / MANIFEST).read_text())
    rewritten = manifest["notes"]["qform_sform_rewritten"]
    split = json.loads((data.private / "split.json").read_text())
    where = "train" if "sub-strokecase0001" in split["train"] else "test"
    mask = (f"public/train/sub-strokecase0001_msk.nii.gz" if where == "train"
            else "private/test/sub-strokecase0001_msk.nii.gz")
    assert sorted(r["file"] for r in rewritten) == sorted(
        [f"public/{where}/sub-strokecase0001_{kind}.nii.gz" for kind in ("dwi", "adc", "flair")] + [mask])
    assert all(r["offset_mm"]["sform"] == SHIFT_MM and r["sform_code"] == 2 for r in rewritten)
    for path in sorted(data.public.rglob("*.nii.gz")) + sorted(data.private.rglob("*.nii.gz")):
        assert forms_disagreement(path) is None, path                 # nibabel and SimpleITK read one grid
    dwi = sitk.ReadImage(str(data.public / where / "sub-strokecase0001_dwi.nii.gz"))
    assert dwi.GetOrigin() == pytest.approx((30.0, -25.0, 7.5))        # the qform's grid, LPS
    assert not manifest["resampled_labels"] or all(r["case"] != "sub-strokecase0001"
                                                    for r in manifest["resampled_labels"])
