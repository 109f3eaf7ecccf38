"""Bounding boxes of masks: where a metric is local to the masks it compares (contour distances, surfels,
skeletons), it is computed on the crop around them, exactly and at a fraction of the volume's cost."""

from __future__ import annotations

import numpy as np


def bounding_box(mask: np.ndarray) -> tuple[slice, ...] | None:
    """Tight slices around the non-zero voxels of ``mask`` (None when empty), via axis projections."""
    box = []
    for axis in range(mask.ndim):
        others = tuple(a for a in range(mask.ndim) if a != axis)
        hits = np.flatnonzero(np.any(mask, axis=others))
        if hits.size == 0:
            return None
        box.append(slice(int(hits[0]), int(hits[-1]) + 1))
    return tuple(box)


def union_box(*boxes: tuple[slice, ...] | None) -> tuple[slice, ...] | None:
    """Smallest box containing all given boxes (None entries are ignored)."""
    present = [b for b in boxes if b is not None]
    if not present:
        return None
    return tuple(slice(min(b[i].start for b in present), max(b[i].stop for b in present))
                 for i in range(len(present[0])))


def relative_box(inner: tuple[slice, ...], outer: tuple[slice, ...]) -> tuple[slice, ...]:
    """``inner`` (a box inside ``outer``, both in the same array's indices) in the indices of ``a[outer]``."""
    return tuple(slice(i.start - o.start, i.stop - o.start) for i, o in zip(inner, outer, strict=True))
