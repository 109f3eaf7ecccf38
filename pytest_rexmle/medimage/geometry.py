"""Reading and checking image files the way every grader must.

Predictions are never resampled: a different size (or dimension, or component count) is an invalid
submission, reported with the case id and the numbers that differ. A different spacing, origin or
direction on the ground truth's size is not: the voxels are scored index for index
on the ground truth's grid, as every organiser's evaluation does, and the difference is recorded as a
warning (:mod:`.header_notes`) for the result and for ``rexmle validate``.

Predictions are agent files, so they are read in two steps (:func:`read_image` with ``expected``):
first the header, parsed here for NIfTI, MetaImage and NRRD (bounded bytes, no external data files, no
multi-megabyte header extensions) and then by SimpleITK's own header-only read with the ImageIO fixed by
the file name, each compared with the expected grid; only then are voxels decoded, so a 4 MB gzip bomb
or a 4 KB sparse file declaring a terabyte grid is an INVALID that costs a few kilobytes of reading.
Decoded memory is then at most the expected voxel count times 8 bytes.

NumPy is imported inside the functions that use it: writing an empty mask or reading a header (the
sample agent, ``rexmle validate`` of box and edge tasks) needs SimpleITK only.
"""

from __future__ import annotations

import gzip
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import SimpleITK as sitk

from ..agent_output import clean_text, open_regular
from ..errors import InvalidSubmission
from .header_notes import record

if TYPE_CHECKING:
    import numpy as np  # start-up: numpy only where this runs

#: header differences at most this large are not even worth a warning (mm, mm, direction cosines)
SPACING_TOL = 1e-4
ORIGIN_TOL = 1e-3
DIRECTION_TOL = 1e-4
#: header text read before the voxels (MetaImage, NRRD), and NIfTI extensions allowed before them
MAX_HEADER_BYTES = 1024 * 1024
#: ImageIO by file name: the reader never guesses the format from agent bytes
IMAGE_IOS = ((".nii.gz", "NiftiImageIO"), (".nii", "NiftiImageIO"), (".mha", "MetaImageIO"),
             (".nrrd", "NrrdImageIO"))


@dataclass(frozen=True)
class Geometry:
    """What is compared: dimension, size (x, y, z), components, spacing, origin and direction."""

    dimension: int
    size: tuple[int, ...]
    components: int
    spacing: tuple[float, ...]
    origin: tuple[float, ...]
    direction: tuple[float, ...]

    @classmethod
    def of(cls, img) -> Geometry:
        """Of an image or of an ``ImageFileReader`` after ``ReadImageInformation`` (no voxels needed)."""
        if isinstance(img, Geometry):
            return img
        components = img.GetNumberOfComponentsPerPixel() if hasattr(img, "GetNumberOfComponentsPerPixel") \
            else img.GetNumberOfComponents()
        return cls(img.GetDimension(), tuple(int(s) for s in img.GetSize()), int(components),
                   tuple(img.GetSpacing()), tuple(img.GetOrigin()), tuple(img.GetDirection()))

    def place(self, img: sitk.Image) -> None:
        """Give ``img`` (of this size) this spacing, origin and direction: ``CopyInformation`` without an
        image of the grid to copy from."""
        img.SetSpacing(self.spacing)
        img.SetOrigin(self.origin)
        img.SetDirection(self.direction)


def read_image(path: Path, case_id: str, expected: sitk.Image | Geometry | None = None) -> sitk.Image:
    """Read an image file; unreadable files are an agent fault.

    With ``expected`` (the grid a prediction must have) the file is an agent's: its header is checked
    against that grid before any voxel is decoded (see the module docstring). Without it the file is
    the harness's own (ground truth, public inputs).
    """
    if expected is not None:
        return _read_checked(path, case_id, expected)
    try:
        img = sitk.ReadImage(str(path))
    except (RuntimeError, OSError) as exc:
        raise InvalidSubmission(f"case {case_id!r}: cannot read {path.name}: {_last_line(exc)}") from None
    if path.name.endswith((".nii", ".nii.gz")) and img.GetPixelID() in (sitk.sitkFloat32, sitk.sitkFloat64):
        _reject_hidden_non_finite(path, case_id)
    return img


def _last_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return clean_text(text.splitlines()[-1] if text else type(exc).__name__, limit=200)


def image_io(path: Path, case_id: str) -> str:
    name = path.name.lower()
    for suffix, io in IMAGE_IOS:
        if name.endswith(suffix):
            return io
    raise InvalidSubmission(f"case {case_id!r}: {clean_text(path.name, limit=80)!r} is not a NIfTI, MHA or NRRD file")


def _read_checked(path: Path, case_id: str, expected: sitk.Image | Geometry) -> sitk.Image:
    where = f"case {case_id!r}"
    io = image_io(path, case_id)
    ref = Geometry.of(expected)
    voxels = math.prod(ref.size)
    fd = open_regular(path, f"{where}: {path.name}")
    try:
        with open(fd, "rb", closefd=False) as fh:   # the declared sizes' product is what decoding would allocate
            parse = {"NiftiImageIO": _nifti_sizes, "MetaImageIO": _meta_sizes, "NrrdImageIO": _nrrd_sizes}[io]
            declared = parse(fh, path.name, where)
    finally:
        os.close(fd)
    if math.prod(declared) != voxels:
        shape = tuple(declared)
        while len(shape) > ref.dimension and shape[-1] == 1:
            shape = shape[:-1]
        if len(shape) != ref.dimension:
            raise InvalidSubmission(f"{where}: prediction is {len(shape)}-D (size {shape}), expected "
                                    f"{ref.dimension}-D {ref.size}; nothing was decoded")
        raise InvalidSubmission(f"{where}: prediction size {shape} differs from the ground truth {ref.size}; "
                                "nothing was decoded")
    reader = sitk.ImageFileReader()
    reader.SetImageIO(io)
    reader.SetFileName(str(path))
    try:
        reader.ReadImageInformation()
    except (RuntimeError, OSError) as exc:
        raise InvalidSubmission(f"{where}: cannot read {path.name}: {_last_line(exc)}") from None
    noted = check_geometry_of(Geometry.of(reader), ref, case_id)
    if sitk.GetPixelIDValueAsString(reader.GetPixelID()).startswith(("complex", "vector")):
        raise InvalidSubmission(f"{where}: unsupported voxel type {sitk.GetPixelIDValueAsString(reader.GetPixelID())}")
    try:
        img = reader.Execute()
    except (RuntimeError, OSError) as exc:
        raise InvalidSubmission(f"{where}: cannot read {path.name}: {_last_line(exc)}") from None
    # the decoded image is checked again (the header read is the one that bounds decoding); its notes say
    # the same as the header's, so they are recorded only when the header read had none
    if check_geometry_of(Geometry.of(img), ref, case_id, notify=not noted) or noted:
        ref.place(img)  # scored on the ground truth's grid: nothing downstream sees the header
    if io == "NiftiImageIO" and img.GetPixelID() in (sitk.sitkFloat32, sitk.sitkFloat64):
        _reject_hidden_non_finite(path, case_id)
    return img


# -- header parsers: only what bounds the decoding (sizes, components, where the voxels are) ----------------
def _unreadable(name: str, where: str, why: str) -> InvalidSubmission:
    return InvalidSubmission(f"{where}: cannot read {clean_text(name, limit=80)}: {why}")


NIFTI_SCALAR = {2: 1, 4: 2, 8: 4, 16: 4, 64: 8, 256: 1, 512: 2, 768: 4, 1024: 8, 1280: 8}


def _nifti_sizes(fh, name: str, where: str) -> list[int]:
    magic = fh.read(2)
    fh.seek(0)
    try:
        stream = gzip.GzipFile(fileobj=fh, mode="rb") if magic == b"\x1f\x8b" else fh
        raw = stream.read(540)
    except (OSError, EOFError, ValueError) as exc:
        raise _unreadable(name, where, f"damaged gzip stream ({exc})") from None
    if len(raw) < 348:
        raise _unreadable(name, where, "too short for a NIfTI header")
    for order in "<>":
        size = struct.unpack(order + "i", raw[:4])[0]
        if size in (348, 540):
            break
    else:
        raise _unreadable(name, where, "not a NIfTI header")
    if size == 348:
        dims = struct.unpack(order + "8h", raw[40:56])
        datatype = struct.unpack(order + "h", raw[70:72])[0]
        offset = struct.unpack(order + "f", raw[108:112])[0]
        magic_text = raw[344:348]
        if magic_text == b"ni1\x00":
            raise _unreadable(name, where, "a NIfTI header pointing to a separate .img file is not accepted")
        if magic_text != b"n+1\x00":
            raise _unreadable(name, where, "not a single-file NIfTI-1 image")
    else:
        if len(raw) < 540:
            raise _unreadable(name, where, "too short for a NIfTI-2 header")
        if raw[4:8] != b"n+2\x00":
            raise _unreadable(name, where, "not a single-file NIfTI-2 image")
        datatype = struct.unpack(order + "h", raw[12:14])[0]
        dims = struct.unpack(order + "8q", raw[16:80])
        offset = struct.unpack(order + "q", raw[168:176])[0]
    ndim = dims[0]
    if not 1 <= ndim <= 7 or any(d < 1 for d in dims[1:ndim + 1]):
        raise _unreadable(name, where, f"invalid NIfTI dimensions {list(dims[:ndim + 1 if 0 <= ndim <= 7 else 1])}")
    if datatype not in NIFTI_SCALAR:
        raise InvalidSubmission(f"{where}: unsupported voxel type (NIfTI datatype {datatype}); one scalar "
                                "integer or float value per voxel is required")
    if not (math.isfinite(offset) and size <= offset <= size + 4 + MAX_HEADER_BYTES):
        raise _unreadable(name, where, f"voxel data offset {offset} is outside the header area "
                                       f"(at most {MAX_HEADER_BYTES} bytes of extensions)")
    if ndim >= 5 and dims[5] != 1:  # NIfTI keeps vector components on the fifth axis
        raise InvalidSubmission(f"{where}: prediction has {dims[5]} components per voxel, expected 1")
    return list(dims[1:ndim + 1])


META_TYPES = {"MET_CHAR": 1, "MET_UCHAR": 1, "MET_SHORT": 2, "MET_USHORT": 2, "MET_INT": 4, "MET_UINT": 4,
              "MET_LONG": 8, "MET_ULONG": 8, "MET_LONG_LONG": 8, "MET_ULONG_LONG": 8, "MET_FLOAT": 4,
              "MET_DOUBLE": 8}


def _header_lines(fh, name: str, where: str, stop) -> list[str]:
    """Text lines of a header, at most MAX_HEADER_BYTES, up to and including the line ``stop`` accepts."""
    lines = []
    total = 0
    while True:
        line = fh.readline(MAX_HEADER_BYTES + 1)
        total += len(line)
        if total > MAX_HEADER_BYTES:
            raise _unreadable(name, where, f"header longer than {MAX_HEADER_BYTES} bytes")
        if not line:
            raise _unreadable(name, where, "header ends before the voxel data")
        text = line.decode("latin-1").rstrip("\r\n")
        lines.append(text)
        if stop(text):
            return lines


def _fields(lines: list[str], sep: str, name: str, where: str) -> dict[str, str]:
    """``key<sep>value`` pairs, keys lower-cased; a repeated key is refused (readers disagree on which wins)."""
    out: dict[str, str] = {}
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#") or (sep == ":" and ":=" in line):
            continue
        key, found, value = line.partition(sep)
        if not found:
            raise _unreadable(name, where, f"malformed header line {clean_text(line, limit=60)!r}")
        key = " ".join(key.split()).lower()
        if key in out:
            raise _unreadable(name, where, f"header field {clean_text(key, limit=40)!r} appears twice")
        out[key] = value.strip()
    return out


def _sizes(text: str | None, field: str, name: str, where: str) -> list[int]:
    try:
        sizes = [int(v) for v in (text or "").split()]
    except ValueError:
        raise _unreadable(name, where, f"{field} is not a list of integers") from None
    if not sizes or len(sizes) > 7 or any(s < 1 for s in sizes):
        raise _unreadable(name, where, f"invalid {field} {clean_text(text or '', limit=60)!r}")
    return sizes


def _meta_sizes(fh, name: str, where: str) -> list[int]:
    lines = _header_lines(fh, name, where, lambda t: t.split("=")[0].strip().lower() == "elementdatafile")
    fields = _fields(lines, "=", name, where)
    if fields.get("elementdatafile", "").lower() != "local":
        raise InvalidSubmission(f"{where}: {clean_text(name, limit=80)} must keep its voxels in the same file "
                                "(ElementDataFile = LOCAL)")
    element = fields.get("elementtype", "").upper()
    if element not in META_TYPES:
        raise InvalidSubmission(f"{where}: unsupported voxel type {clean_text(element, limit=40)!r}; one scalar "
                                "integer or float value per voxel is required")
    channels = fields.get("elementnumberofchannels", "1")
    if channels.strip() != "1":
        raise InvalidSubmission(f"{where}: prediction has {clean_text(channels, limit=20)} components per voxel, expected 1")
    sizes = _sizes(fields.get("dimsize"), "DimSize", name, where)
    ndims = fields.get("ndims")
    if ndims is not None and ndims.strip() != str(len(sizes)):
        raise _unreadable(name, where, f"NDims {clean_text(ndims, limit=20)} does not match DimSize")
    return sizes


def _nrrd_sizes(fh, name: str, where: str) -> list[int]:
    first = fh.readline(64)
    if not first.startswith(b"NRRD000"):
        raise _unreadable(name, where, "not an NRRD file")
    lines = _header_lines(fh, name, where, lambda t: not t.strip())
    fields = _fields(lines, ":", name, where)
    if "data file" in fields or "datafile" in fields:
        raise InvalidSubmission(f"{where}: {clean_text(name, limit=80)} must keep its voxels in the same file "
                                "(detached NRRD data files are not accepted)")
    if fields.get("type", "").lower() == "block":
        raise InvalidSubmission(f"{where}: unsupported voxel type 'block'")
    sizes = _sizes(fields.get("sizes"), "sizes", name, where)
    dimension = fields.get("dimension")
    if dimension is None or dimension.strip() != str(len(sizes)):
        raise _unreadable(name, where, "dimension does not match sizes")
    return sizes


def _reject_hidden_non_finite(path: Path, case_id: str) -> None:
    """SimpleITK's NIfTI reader turns NaN and ±inf into 0; read the raw values to see them."""
    import nibabel as nib  # start-up: nibabel only where this runs
    import numpy as np  # start-up: numpy only where this runs

    try:
        # nibabel types load() as FileBasedImage, the base of every format; a NIfTI image has dataobj
        data = np.asanyarray(nib.load(str(path)).dataobj)  # type: ignore[attr-defined]
    except Exception as exc:  # nibabel raises many types for damaged files
        raise InvalidSubmission(f"case {case_id!r}: cannot read {path.name}: {exc}") from None
    if data.dtype.kind == "f" and not np.isfinite(data).all():
        raise InvalidSubmission(f"case {case_id!r}: prediction contains NaN or infinite values")


def check_geometry(pred: sitk.Image, ref: sitk.Image, case_id: str) -> list[str]:
    return check_geometry_of(Geometry.of(pred), Geometry.of(ref), case_id)


def check_geometry_of(pred: Geometry, ref: Geometry, case_id: str, notify: bool = True) -> list[str]:
    """Refuse another dimension, component count or size; return (and record) header differences.

    With ``notify`` the returned messages are also recorded with :func:`.header_notes.record`, so a
    grader's caller collects them without the grader passing them on.
    """
    if pred.dimension != ref.dimension:
        raise InvalidSubmission(f"case {case_id!r}: prediction is {pred.dimension}-D, expected {ref.dimension}-D")
    if pred.components != 1:
        raise InvalidSubmission(f"case {case_id!r}: prediction has {pred.components} components per voxel, expected 1")
    if pred.size != ref.size:
        raise InvalidSubmission(f"case {case_id!r}: prediction size {pred.size} differs from the ground truth {ref.size}")
    notes = header_differences(pred, ref, case_id)
    for note in notes if notify else ():
        record(note)
    return notes


def header_differences(pred: Geometry, ref: Geometry, case_id: str) -> list[str]:
    """One message per header property (spacing, origin, direction) outside its tolerance."""
    import numpy as np  # start-up: numpy only where this runs

    notes = []
    for name, a, b, tol in (("spacing", pred.spacing, ref.spacing, SPACING_TOL),
                            ("origin", pred.origin, ref.origin, ORIGIN_TOL),
                            ("direction", pred.direction, ref.direction, DIRECTION_TOL)):
        finite = bool(np.all(np.isfinite(a)))
        if finite and np.max(np.abs(np.subtract(a, b))) <= tol:
            continue
        by = f"by up to {float(np.max(np.abs(np.subtract(a, b)))):.6g}" if finite else "(not finite)"
        notes.append(f"case {case_id!r}: prediction header {name} {tuple(round(float(x), 6) for x in a)} differs from the "
                     f"ground truth's {tuple(round(float(x), 6) for x in b)} {by} (tolerance {tol}); the voxels were "
                     "scored on the ground truth's grid, index for index")
    return notes


def label_array(img: sitk.Image, case_id: str, allowed: set[int] | None = None) -> np.ndarray:
    """Voxel labels (z, y, x) as integers; non-integral, non-finite or disallowed values are invalid.

    Integer images keep their own type (a 512×512×256 uint8 volume stays 64 MB instead of 512 MB as
    int64); floats with integral values become int64; booleans become uint8.
    """
    return label_values(sitk.GetArrayFromImage(img), case_id, allowed)  # an owned copy: views die with the image


def label_values(arr: np.ndarray, case_id: str, allowed: set[int] | None = None) -> np.ndarray:
    """:func:`label_array` of voxels already in a NumPy array the caller owns (e.g. a crop of a view)."""
    import numpy as np  # start-up: numpy only where this runs

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
    if allowed is not None and not _within_range(labels, allowed):
        bad = sorted(present_values(labels) - allowed)
        if bad:
            raise InvalidSubmission(f"case {case_id!r}: label value(s) {bad[:10]} are not allowed; allowed: {sorted(allowed)}")
    return labels


def nonzero_mask(img: sitk.Image, case_id: str) -> np.ndarray:
    """Foreground = every non-zero voxel, of any voxel type, floats included (ISLES'22, SEG.A).

    A float mask with values in (0, 1] is a mask there: the organisers score it, so it is never refused
    for non-integer values. The voxels must still be finite numbers (NaN is not a decision).
    """
    import numpy as np  # start-up: numpy only where this runs

    arr = sitk.GetArrayViewFromImage(img)
    if arr.dtype.kind not in "biuf":
        raise InvalidSubmission(f"case {case_id!r}: unsupported voxel type {arr.dtype}")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise InvalidSubmission(f"case {case_id!r}: prediction contains NaN or infinite values")
    return arr != 0


def _within_range(labels: np.ndarray, allowed: set[int]) -> bool:
    """True when every value is in ``allowed``, shown by the maximum (and minimum) and a test per missing
    value below the maximum (TopCoW has no 14): a few vectorised passes instead of listing the values
    present, a quarter of the load of a TopBrain-size volume. False means "look closer", never "invalid"."""
    top = max(allowed, default=-1)
    holes = set(range(top + 1)) - allowed
    if not labels.size or top < 0 or min(allowed) < 0 or len(holes) > 3:
        return False
    if int(labels.max()) > top or (labels.dtype.kind != "u" and int(labels.min()) < 0):
        return False
    return not any(bool((labels == hole).any()) for hole in holes)


def present_values(labels: np.ndarray) -> set[int]:
    """The distinct values of an integer array; a lookup table for 8/16-bit labels (no sort, no copy)."""
    import numpy as np  # start-up: numpy only where this runs

    if labels.dtype in (np.uint8, np.uint16):
        seen = np.zeros(256 if labels.dtype == np.uint8 else 65536, dtype=bool)
        seen[labels.ravel()] = True
        return set(np.flatnonzero(seen).tolist())
    return set(np.unique(labels).tolist())


def read_mask(path: Path, ref: sitk.Image, case_id: str, allowed: set[int] | None = None) -> np.ndarray:
    """Read a prediction, check it against ``ref`` and return its label array."""
    img = read_image(path, case_id, ref)
    return label_array(img, case_id, allowed)


def image_like(array: np.ndarray, ref: sitk.Image) -> sitk.Image:
    img = sitk.GetImageFromArray(array)
    img.CopyInformation(ref)
    return img


def write_image(img: sitk.Image, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    sitk.WriteImage(img, str(path), useCompression=True)


def header_geometry(path: Path) -> Geometry:
    """The grid of a harness file (ground truth, public input) from its header alone: what a prediction
    is checked against before any of its voxels, or the ground truth's, are decoded."""
    reader = sitk.ImageFileReader()
    reader.SetFileName(str(path))
    reader.ReadImageInformation()
    return Geometry.of(reader)


def reference_geometry(path: Path) -> sitk.Image:
    """An empty uint8 image on a file's grid, from its header (to write a mask on that grid).

    It allocates the voxels (50 ms for a 528×528×256 volume): only to check against a grid,
    :func:`header_geometry` reads the same header without them.
    """
    grid = header_geometry(path)
    ref = sitk.Image(list(grid.size), sitk.sitkUInt8)
    grid.place(ref)
    return ref


def zyx_spacing(img: sitk.Image) -> tuple[float, float, float]:
    """SimpleITK's (x, y, z) spacing reordered to the (z, y, x) axes of its NumPy array."""
    return tuple(float(s) for s in reversed(img.GetSpacing()))  # type: ignore[return-value]


def voxel_volume_mm3(img: sitk.Image) -> float:
    """|det(direction · diag(spacing))| — the physical volume of one voxel."""
    import numpy as np  # start-up: numpy only where this runs

    dim = img.GetDimension()
    direction = np.asarray(img.GetDirection(), dtype=float).reshape(dim, dim)
    return float(abs(np.linalg.det(direction @ np.diag(img.GetSpacing()))))
