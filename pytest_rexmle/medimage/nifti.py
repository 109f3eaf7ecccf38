"""An all-background NIfTI volume on another NIfTI file's grid, made from that file's header alone.

Every segmentation baseline is such a volume (the sample agent writes one per test case). nibabel
reads only the source's header (the voxels stay on disk behind a lazy proxy), and the target is
written with a copy of that header in which only what describes the voxels changes (type uint8, no
intensity scaling, no display range). The grid — dimensions, pixel spacing, qform and sform, hence
size, spacing, origin and direction as any reader derives them — is therefore the source's by
construction, without decoding the source volume. Anything but a single-file NIfTI image (an
``.hdr``/``.img`` pair, another format, a damaged file) is left to the caller (``None``/``False``),
which then goes through SimpleITK.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from nibabel import Nifti1Header


class NiftiGrid(NamedTuple):
    """What a header-only read of a NIfTI file yields."""

    header: "Nifti1Header"
    #: dim[1..dim[0]]: voxel counts along each axis, in the file's (x, y, z, ...) order
    shape: tuple[int, ...]


def read_header(path: Path) -> NiftiGrid | None:
    """The header of a single-file NIfTI image (NIfTI-1 ``n+1`` or NIfTI-2), or None for anything else
    (another format, an ``.hdr``/``.img`` pair, a damaged or truncated file)."""
    import nibabel as nib

    try:
        image = nib.load(str(path))
    except Exception:  # nibabel signals unreadable input through many types; the caller's fallback reports it
        return None
    if not isinstance(image, nib.Nifti1Image):  # Nifti2Image is a subclass; Nifti1Pair is not
        return None
    header = image.header
    shape = tuple(int(d) for d in header.get_data_shape())
    if not shape or any(d < 1 for d in shape):
        return None
    return NiftiGrid(header, shape)


def write_empty_like(source: Path, target: Path) -> bool:
    """Write ``target`` (.nii or .nii.gz) as zeros of type uint8 on ``source``'s grid; False (and nothing
    written) when ``source`` is not a single-file NIfTI image or ``target`` not a NIfTI name."""
    if not target.name.endswith((".nii", ".nii.gz")):
        return False
    found = read_header(source)
    if found is None:
        return False
    import nibabel as nib
    import numpy as np

    header = found.header.copy()
    header.set_data_dtype(np.uint8)
    header["cal_max"] = header["cal_min"] = 0.0
    zeros = np.broadcast_to(np.uint8(0), found.shape)  # no voxel buffer: every element is the same zero
    kind = nib.Nifti2Image if isinstance(header, nib.Nifti2Header) else nib.Nifti1Image
    image = kind(zeros, affine=None, header=header)
    target.parent.mkdir(parents=True, exist_ok=True)
    nib.save(image, str(target))
    return True
