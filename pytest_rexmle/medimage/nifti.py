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

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from nibabel import Nifti1Header


class NiftiGrid(NamedTuple):
    """What a header-only read of a NIfTI file yields."""

    header: Nifti1Header
    #: dim[1..dim[0]]: voxel counts along each axis, in the file's (x, y, z, ...) order
    shape: tuple[int, ...]


def read_header(path: Path) -> NiftiGrid | None:
    """The header of a single-file NIfTI image (NIfTI-1 ``n+1`` or NIfTI-2), or None for anything else
    (another format, an ``.hdr``/``.img`` pair, a damaged or truncated file)."""
    import nibabel as nib  # start-up: nibabel only where this runs

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
    import nibabel as nib  # start-up: nibabel only where this runs
    import numpy as np  # start-up: numpy only where this runs

    header = found.header.copy()
    header.set_data_dtype(np.uint8)
    header["cal_max"] = header["cal_min"] = 0.0
    zeros = np.broadcast_to(np.uint8(0), found.shape)  # no voxel buffer: every element is the same zero
    kind = nib.Nifti2Image if isinstance(header, nib.Nifti2Header) else nib.Nifti1Image
    image = kind(zeros, affine=None, header=header)
    target.parent.mkdir(parents=True, exist_ok=True)
    nib.save(image, str(target))
    return True


# -- one grid for every reader: qform = sform ---------------------------------------------------------------
#: how far the forms may disagree before a file is rewritten (the geometry check's origin and direction tolerances)
FORM_TRANSLATION_TOL_MM = 1e-3
FORM_MATRIX_TOL = 1e-4
_LPS_TO_RAS = (-1.0, -1.0, 1.0)


def simpleitk_affine(path: Path):
    """The 4×4 RAS affine of the grid SimpleITK reads from ``path`` (header only).

    SimpleITK (ITK 5) takes the qform unless the sform is coded "scanner" (1) or the qform is absent;
    nibabel takes the sform whenever it is coded. The graders read every file through SimpleITK, so
    SimpleITK's grid is the one the prepared files keep."""
    import numpy as np  # start-up: numpy only where this runs

    from .geometry import header_geometry  # start-up: SimpleITK only where this runs

    grid = header_geometry(path)
    if grid.dimension != 3:
        return None
    direction = np.asarray(grid.direction, float).reshape(3, 3)
    affine = np.eye(4)
    affine[:3, :3] = direction @ np.diag(grid.spacing)
    affine[:3, 3] = grid.origin
    return np.diag([*_LPS_TO_RAS, 1.0]) @ affine


def _form_gap(a, b) -> tuple[float, float]:
    """(largest translation difference in mm, largest difference of the 3×3 part) of two affines."""
    import numpy as np  # start-up: numpy only where this runs

    return float(np.max(np.abs(a[:3, 3] - b[:3, 3]))), float(np.max(np.abs(a[:3, :3] - b[:3, :3])))


def forms_disagreement(path: Path) -> dict | None:
    """What differs between a 3-D NIfTI file's coded forms and SimpleITK's grid, or None when every
    reader sees one grid (or the file is no single-file 3-D NIfTI)."""
    found = read_header(path)
    if found is None or len(found.shape) != 3:
        return None
    itk = simpleitk_affine(path)
    if itk is None:
        return None
    header = found.header
    seen = {}
    for name, (affine, code) in (("qform", header.get_qform(coded=True)), ("sform", header.get_sform(coded=True))):
        if affine is not None and int(code) > 0:
            seen[name] = (affine, int(code))
    gaps = {name: _form_gap(affine, itk) for name, (affine, _) in seen.items()}
    if all(t <= FORM_TRANSLATION_TOL_MM and m <= FORM_MATRIX_TOL for t, m in gaps.values()):
        return None
    return {"qform_code": int(header["qform_code"]), "sform_code": int(header["sform_code"]),
            "offset_mm": {name: round(t, 6) for name, (t, _) in gaps.items()},
            "matrix_difference": {name: round(m, 6) for name, (_, m) in gaps.items()}}


def write_with_aligned_forms(source: Path, target: Path) -> dict | None:
    """Write ``source`` to ``target`` with qform = sform = the grid SimpleITK reads, when they disagree.

    Returns what was found (for the manifest) or None, in which case nothing is written. Only the header
    changes: the extension and voxel bytes after it are streamed unchanged, so intensities, type and
    scaling stay exactly the release's. Both codes are kept where set (an absent one takes the other's)."""
    import gzip  # start-up: gzip only where this runs

    found = forms_disagreement(source)
    if found is None:
        return None
    grid = read_header(source)
    assert grid is not None
    affine = simpleitk_affine(source)
    qcode, scode = found["qform_code"], found["sform_code"]
    gz = source.name.lower().endswith(".gz")
    target.parent.mkdir(parents=True, exist_ok=True)
    with (gzip.open(source, "rb") if gz else open(source, "rb")) as src, \
            (gzip.open(target, "wb", compresslevel=6) if gz else open(target, "wb")) as dst:
        # the header as stored (a loaded image's header has its scaling moved into the voxel proxy)
        kind = type(grid.header)
        header = kind(binaryblock=src.read(kind.template_dtype.itemsize), check=False)
        header.set_qform(affine, code=qcode or scode or 1)
        header.set_sform(affine, code=scode or qcode or 1)
        dst.write(header.binaryblock)
        shutil.copyfileobj(src, dst, 1024 * 1024)
    return found
