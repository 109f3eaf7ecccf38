"""An all-background NIfTI-1 volume on another NIfTI-1 file's grid, written from that file's header alone.

Every segmentation baseline is such a volume, and the sample agent writes one per test case inside
its sandbox, once per benchmark item. Through SimpleITK that costs its import (and NumPy's, which it
pulls in): most of the agent's time. Here the source header is copied unchanged except for what
describes the voxels (type uint8, 8 bits, no intensity scaling), so the grid — dimensions, pixel
spacing, qform and sform, hence size, spacing, origin and direction as any reader derives them — is
the source's by construction. Anything but a plain single-file NIfTI-1 header is left to the caller
(``None``), which then goes through SimpleITK.
"""

from __future__ import annotations

import gzip
import math
import struct
from pathlib import Path

HEADER_BYTES = 348
#: extensions between the header and the voxels copied with it (harness-made public images have none)
MAX_EXTENSION_BYTES = 1024 * 1024
DT_UINT8 = 2
_ZEROS = bytes(1 << 20)


def _open(path: Path):
    with open(path, "rb") as fh:
        gzipped = fh.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if gzipped else open(path, "rb")


def read_header(path: Path) -> tuple[bytes, str, tuple[int, ...]] | None:
    """(header and extension bytes up to the voxels, byte order, dim[1..dim[0]]) of a single-file NIfTI-1
    image, or None for anything else (NIfTI-2, .hdr/.img pairs, damaged or implausible headers)."""
    try:
        return _read_header(path)
    except (OSError, EOFError):  # a damaged gzip stream: the caller's SimpleITK path reports it
        return None


def _read_header(path: Path) -> tuple[bytes, str, tuple[int, ...]] | None:
    with _open(path) as fh:
        head = fh.read(HEADER_BYTES)
        if len(head) < HEADER_BYTES or head[344:348] != b"n+1\x00":
            return None
        order = next((o for o in "<>" if struct.unpack(o + "i", head[:4])[0] == HEADER_BYTES), None)
        if order is None:
            return None
        dims = struct.unpack(order + "8h", head[40:56])
        offset = struct.unpack(order + "f", head[108:112])[0]
        if not 1 <= dims[0] <= 7 or any(d < 1 for d in dims[1:dims[0] + 1]):
            return None
        if not (math.isfinite(offset) and HEADER_BYTES + 4 <= offset <= HEADER_BYTES + 4 + MAX_EXTENSION_BYTES):
            return None
        rest = fh.read(int(offset) - HEADER_BYTES)
        if len(rest) != int(offset) - HEADER_BYTES:
            return None
    return head + rest, order, tuple(dims[1:dims[0] + 1])


def write_empty_like(source: Path, target: Path) -> bool:
    """Write ``target`` (.nii or .nii.gz) as zeros of type uint8 on ``source``'s grid; False (and nothing
    written) when ``source`` is not a plain single-file NIfTI-1 image."""
    found = read_header(source)
    if found is None or not target.name.endswith((".nii", ".nii.gz")):
        return False
    header, order, dims = found
    patched = bytearray(header)
    struct.pack_into(order + "hh", patched, 70, DT_UINT8, 8)   # datatype, bitpix
    struct.pack_into(order + "ff", patched, 112, 1.0, 0.0)     # scl_slope, scl_inter: values as stored
    struct.pack_into(order + "ff", patched, 124, 0.0, 0.0)     # cal_max, cal_min: no display range
    target.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open(target, "wb", compresslevel=6) if target.name.endswith(".gz") else open(target, "wb")
    with opener as out:
        out.write(bytes(patched))
        remaining = math.prod(dims)
        while remaining:
            chunk = min(remaining, len(_ZEROS))
            out.write(_ZEROS[:chunk])
            remaining -= chunk
    return True
