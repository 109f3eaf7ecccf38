"""TopBrain twins: whole-brain vessel trees with 40 (CTA) / 42 (MRA) labels.

The phantom is grown from the task's own valid-neighbour table: labels are added in breadth-first
order from the basilar artery, each as a tube that starts on the centreline of an already placed
neighbour it is allowed to touch, and a tube is kept only if it is one 26-connected piece that touches
its parent and nothing outside its valid-neighbour list. Labels with no allowed neighbour (e.g. the
CTA superior sagittal sinus) become free-standing tubes. The ground truth therefore has
``neighbor_error`` 0, as real annotations do, and a perfect submission ties the best human value.

Cases are one template per task, shifted by a few voxels, with some side-road labels dropped (never in
the first test case, so every side-road label occurs in the test set and a perfect F1 is 1).
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

import numpy as np
from scipy import ndimage
from skimage.morphology import skeletonize

from ...data.split import split_ids, write_split
from ...data.synthetic.common import case_paths, write_tables
from ...data.synthetic.volumes import make_image, noisy_intensity
from ...medimage.geometry import write_image
from ...metrics.topology import components
from ...task import Task
from ..topcow.synthetic import paint_tube
from .grade import TRACKS, load_valid_neighbors

SHAPE = (32, 48, 48)          # (z, y, x)
MARGIN = 3                    # empty border, so per-case shifts never wrap a vessel around
N_CASES = 25                  # -> 20 train / 5 test
ORIGIN = (-12.0, -11.5, 2.0)
SPACING = {"cta": (0.5, 0.5, 0.7), "mra": (0.35, 0.35, 0.6)}
PREFIX = {"cta": "topcow_ct", "mra": "topcow_mr"}
INTENSITY = {"cta": (40.0, 330.0), "mra": (60.0, 470.0)}   # background, vessel
TRUNKS = {1, 4, 6, 23, 24}    # BA, ICAs, VAs: drawn thicker
MIN_VOXELS = 20


def _placement_order(valid: dict[int, frozenset[int]]) -> list[tuple[int, int | None]]:
    """(label, BFS parent) from BA; labels unreachable from it start their own tree (parent None)."""
    order: list[tuple[int, int | None]] = []
    seen: set[int] = set()
    for root in sorted(valid, key=lambda k: (k != 1, k)):
        if root in seen:
            continue
        seen.add(root)
        queue: deque[tuple[int, int | None]] = deque([(root, None)])
        while queue:
            label, parent = queue.popleft()
            order.append((label, parent))
            for nxt in sorted(valid[label]):
                if nxt not in seen:
                    seen.add(nxt)
                    queue.append((nxt, label))
    return order


def _try_tube(labels: np.ndarray, start: np.ndarray, end: np.ndarray, radius: float, label: int,
              allowed: frozenset[int], must_touch: int | None) -> bool:
    """Paint the tube if it is valid (one piece, in the margin, touching only allowed labels)."""
    lo_pt, hi_pt = np.minimum(start, end) - radius, np.maximum(start, end) + radius
    if np.any(lo_pt < MARGIN) or np.any(hi_pt > np.asarray(labels.shape) - 1 - MARGIN):
        return False
    lo = np.maximum(np.floor(lo_pt).astype(int) - 2, 0)
    hi = np.minimum(np.ceil(hi_pt).astype(int) + 3, labels.shape)
    box = tuple(slice(a, b) for a, b in zip(lo, hi, strict=True))
    local = labels[box].copy()
    paint_tube(local, start - lo, end - lo, radius, label)
    new = local == label
    # one piece, and thick/long enough that its Lee skeleton is not empty (else a perfect clDice is 0)
    if np.count_nonzero(new) < MIN_VOXELS or components(new) != 1 \
            or not skeletonize(np.ascontiguousarray(new.transpose(2, 1, 0))).any():
        return False
    ring = ndimage.binary_dilation(new, np.ones((3, 3, 3), bool)) & ~new
    touched = set(np.unique(local[ring]).tolist()) - {0}
    if not touched <= allowed or (must_touch is not None and must_touch not in touched):
        return False
    labels[box] = local
    return True


def brain_phantom(valid: dict[int, frozenset[int]], rng: np.random.Generator) -> np.ndarray:
    """A uint8 (z, y, x) label volume whose every label touches only labels its table allows."""
    labels = np.zeros(SHAPE, dtype=np.uint8)
    centrelines: dict[int, np.ndarray] = {}
    shape = np.asarray(SHAPE, float)
    for label, parent in _placement_order(valid):
        radius = 1.4 if label in TRUNKS else 1.05
        parents = [parent] if parent is not None else []
        parents += [p for p in sorted(valid[label]) if p in centrelines and p != parent]
        placed = False
        for anchor in [*parents, None]:
            for _ in range(60):
                if anchor is None:
                    start = rng.uniform(MARGIN + 2, shape - MARGIN - 3)
                else:
                    line = centrelines[anchor]
                    start = line[rng.integers(len(line))]
                direction = rng.normal(size=3)
                direction /= np.linalg.norm(direction)
                end = start + direction * rng.uniform(5.0, 9.0)
                if _try_tube(labels, start, end, radius, label, valid[label], anchor):
                    centrelines[label] = np.linspace(start, end, 8)
                    placed = True
                    break
            if placed:
                break
    return labels


def generate(task: Task, public: Path, private: Path, rng: np.random.Generator) -> None:
    key = "cta" if task.modality == "cta" else "mra"
    track = TRACKS[key]
    valid = load_valid_neighbors(task.folder / track.table)
    template = brain_phantom(valid, rng)
    ids = [f"{PREFIX[key]}_{i:03d}" for i in range(1, N_CASES + 1)]
    train, test = split_ids(ids)
    background, vessel = INTENSITY[key]
    answers: dict[str, str] = {}
    for case_id in ids:
        labels = np.roll(template, [int(v) for v in rng.integers(-2, 3, size=3)], axis=(0, 1, 2))
        keep_all = case_id == test[0]
        for label in track.side_road:
            if not keep_all and rng.random() < (0.2 if case_id in train else 0.15):
                labels[labels == label] = 0
        image = noisy_intensity((labels > 0) * (vessel - background) + background, rng, 8.0)
        image_path, label_path = case_paths(public, private, case_id, case_id in train, f"{case_id}_0000.nii.gz",
                                            f"{case_id}.nii.gz", answers)
        write_image(make_image(image, SPACING[key], ORIGIN), image_path)
        write_image(make_image(labels, SPACING[key], ORIGIN), label_path)
    write_tables(public, private, task.id_column, test, "predicted_mask_path", lambda i: f"predictions/{i}.nii.gz",
                 "label_path", answers)
    write_split(private, train, test)
