"""PANTHER twins: small MHA volumes of an abdomen with a pancreas and a tumour.

Real conventions kept: MHA files, anisotropic spacing with different x and y spacing (so a swapped
spacing would change the metrics), per-case origins, task-1 ids ``<pid>_0001`` with an unannotated
``train_unlabeled/images/`` folder, task-2 ids ``<pid>`` (numeric strings). Labels are coded as the
release codes them (0 background, 1 tumour, 2 pancreas): some training labels outline the pancreas too,
and the private test labels keep the tumour alone (label 1), which is all that is scored.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...data.split import split_ids, write_split
from ...data.synthetic.common import case_paths, write_tables
from ...data.synthetic.volumes import ellipsoid, make_image, noisy_intensity
from ...medimage.geometry import write_image
from ...task import Task

N_CASES = 25
N_UNLABELED = 3


@dataclass(frozen=True)
class Grid:
    shape: tuple[int, int, int]          # (z, y, x)
    spacing: tuple[float, float, float]  # SimpleITK (x, y, z), mm


T1_GRID = Grid((12, 36, 44), (0.9, 1.1, 3.0))      # diagnostic arterial-phase T1: thick slices
T2_GRID = Grid((14, 40, 40), (1.2, 1.4, 2.2))      # MR-Linac T2
UNLABELED_GRID = Grid((10, 32, 32), (1.3, 1.3, 4.0))


def _anatomy(grid: Grid, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(pancreas, tumour) masks; the tumour always lies inside the pancreas and is never empty."""
    nz, ny, nx = grid.shape
    centre = (nz / 2 + rng.uniform(-1, 1), ny / 2 + rng.uniform(-3, 3), nx / 2 + rng.uniform(-3, 3))
    pancreas = ellipsoid(grid.shape, centre, (nz * 0.3, ny * 0.18, nx * 0.38))
    offset = (rng.uniform(-1, 1), rng.uniform(-2, 2), rng.uniform(-6, 6))
    tumour_centre = tuple(c + o for c, o in zip(centre, offset, strict=True))
    tumour = ellipsoid(grid.shape, tumour_centre, (rng.uniform(1.0, 2.2), rng.uniform(2.0, 4.0), rng.uniform(2.0, 4.5)))
    tumour &= pancreas
    if not tumour.any():
        tumour[tuple(int(round(c)) for c in centre)] = True
    return pancreas, tumour


def _origin(rng: np.random.Generator) -> tuple[float, float, float]:
    return tuple(float(np.round(rng.uniform(-200, 200), 1)) for _ in range(3))  # type: ignore[return-value]


def _generate(task: Task, public: Path, private: Path, rng: np.random.Generator, ids: list[str],
              grid: Grid) -> None:
    train, test = split_ids(ids)
    answers: dict[str, str] = {}
    for index, case_id in enumerate(sorted(ids)):
        pancreas, tumour = _anatomy(grid, rng)
        levels = 180.0 + pancreas * 240.0 - tumour * 150.0
        origin = _origin(rng)
        image = make_image(noisy_intensity(levels, rng, 25.0), grid.spacing, origin)
        label = tumour.astype(np.uint8)
        if index % 3 == 0:                      # some annotations also outline the pancreas (label 2)
            label[pancreas & ~tumour] = 2
        if case_id not in train:
            label = (label == 1).astype(np.uint8)   # the answers hold the tumour only, as prepare writes them
        image_path, label_path = case_paths(public, private, case_id, case_id in train, f"{case_id}.mha",
                                            f"{case_id}.mha", answers)
        write_image(image, image_path)
        write_image(make_image(label, grid.spacing, origin), label_path)
    write_tables(public, private, task.id_column, test, "predicted_mask_path", lambda i: f"predictions/{i}.mha",
                 "label_path", answers)
    write_split(private, train, test)


def generate_task1(task: Task, public: Path, private: Path, rng: np.random.Generator) -> None:
    """Task 1: ids ``<pid>_0001`` plus unannotated volumes of other sequences on their own grid."""
    ids = [f"{10000 + i}_0001" for i in range(N_CASES)]
    _generate(task, public, private, rng, ids, T1_GRID)
    for i in range(N_UNLABELED):
        pancreas, _ = _anatomy(UNLABELED_GRID, rng)
        volume = noisy_intensity(150.0 + pancreas * 180.0, rng, 30.0)
        write_image(make_image(volume, UNLABELED_GRID.spacing, _origin(rng)),
                    public / "train_unlabeled" / "images" / f"{10500 + i}_0002_0000.mha")


def generate_task2(task: Task, public: Path, private: Path, rng: np.random.Generator) -> None:
    """Task 2: numeric-string ids ``<pid>``, no unannotated data."""
    ids = [str(10300 + i) for i in range(N_CASES)]
    _generate(task, public, private, rng, ids, T2_GRID)
