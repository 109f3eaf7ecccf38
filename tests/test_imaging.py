"""Shared image reading rules (docs/reference/grading.md: reading images)."""

from __future__ import annotations

import numpy as np
import pytest
import SimpleITK as sitk

from pytest_rexmle.errors import InvalidSubmission
from pytest_rexmle.medimage.geometry import check_geometry, read_image, voxel_volume_mm3
from pytest_rexmle.medimage.header_notes import MAX_NOTES, collecting, record


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("suffix", [".nii.gz", ".nii", ".mha"])
def test_non_finite_values_are_invalid_in_every_format(tmp_path, bad, suffix):
    """SimpleITK reads NIfTI NaN/inf back as 0, so without the raw check they would pass as background."""
    arr = np.zeros((3, 4, 5), np.float32)
    arr[1, 2, 3] = bad
    path = tmp_path / f"p{suffix}"
    sitk.WriteImage(sitk.GetImageFromArray(arr), str(path))
    from pytest_rexmle.medimage.geometry import label_array

    with pytest.raises(InvalidSubmission, match="NaN or infinite"):
        label_array(read_image(path, "c1"), "c1")


def test_finite_float_nifti_reads(tmp_path):
    arr = np.zeros((3, 4, 5), np.float32)
    arr[0, 0, 0] = 1.0
    sitk.WriteImage(sitk.GetImageFromArray(arr), str(tmp_path / "p.nii.gz"))
    assert sitk.GetArrayFromImage(read_image(tmp_path / "p.nii.gz", "c1")).sum() == 1.0


def test_unreadable_file_is_invalid(tmp_path):
    (tmp_path / "p.nii.gz").write_bytes(b"not an image")
    with pytest.raises(InvalidSubmission, match="case 'c1': cannot read p.nii.gz"):
        read_image(tmp_path / "p.nii.gz", "c1")


def test_geometry_tolerances():
    # a header difference on the ground truth's size is a warning, not a refusal;
    # within the old tolerances it is not even that.
    ref = sitk.Image([4, 4, 4], sitk.sitkUInt8)
    ref.SetSpacing((0.5, 0.5, 2.0))
    ok = sitk.Image([4, 4, 4], sitk.sitkUInt8)
    ok.SetSpacing((0.5 + 5e-5, 0.5, 2.0))          # within 1e-4 mm
    with collecting() as notes:
        assert check_geometry(ok, ref, "c1") == []
    assert notes.messages() == []
    bad = sitk.Image([4, 4, 4], sitk.sitkUInt8)
    bad.SetSpacing((0.5 + 2e-4, 0.5, 2.0))          # beyond 1e-4 mm
    moved = sitk.Image([4, 4, 4], sitk.sitkUInt8)
    moved.SetSpacing((0.5, 0.5, 2.0))
    moved.SetOrigin((0.0, 0.002, 0.0))              # beyond 1e-3 mm
    with collecting() as notes:
        assert [n.split(" (")[0] for n in check_geometry(bad, ref, "c1")] == ["case 'c1': prediction header spacing"]
        assert [n.split(" (")[0] for n in check_geometry(moved, ref, "c1")] == ["case 'c1': prediction header origin"]
    assert len(notes.messages()) == 2 and "tolerance 0.001" in notes.messages()[1]
    assert check_geometry(bad, ref, "c1")  # outside a collecting block: returned, recorded nowhere
    smaller = sitk.Image([4, 4, 3], sitk.sitkUInt8)
    with pytest.raises(InvalidSubmission, match="size"):
        check_geometry(smaller, ref, "c1")


def test_header_notes_are_bounded_and_distinct():
    with collecting() as notes:
        for i in range(MAX_NOTES + 5):
            record(f"note {i}")
            record(f"note {i}")
    messages = notes.messages()
    assert len(messages) == MAX_NOTES + 1 and messages[0] == "note 0"
    assert messages[-1] == "... and 5 more header difference(s) of the same kind"


def test_voxel_volume_uses_direction_and_spacing():
    img = sitk.Image([2, 2, 2], sitk.sitkUInt8)
    img.SetSpacing((0.5, 2.0, 3.0))
    img.SetDirection((0, 1, 0, 1, 0, 0, 0, 0, -1))  # a flip/permutation: |det| = 1
    assert voxel_volume_mm3(img) == pytest.approx(3.0)  # 0.5 * 2 * 3


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int16, np.int32])
def test_label_array_keeps_integer_type_and_checks_values(dtype):
    from pytest_rexmle.medimage.geometry import label_array, present_values

    arr = np.zeros((2, 3, 4), dtype)
    arr[0, 1, 2], arr[1, 2, 3] = 3, 15
    labels = label_array(sitk.GetImageFromArray(arr), "c1", allowed={0, 3, 15})
    assert labels.dtype == dtype and present_values(labels) == {0, 3, 15}
    arr[0, 0, 0] = 13                                   # not in the allowed set
    with pytest.raises(InvalidSubmission, match=r"label value\(s\) \[13\] are not allowed"):
        label_array(sitk.GetImageFromArray(arr), "c1", allowed={0, 3, 15})


@pytest.mark.parametrize(("dtype", "bad"), [(np.uint8, 14), (np.uint8, 16), (np.int16, 14), (np.int16, 16),
                                            (np.int16, -1)])
def test_labels_checked_by_range_and_holes(dtype, bad):
    """TopCoW's set (0..13 and 15, no 14) goes the fast way (maximum, minimum, one test per hole): every
    allowed value passes, and a hole, a value above the top or a negative one is still refused."""
    from pytest_rexmle.medimage.geometry import label_array

    allowed = {*range(14), 15}
    arr = np.tile(np.asarray(sorted(allowed), dtype), (2, 3, 1))
    assert label_array(sitk.GetImageFromArray(arr), "c1", allowed=allowed).shape == arr.shape
    arr[1, 2, 0] = bad
    with pytest.raises(InvalidSubmission, match=rf"label value\(s\) \[{bad}\] are not allowed"):
        label_array(sitk.GetImageFromArray(arr), "c1", allowed=allowed)


def test_integral_floats_become_int64_and_fractions_are_invalid():
    from pytest_rexmle.medimage.geometry import label_array

    arr = np.zeros((2, 2, 2), np.float32)
    arr[0, 0, 0] = 2.0
    labels = label_array(sitk.GetImageFromArray(arr), "c1")
    assert labels.dtype == np.int64 and labels[0, 0, 0] == 2
    arr[1, 1, 1] = 0.5
    with pytest.raises(InvalidSubmission, match="non-integer"):
        label_array(sitk.GetImageFromArray(arr), "c1")
