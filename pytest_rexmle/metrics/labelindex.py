"""A sparse index of a label volume: where each label's voxels are, found in one pass.

Vessel labels fill a few per mille of a CTA crop. Per-label quantities (voxel counts, bounding boxes,
median coordinates) therefore come from the foreground voxels' coordinates grouped by label, instead
of one full-array comparison per label (13 for TopCoW, 42 for TopBrain) or scipy's ``find_objects``
(whose import alone costs a quarter of a second).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LabelIndex:
    """Foreground voxels of a (z, y, x) label array, grouped by label (labels > 0 only)."""

    shape: tuple[int, ...]
    labels: tuple[int, ...]              # ascending
    coords: np.ndarray                   # (ndim, K) voxel indices, grouped by label, raster order inside
    starts: np.ndarray                   # group g is coords[:, starts[g]:starts[g + 1]]

    @classmethod
    def of(cls, labels: np.ndarray) -> LabelIndex:
        arr = np.asarray(labels)
        flat = np.flatnonzero(arr) if arr.dtype.kind in "ub" else np.flatnonzero(arr > 0)
        values = arr.reshape(-1)[flat]
        order = np.argsort(values, kind="stable")
        flat, values = flat[order], values[order]
        cuts = np.flatnonzero(values[1:] != values[:-1]) + 1
        starts = np.concatenate(([0], cuts, [values.size])).astype(np.intp)
        present = tuple(int(v) for v in values[starts[:-1]]) if values.size else ()
        coords = np.array(np.unravel_index(flat, arr.shape), dtype=np.intp).reshape(arr.ndim, -1)
        return cls(tuple(arr.shape), present, coords, starts)

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

    def median_x(self, label: int) -> float:
        """Median of the last-axis (x) index of the label's voxels."""
        return float(np.median(self.voxels(label)[-1]))


def box_volume(box: tuple[slice, ...] | None) -> int:
    return 0 if box is None else math.prod(s.stop - s.start for s in box)
