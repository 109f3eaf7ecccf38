"""TopCoW twins (challenges.md §7–§13): head-angiography-like volumes with a vessel ring.

Task 2 (boxes) needs the image and one ROI box per case, given to the agent as JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ...task import Task
from ..split import split_ids, write_split
from .common import write_answers, write_sample_submission
from .volumes import make_image, noisy_intensity, save, tube

SHAPE = (24, 40, 48)          # (z, y, x) voxels
SPACING = (0.45, 0.45, 0.6)   # (x, y, z) mm, anisotropic as in TopCoW
N_CASES = 25                  # -> 20 train / 5 test


def modality_prefix(task: Task) -> str:
    return "topcow_ct" if task.modality == "cta" else "topcow_mr"


def vessel_phantom(rng: np.random.Generator) -> np.ndarray:
    """A rough ring of tubes at a random offset; returns a boolean (z, y, x) mask."""
    mask = np.zeros(SHAPE, dtype=bool)
    cz, cy, cx = rng.integers(8, 16), rng.integers(12, 28), rng.integers(14, 34)
    ring = [(cz, cy - 6, cx), (cz, cy, cx + 8), (cz, cy + 6, cx), (cz, cy, cx - 8)]
    for a, b in zip(ring, ring[1:] + ring[:1]):
        mask |= tube(SHAPE, a, b, 1.2)
    mask |= tube(SHAPE, (cz, cy + 6, cx), (SHAPE[0] - 2, cy + 8, cx), 1.5)
    return mask


def bbox_of(mask: np.ndarray) -> dict[str, list[int]]:
    """Box of the mask in SimpleITK (x, y, z) order, as in roi_loc_labelsTr."""
    nz = np.argwhere(mask)
    lo, hi = nz.min(axis=0), nz.max(axis=0)
    size_zyx = hi - lo + 1
    return {"size": [int(v) for v in size_zyx[::-1]], "location": [int(v) for v in lo[::-1]]}


def boxes(task: Task, public: Path, private: Path, rng: np.random.Generator) -> None:
    prefix = modality_prefix(task)
    ids = [f"{prefix}_{i:03d}" for i in range(1, N_CASES + 1)]
    train, test = split_ids(ids)
    answers = {}
    for case_id in ids:
        vessels = vessel_phantom(rng)
        image = make_image(noisy_intensity(vessels * 300.0 + 40.0, rng, 15.0), SPACING)
        where = "train" if case_id in train else "test"
        save(image, public / where / "images" / f"{case_id}_0000.nii.gz")
        box = json.dumps(bbox_of(vessels))
        if where == "train":
            (public / "train" / "labels").mkdir(parents=True, exist_ok=True)
            (public / "train" / "labels" / f"{case_id}.json").write_text(box)
        else:
            (private / "test" / "labels").mkdir(parents=True, exist_ok=True)
            (private / "test" / "labels" / f"{case_id}.json").write_text(box)
            answers[case_id] = f"test/labels/{case_id}.json"
    write_sample_submission(public, task.id_column, "predicted_bbox_path", test, lambda i: f"predictions/{i}.json")
    write_answers(private, task.id_column, "label_path", answers)
    write_split(private, train, test)
