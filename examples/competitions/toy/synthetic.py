"""The toy's synthetic twin: 16×16 grey "fundus" discs, the referable ones with a bright lesion."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from ...data.split import write_split
from ...data.synthetic.common import write_csv, write_tables
from ...task import Task

SIZE = 16
N_TRAIN, N_TEST = 24, 8


def fundus(referable: bool, rng: np.random.Generator) -> np.ndarray:
    """A disc of background retina with noise; a referable eye has a 3×3 bright lesion somewhere on it."""
    yy, xx = np.mgrid[:SIZE, :SIZE] - (SIZE - 1) / 2
    image = np.where(xx**2 + yy**2 < (SIZE / 2) ** 2, 90.0, 0.0) + rng.normal(0, 6, (SIZE, SIZE))
    if referable:
        y, x = rng.integers(5, SIZE - 8, size=2)
        image[y:y + 3, x:x + 3] = 230
    return np.clip(image, 0, 255).astype(np.uint8)


def draw_labels(ids: list[str], rng: np.random.Generator) -> dict[str, int]:
    """About 40 % referable; the first two cases are one of each, so both classes are in every split (balanced
    accuracy needs both)."""
    return {case_id: (1, 0)[k] if k < 2 else int(rng.random() < 0.4) for k, case_id in enumerate(ids)}


def generate(task: Task, public: Path, private: Path, rng: np.random.Generator) -> None:
    train_ids = [f"eye{i:03d}" for i in range(N_TRAIN)]
    test_ids = [f"eye{i:03d}" for i in range(100, 100 + N_TEST)]
    labels = {**draw_labels(train_ids, rng), **draw_labels(test_ids, rng)}
    for case_id, label in labels.items():
        folder = public / ("test" if case_id in test_ids else "train") / "images"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(fundus(bool(label), rng)).save(folder / f"{case_id}.png")
    write_csv(public / "train_labels.csv", [task.id_column, "label"],
              ({task.id_column: i, "label": labels[i]} for i in train_ids))
    write_tables(public, private, task.id_column, test_ids, "label", "0", "label", {i: labels[i] for i in test_ids})
    write_split(private, train_ids, test_ids, rule="source")
