"""3-D box overlap for TopCoW task 2 (multiclass CoW detection): IoU of inner shells.

A box's inner shell at ratio r keeps the voxels within ceil(r·size_i) of a face along some axis i.
Shell = box minus an inner box, so every count is a difference of box-intersection volumes; this is
exact and O(1) instead of allocating the union bounding box (tests compare it with boolean arrays).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Interval = tuple[int, int]  # inclusive [lo, hi]; empty when hi < lo


def _inner(size: Sequence[int], location: Sequence[int], ratio: float) -> list[Interval]:
    """The box shrunk by ceil(ratio·size) voxels on every side (ratio 0: the box itself)."""
    return [(loc + math.ceil(ratio * s), loc + s - 1 - math.ceil(ratio * s))
            for s, loc in zip(size, location, strict=False)]


def _volume(box: list[Interval]) -> int:
    return math.prod(max(hi - lo + 1, 0) for lo, hi in box)


def _meet(a: list[Interval], b: list[Interval]) -> int:
    return _volume([(max(x[0], y[0]), min(x[1], y[1])) for x, y in zip(a, b, strict=False)])


def shell_iou(size_a: Sequence[int], loc_a: Sequence[int], size_b: Sequence[int], loc_b: Sequence[int],
              ratio: float) -> float:
    a, b = _inner(size_a, loc_a, 0), _inner(size_b, loc_b, 0)
    ia, ib = _inner(size_a, loc_a, ratio), _inner(size_b, loc_b, ratio)
    shell_a = _volume(a) - _volume(ia)
    shell_b = _volume(b) - _volume(ib)
    inter = _meet(a, b) - _meet(a, ib) - _meet(ia, b) + _meet(ia, ib)
    union = shell_a + shell_b - inter
    return inter / union if union else 0.0


def box_scores(size_p, loc_p, size_g, loc_g) -> dict[str, float]:
    return {"boundary_iou": shell_iou(size_p, loc_p, size_g, loc_g, 0.2),
            "iou": shell_iou(size_p, loc_p, size_g, loc_g, 0.5)}
