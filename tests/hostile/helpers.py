"""Hostile files for the host-side reading tests, and a peak-memory probe.

Peak RSS is measured in a fresh interpreter (``resource.getrusage`` of that process), so imports and
earlier tests of this worker do not count, and a bound on it is a bound on what the hostile input cost.
"""

from __future__ import annotations

import gzip
import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

GIB = 1 << 30


def sparse_file(path: Path, size: int = GIB, head: bytes = b"") -> Path:
    """A file of ``size`` bytes that occupies a few kB on disk."""
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(size)
    return path


def nifti_header(dims: tuple[int, ...], datatype: int = 2, bitpix: int = 8, vox_offset: float = 352.0) -> bytes:
    """A NIfTI-1 single-file header (348 bytes + 4 extension bytes) declaring ``dims``."""
    h = bytearray(348)
    struct.pack_into("<i", h, 0, 348)
    struct.pack_into("<8h", h, 40, len(dims), *dims, *([1] * (7 - len(dims))))
    struct.pack_into("<hh", h, 70, datatype, bitpix)
    struct.pack_into("<8f", h, 76, 1, 1, 1, 1, 1, 1, 1, 1)
    struct.pack_into("<f", h, 108, vox_offset)
    struct.pack_into("<f", h, 112, 1.0)
    struct.pack_into("<h", h, 252, 1)  # qform_code: scanner
    h[344:348] = b"n+1\x00"
    return bytes(h) + b"\x00" * 4


def gzip_bomb(path: Path, dims: tuple[int, ...], zeros: int = 4 * GIB) -> Path:
    """A .nii.gz of a few MB whose stream inflates to ``zeros`` bytes of voxels.

    Built from gzip members (a valid multi-member stream, which zlib readers follow): the header, then
    one 16 MiB block of zeros compressed once and repeated.
    """
    block = gzip.compress(b"\x00" * (1 << 24), compresslevel=9)
    with open(path, "wb") as fh:
        fh.write(gzip.compress(nifti_header(dims)))
        for _ in range(zeros >> 24):
            fh.write(block)
    return path


def peak_rss_of(code: str, timeout: float = 120) -> dict:
    """Run ``code`` in a fresh interpreter; it must print one JSON object as its last line. Returns that
    object plus ``peak_mb`` (the interpreter's peak RSS), ``seconds`` and ``cpu_seconds`` (wall and CPU
    time of ``code`` itself, imports included)."""
    wrapper = textwrap.dedent("""
        import json, resource, sys, time
        start, cpu = time.monotonic(), time.process_time()
        out = {}
        exec(compile(sys.stdin.read(), "<probe>", "exec"))
        out["seconds"] = time.monotonic() - start
        out["cpu_seconds"] = time.process_time() - cpu
        out["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(out))
    """)
    proc = subprocess.run([sys.executable, "-c", wrapper], input=textwrap.dedent(code), capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def baseline_rss_mb() -> float:
    """Peak RSS of the probe after importing what the probes import (the floor the bounds are above)."""
    return peak_rss_of("""
        import numpy, SimpleITK, nibabel, tifffile, PIL.Image
        import pytest_rexmle.medimage.geometry, pytest_rexmle.competitions.dentex.grade, pytest_rexmle.capability.rules
    """)["peak_mb"]


def deep_folder(base: Path, levels: int) -> Path:
    """``base/d/d/.../d`` ``levels`` deep, made with relative steps (no path grows past PATH_MAX)."""
    base.mkdir(parents=True, exist_ok=True)
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        return Path(f"/proc/self/fd/{fd}").resolve()
    finally:
        os.close(fd)


def remove_tree(path: Path) -> None:
    """Remove a tree of any depth (``shutil.rmtree`` recurses and dies at ~1,000 levels, and so would
    pytest's own clean-up of old temporary folders)."""
    subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=True)
