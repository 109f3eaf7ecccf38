"""Image predictions: the header is checked against the expected grid before any voxel is decoded."""

from __future__ import annotations

import numpy as np
import pytest
import SimpleITK as sitk

from pytest_rexmle.errors import InvalidSubmission
from pytest_rexmle.medimage.geometry import read_image, read_mask

from .helpers import GIB, baseline_rss_mb, gzip_bomb, nifti_header, peak_rss_of, sparse_file

GRID = (48, 40, 24)


@pytest.fixture
def ref() -> sitk.Image:
    return sitk.Image(list(GRID), sitk.sitkUInt8)


@pytest.fixture(scope="module")
def floor_mb() -> float:
    return baseline_rss_mb()


def test_gzip_bomb_is_invalid_quickly_with_small_memory(tmp_path, floor_mb):
    """4 MB of .nii.gz inflating to 4 GiB of voxels on a 2048×2048×1024 grid (the issue's 8.6 GB case)."""
    bomb = gzip_bomb(tmp_path / "p.nii.gz", (2048, 2048, 1024))
    assert bomb.stat().st_size < 8 * 1024 * 1024
    out = peak_rss_of(f"""
        import SimpleITK as sitk
        from pytest_rexmle.errors import InvalidSubmission
        from pytest_rexmle.medimage.geometry import read_mask
        try:
            read_mask(__import__("pathlib").Path({str(bomb)!r}), sitk.Image([48, 40, 24], sitk.sitkUInt8), "c1")
        except InvalidSubmission as exc:
            out["reason"] = str(exc)
    """)
    assert out["reason"] == ("case 'c1': prediction size (2048, 2048, 1024) differs from the ground truth "
                             "(48, 40, 24); nothing was decoded")
    assert out["seconds"] < 10
    assert out["peak_mb"] < floor_mb + 100, out


def test_sparse_header_bomb_is_invalid_quickly_with_small_memory(tmp_path, floor_mb):
    """A 4 KB .nii declaring 4096³ voxels (the issue's 10.7 GB case)."""
    bomb = sparse_file(tmp_path / "p.nii", 4096, nifti_header((4096, 4096, 4096)))
    out = peak_rss_of(f"""
        import SimpleITK as sitk
        from pytest_rexmle.errors import InvalidSubmission
        from pytest_rexmle.medimage.geometry import read_mask
        try:
            read_mask(__import__("pathlib").Path({str(bomb)!r}), sitk.Image([48, 40, 24], sitk.sitkUInt8), "c1")
        except InvalidSubmission as exc:
            out["reason"] = str(exc)
    """)
    assert "prediction size (4096, 4096, 4096) differs" in out["reason"]
    assert out["seconds"] < 10 and out["peak_mb"] < floor_mb + 100, out


def test_a_bomb_on_the_right_grid_decodes_only_the_grid(tmp_path, ref):
    """The declared grid matches; the stream goes on for 1 GiB more. Only the grid's bytes are inflated."""
    path = gzip_bomb(tmp_path / "p.nii.gz", GRID, zeros=GIB)
    ref.SetDirection((-1, 0, 0, 0, -1, 0, 0, 0, 1))  # what a NIfTI qform of zeros means (RAS to LPS)
    labels = read_mask(path, ref, "c1")
    assert labels.shape == GRID[::-1] and not labels.any()


def test_a_large_vox_offset_is_refused(tmp_path, ref):
    """NIfTI extensions before the voxels are read whole by the readers; a 1 GB offset is a bomb too."""
    path = tmp_path / "p.nii"
    path.write_bytes(nifti_header(GRID, vox_offset=1e9) + b"\x00" * int(np.prod(GRID)))
    with pytest.raises(InvalidSubmission, match="voxel data offset 1000000000.0 is outside the header area"):
        read_mask(path, ref, "c1")


def test_a_separate_img_file_is_refused(tmp_path, ref):
    header = bytearray(nifti_header(GRID))
    header[344:348] = b"ni1\x00"
    (tmp_path / "p.nii").write_bytes(bytes(header))
    with pytest.raises(InvalidSubmission, match="separate .img file"):
        read_mask(tmp_path / "p.nii", ref, "c1")


def test_mha_data_elsewhere_is_refused(tmp_path, ref):
    """ElementDataFile may name any host file (/dev/zero, the private answers): only LOCAL is read."""
    for target in ("/dev/zero", "../../private/answers.raw"):
        path = tmp_path / "p.mha"
        path.write_text("ObjectType = Image\nNDims = 3\nDimSize = 48 40 24\nElementType = MET_UCHAR\n"
                        f"ElementDataFile = {target}\n")
        with pytest.raises(InvalidSubmission, match=r"must keep its voxels in the same file \(ElementDataFile = LOCAL\)"):
            read_mask(path, ref, "c1")


def test_mha_repeated_dimsize_is_refused(tmp_path, ref):
    path = tmp_path / "p.mha"
    path.write_bytes(b"NDims = 3\nDimSize = 48 40 24\nDimSize = 4096 4096 4096\nElementType = MET_UCHAR\n"
                     b"ElementDataFile = LOCAL\n" + bytes(int(np.prod(GRID))))
    with pytest.raises(InvalidSubmission, match="'dimsize' appears twice"):
        read_mask(path, ref, "c1")


def test_nrrd_detached_data_file_is_refused(tmp_path, ref):
    path = tmp_path / "p.seg.nrrd"
    path.write_text("NRRD0004\ntype: uchar\ndimension: 3\nsizes: 48 40 24\nencoding: raw\ndata file: /dev/zero\n\n")
    with pytest.raises(InvalidSubmission, match="detached NRRD data files are not accepted"):
        read_mask(path, ref, "c1")


def test_nrrd_sparse_grid_is_refused(tmp_path, ref):
    head = b"NRRD0004\ntype: double\ndimension: 3\nsizes: 100000 100000 1000\nencoding: raw\n\n"
    path = sparse_file(tmp_path / "p.nrrd", 4096, head)
    with pytest.raises(InvalidSubmission, match=r"prediction size \(100000, 100000, 1000\) differs"):
        read_mask(path, ref, "c1")


def test_an_endless_header_is_refused(tmp_path, ref):
    path = sparse_file(tmp_path / "p.mha", 64 * 1024 * 1024, b"NDims = 3\n" + b"Comment = " + b"x" * 100)
    with pytest.raises(InvalidSubmission, match="header longer than"):
        read_mask(path, ref, "c1")


@pytest.mark.parametrize("suffix", [".nii.gz", ".nii", ".mha", ".nrrd"])
def test_valid_files_on_the_grid_still_read(tmp_path, ref, suffix):
    arr = np.zeros(GRID[::-1], np.uint8)
    arr[3, 4, 5] = 1
    path = tmp_path / f"p{suffix}"
    sitk.WriteImage(sitk.GetImageFromArray(arr), str(path), useCompression=True)
    assert read_mask(path, ref, "c1").sum() == 1


def test_a_fifo_or_link_prediction_is_refused(tmp_path, ref):
    import os

    os.mkfifo(tmp_path / "p.nii.gz")
    (tmp_path / "q.nii.gz").symlink_to("/dev/zero")
    with pytest.raises(InvalidSubmission, match="is a FIFO"):
        read_image(tmp_path / "p.nii.gz", "c1", ref)
    with pytest.raises(InvalidSubmission, match="is a symbolic link"):
        read_image(tmp_path / "q.nii.gz", "c1", ref)
