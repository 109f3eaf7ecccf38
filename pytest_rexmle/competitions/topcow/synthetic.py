"""TopCoW twins: head-angiography-like volumes with a labelled Circle of Willis.

One phantom builder serves all three TopCoW tasks of a modality: the 13 CoW labels are drawn as
tubes in an anatomically ordered layout (ICAs/MCAs lateral, ACAs anterior, BA/PCAs posterior; LPS+, so
the patient's left has the larger x index), with the real anatomical variants switched per case:
Acom and the Pcoms present or absent, a 3rd-A2 sometimes present, A1 or P1 missing ("fetal" PCA).

* task 1 (``segmentation``): the label volume itself;
* task 2 (``boxes``): the bounding box of the labelled vessels, as the ROI JSON;
* task 3 (``edges``): the 8 edges read off the label volume with TopCoW's edge rules.

The test cases follow a fixed variant schedule so that every group-2 label (8, 9, 10, 15) occurs in
some test case (a perfect submission then scores F1 = 1) and each region shows several variant
classes (a constant guess cannot reach balanced accuracy 1).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...data.split import split_ids, write_split
from ...data.synthetic.common import case_paths, write_tables
from ...data.synthetic.volumes import make_image, noisy_intensity
from ...medimage.geometry import write_image
from ...metrics.topology import edge_lists, label_adjacency
from ...task import Task
from .grade import edges_json

SHAPE = (24, 40, 48)          # (z, y, x) voxels
N_CASES = 25                  # -> 20 train / 5 test
ORIGIN = (-10.8, -9.0, 4.2)   # mm, (x, y, z)
CENTER = (10, 21, 24)         # (z, y, x) of the CoW centre before the per-case shift


@dataclass(frozen=True)
class Modality:
    prefix: str
    spacing: tuple[float, float, float]   # (x, y, z) mm
    background: float
    vessel: float
    noise: float


MODALITIES = {
    "cta": Modality("topcow_ct", (0.45, 0.45, 0.6), 40.0, 350.0, 8.0),
    "mra": Modality("topcow_mr", (0.3, 0.3, 0.6), 60.0, 480.0, 8.0),
}


def modality(task: Task) -> Modality:
    return MODALITIES["cta" if task.modality == "cta" else "mra"]


@dataclass(frozen=True)
class Variant:
    """Which optional CoW segments a case has (TopCoW's edge names)."""

    acom: bool = True
    third_a2: bool = False
    r_pcom: bool = True
    l_pcom: bool = True
    r_a1: bool = True
    l_a1: bool = True
    r_p1: bool = True
    l_p1: bool = True


# test cases (sorted) get these variants in turn: covers labels 8, 9, 10, 15 and 4 classes per region
TEST_SCHEDULE = (
    Variant(),                                                       # ant 1101, pos 1111
    Variant(third_a2=True, r_pcom=False, l_pcom=False),              # ant 1111, pos 0110
    Variant(acom=False, r_pcom=False, l_p1=False),                   # ant 1001, pos 1010 (fetal left PCA)
    Variant(r_a1=False, l_pcom=False),                               # ant 1100, pos 0111
    Variant(r_pcom=False, l_pcom=False),                             # ant 1101, pos 0110
)


def random_variant(rng: np.random.Generator) -> Variant:
    acom = bool(rng.random() < 0.85)
    return Variant(acom=acom, third_a2=acom and bool(rng.random() < 0.15),
                   r_pcom=bool(rng.random() < 0.55), l_pcom=bool(rng.random() < 0.55),
                   r_a1=bool(rng.random() < 0.92), l_a1=bool(rng.random() < 0.92),
                   r_p1=bool(rng.random() < 0.85), l_p1=bool(rng.random() < 0.85))


def paint_tube(labels: np.ndarray, start, end, radius: float, value: int) -> None:
    """Label the still-empty voxels within ``radius`` of the segment start→end (both (z, y, x)).

    Works on the segment's bounding box only, and never overwrites a vessel drawn earlier, so a
    branch starting inside its parent touches the parent without cutting it.
    """
    a, b = np.asarray(start, float), np.asarray(end, float)
    lo = np.maximum(np.floor(np.minimum(a, b) - radius).astype(int), 0)
    hi = np.minimum(np.ceil(np.maximum(a, b) + radius).astype(int) + 1, labels.shape)
    if np.any(hi <= lo):
        return
    grid = np.stack(np.meshgrid(*(np.arange(start, stop) for start, stop in zip(lo, hi, strict=True)), indexing="ij"), axis=-1)
    ab = b - a
    t = np.clip(((grid - a) @ ab) / max(float(ab @ ab), 1e-9), 0.0, 1.0)
    inside = np.sum((grid - (a + t[..., None] * ab)) ** 2, axis=-1) <= radius * radius
    view = labels[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]]
    view[inside & (view == 0)] = value


def cow_phantom(variant: Variant, shift=(0, 0, 0), scale: float = 1.0) -> np.ndarray:
    """A uint8 (z, y, x) TopCoW label volume; ``shift`` moves the whole circle, ``scale`` the radii."""
    labels = np.zeros(SHAPE, dtype=np.uint8)
    c = np.asarray(CENTER, float) + np.asarray(shift, float)

    def p(dz, dy, dx):
        return c + (dz, dy, dx)

    def tube(a, b, radius, value):
        paint_tube(labels, a, b, radius * scale, value)

    sides = ((-1, 4, 5, 11, 2, 8, variant.r_a1, variant.r_p1, variant.r_pcom),   # right: small x
             (+1, 6, 7, 12, 3, 9, variant.l_a1, variant.l_p1, variant.l_pcom))
    # trunks: ICAs and BA
    for s, ica, *_ in sides:
        tube(p(-9, -4, 10 * s), p(1, -4, 10 * s), 1.5, ica)
    basilar_tip = p(-1, 7, 0)
    tube(p(-9, 8, 0), basilar_tip, 1.5, 1)
    for s, _ica, mca, aca, pca, _, a1, p1, _ in sides:
        terminus, a1_end, p1_end = p(1, -4, 10 * s), p(2, -11, 5 * s), p(0, 6, 9 * s)
        tube(terminus, p(2, -3, 21 * s), 1.2, mca)
        a1_start = terminus if a1 else terminus + 0.6 * (a1_end - terminus)
        tube(a1_start, a1_end, 1.1, aca)
        tube(a1_end, p(9, -16, 5 * s), 1.1, aca)
        if p1:
            tube(basilar_tip, p1_end, 1.2, pca)
        tube(p1_end, p(3, 13, 17 * s), 1.2, pca)
    for s, *_, pcom_label, _, _, pcom in sides:
        if pcom:
            tube(p(-2, -4, 10 * s), p(0, 6, 9 * s), 0.9, pcom_label)
    if variant.acom:
        tube(p(2, -11, -5), p(2, -11, 5), 0.9, 10)
        if variant.third_a2:
            tube(p(2, -11, 0), p(9, -15, 0), 0.9, 15)
    return labels


def cow_edges(labels: np.ndarray) -> tuple[list[int], list[int]]:
    """The edge lists of a label volume (what antpos_edges_labelsTr states for a real case)."""
    return edge_lists(label_adjacency(labels))


def bbox_of(mask: np.ndarray) -> dict[str, list[int]]:
    """Box of the mask in SimpleITK (x, y, z) order, as in roi_loc_labelsTr."""
    nz = np.argwhere(mask)
    lo, hi = nz.min(axis=0), nz.max(axis=0)
    size_zyx = hi - lo + 1
    return {"size": [int(v) for v in size_zyx[::-1]], "location": [int(v) for v in lo[::-1]]}


def _write_text(text: str, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _generate(task: Task, public: Path, private: Path, rng: np.random.Generator, column: str,
              suffix: str, write_label: Callable[[np.ndarray, Path], None]) -> None:
    mod = modality(task)
    ids = [f"{mod.prefix}_{i:03d}" for i in range(1, N_CASES + 1)]
    train, test = split_ids(ids)
    schedule = dict(zip(test, TEST_SCHEDULE * (len(test) // len(TEST_SCHEDULE) + 1), strict=False))
    answers: dict[str, str] = {}
    for case_id in ids:
        drawn = random_variant(rng)
        shift = (int(rng.integers(-3, 4)), int(rng.integers(-2, 3)), int(rng.integers(-3, 4)))
        scale = float(rng.uniform(0.9, 1.1))
        labels = cow_phantom(schedule.get(case_id, drawn), shift, scale)
        image = noisy_intensity((labels > 0) * (mod.vessel - mod.background) + mod.background, rng, mod.noise)
        image_path, label_path = case_paths(public, private, case_id, case_id in train, f"{case_id}_0000.nii.gz",
                                            f"{case_id}{suffix}", answers)
        write_image(make_image(image, mod.spacing, ORIGIN), image_path)
        write_label(labels, label_path)
    write_tables(public, private, task.id_column, test, column, lambda i: f"predictions/{i}{suffix}",
                 "label_path", answers)
    write_split(private, train, test)


def segmentation(task: Task, public: Path, private: Path, rng: np.random.Generator) -> None:
    """Task 1 twin: label volumes."""
    spacing = modality(task).spacing
    _generate(task, public, private, rng, "predicted_mask_path", ".nii.gz",
              lambda labels, path: write_image(make_image(labels, spacing, ORIGIN), path))


def boxes(task: Task, public: Path, private: Path, rng: np.random.Generator) -> None:
    """Task 2 twin: the CoW bounding box per case as JSON."""
    _generate(task, public, private, rng, "predicted_bbox_path", ".json",
              lambda labels, path: _write_text(json.dumps(bbox_of(labels > 0)), path))


def edges(task: Task, public: Path, private: Path, rng: np.random.Generator) -> None:
    """Task 3 twin: the 8 CoW edges per case as JSON."""
    _generate(task, public, private, rng, "predicted_edges_path", ".json",
              lambda labels, path: _write_text(edges_json(*cow_edges(labels)), path))


__all__ = ["Variant", "cow_phantom", "cow_edges", "bbox_of", "paint_tube", "segmentation", "boxes", "edges",
           "TEST_SCHEDULE"]
