"""A sparse index of a label volume: where each label's voxels are, found in one pass.

Vessel labels fill a few per mille of a CTA crop. Per-label quantities (voxel counts, bounding boxes,
median coordinates) and the label adjacency therefore come from the foreground voxels' coordinates
grouped by label, instead of one full-array comparison per label (13 for TopCoW, 42 for TopBrain) or
scipy's ``find_objects`` (whose import alone costs a quarter of a second). The one full pass, finding
the foreground, reads the array eight bytes at a time (:func:`nonzero_flat`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def nonzero_flat(arr: np.ndarray) -> np.ndarray:
    """``np.flatnonzero(arr)`` of an integer or boolean array, for a C-contiguous one a word at a time.

    In a sparse label volume almost every 8-byte word is zero, so the words are scanned as uint64 and
    only the few non-zero ones element by element: for a 24-Mvoxel uint8 crop at 0.6 % foreground, 8 ms
    instead of 42. Floats are not taken this way (-0.0 has a non-zero bit pattern).
    """
    a = np.asarray(arr)
    if a.dtype.kind not in "biu" or not a.flags.c_contiguous or a.itemsize > 8 or 8 % a.itemsize:
        return np.flatnonzero(a)
    flat = a.reshape(-1)
    per = 8 // a.itemsize
    head = flat.size - flat.size % per
    words = np.flatnonzero(flat[:head].view(np.uint64))
    rows, lanes = np.nonzero(flat[:head].reshape(-1, per)[words])   # row-major: ascending flat indices
    found = words[rows] * per + lanes
    if head < flat.size:
        found = np.concatenate((found, head + np.flatnonzero(flat[head:])))
    return found.astype(np.intp, copy=False)


@dataclass(frozen=True)
class LabelIndex:
    """Foreground voxels of a (z, y, x) label array, grouped by label (labels > 0 only)."""

    shape: tuple[int, ...]
    labels: tuple[int, ...]              # ascending
    coords: np.ndarray                   # (ndim, K) voxel indices, grouped by label, raster order inside
    starts: np.ndarray                   # group g is coords[:, starts[g]:starts[g + 1]]
    flat: np.ndarray                     # (K,) the same voxels' flat (raster) indices

    @classmethod
    def of(cls, labels: np.ndarray) -> LabelIndex:
        arr = np.asarray(labels)
        flat = nonzero_flat(arr) if arr.dtype.kind in "ub" else np.flatnonzero(arr > 0)
        values = arr.reshape(-1)[flat]
        order = np.argsort(values, kind="stable")
        flat, values = flat[order], values[order]
        cuts = np.flatnonzero(values[1:] != values[:-1]) + 1
        starts = np.concatenate(([0], cuts, [values.size])).astype(np.intp)
        present = tuple(int(v) for v in values[starts[:-1]]) if values.size else ()
        coords = np.array(np.unravel_index(flat, arr.shape), dtype=np.intp).reshape(arr.ndim, -1)
        return cls(tuple(arr.shape), present, coords, starts, flat)

    def _group(self, label: int) -> int | None:
        i = int(np.searchsorted(self.labels, label))
        return i if i < len(self.labels) and self.labels[i] == label else None

    def count(self, label: int) -> int:
        g = self._group(label)
        return 0 if g is None else int(self.starts[g + 1] - self.starts[g])

    def voxels(self, label: int) -> np.ndarray:
        """(ndim, n) indices of the label's voxels in raster order."""
        g = self._group(label)
        if g is None:
            return np.zeros((len(self.shape), 0), np.intp)
        return self.coords[:, self.starts[g]:self.starts[g + 1]]

    def box(self, label: int) -> tuple[slice, ...] | None:
        """Tight slices around the label's voxels (None when absent), as ``find_objects`` gives them."""
        v = self.voxels(label)
        if v.shape[1] == 0:
            return None
        return tuple(slice(int(lo), int(hi) + 1) for lo, hi in zip(v.min(axis=1), v.max(axis=1), strict=True))

    def values(self) -> np.ndarray:
        """(K,) the label of each indexed voxel, in the order of ``coords`` and ``flat``."""
        return np.repeat(np.asarray(self.labels, dtype=np.int64), np.diff(self.starts))

    def median_x(self, label: int) -> float:
        """Median of the last-axis (x) index of the label's voxels."""
        return float(np.median(self.voxels(label)[-1]))


def box_volume(box: tuple[slice, ...] | None) -> int:
    return 0 if box is None else math.prod(s.stop - s.start for s in box)
