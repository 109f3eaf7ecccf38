"""A release whose NIfTI files have disagreeing qform and sform is prepared with one grid per file
(docs/reference/grading.md: reading images), checked with nibabel and SimpleITK themselves."""

from __future__ import annotations

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


def one_grid(path) -> bool:
    """nibabel's affine (the sform when coded) is the grid SimpleITK reads (LPS → RAS)."""
    img = sitk.ReadImage(str(path))
    lps = np.eye(4)
    lps[:3, :3] = np.asarray(img.GetDirection()).reshape(3, 3) @ np.diag(img.GetSpacing())
    lps[:3, 3] = img.GetOrigin()
    return bool(np.allclose(nib.load(path).affine, np.diag([-1.0, -1.0, 1.0, 1.0]) @ lps, atol=1e-3))


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
    mask = ("public/train/sub-strokecase0001_msk.nii.gz" if where == "train"
            else "private/test/sub-strokecase0001_msk.nii.gz")
    assert sorted(r["file"] for r in rewritten) == sorted(
        [f"public/{where}/sub-strokecase0001_{kind}.nii.gz" for kind in ("dwi", "adc", "flair")] + [mask])
    assert all(r["offset_mm"]["sform"] == SHIFT_MM and r["sform_code"] == 2 for r in rewritten)
    for path in sorted(data.public.rglob("*.nii.gz")) + sorted(data.private.rglob("*.nii.gz")):
        assert one_grid(path), path                                   # nibabel and SimpleITK read one grid
    dwi = sitk.ReadImage(str(data.public / where / "sub-strokecase0001_dwi.nii.gz"))
    assert dwi.GetOrigin() == pytest.approx((30.0, -25.0, 7.5))        # the qform's grid, LPS
    assert not manifest["resampled_labels"] or all(r["case"] != "sub-strokecase0001"
                                                    for r in manifest["resampled_labels"])
