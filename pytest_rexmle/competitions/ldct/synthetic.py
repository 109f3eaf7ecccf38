"""LDCT-IQA twin: soft-tissue-window CT-like slices whose score falls with the added noise and streaks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tifffile

from ...data.split import write_split
from ...data.synthetic.common import write_csv, write_tables
from ...task import Task

SIZE = 64
N_TRAIN, N_TEST = 40, 15


def _phantom(rng: np.random.Generator) -> np.ndarray:
    yy, xx = np.mgrid[:SIZE, :SIZE] / SIZE - 0.5
    body = ((xx / 0.45) ** 2 + (yy / 0.38) ** 2 < 1).astype(np.float32) * 0.45
    for _ in range(4):
        cx, cy, r = rng.uniform(-0.25, 0.25), rng.uniform(-0.2, 0.2), rng.uniform(0.03, 0.1)
        body += ((xx - cx) ** 2 + (yy - cy) ** 2 < r * r) * rng.uniform(0.1, 0.4)
    return body


def _degrade(img: np.ndarray, level: float, rng: np.random.Generator) -> np.ndarray:
    angles = np.linspace(0, np.pi, 6, endpoint=False)
    yy, xx = np.mgrid[:SIZE, :SIZE]
    streaks = sum(np.sin((xx * np.cos(a) + yy * np.sin(a)) * 0.9) for a in angles) / len(angles)
    noisy = img + rng.normal(0, 0.15 * level, img.shape) + 0.05 * level * streaks
    return np.clip(noisy, 0, 1).astype(np.float32)


def generate(task: Task, public: Path, private: Path, rng: np.random.Generator) -> None:
    train_ids = [f"{i:04d}" for i in range(N_TRAIN)]
    test_ids = [f"{i:04d}" for i in range(1000, 1000 + N_TEST)]
    scores: dict[str, float] = {}
    for case_id in train_ids + test_ids:
        level = float(rng.uniform(0, 1))
        is_test = case_id in test_ids
        folder = public / ("test" if is_test else "train") / "images"
        folder.mkdir(parents=True, exist_ok=True)
        tifffile.imwrite(folder / f"{case_id}.{'tiff' if is_test else 'tif'}", _degrade(_phantom(rng), level, rng))
        scores[case_id] = round(float(np.clip(4 * (1 - level) + rng.normal(0, 0.2), 0, 4)), 2)
    write_csv(public / "train_labels.csv", ["image_id", "quality_score"],
              ({"image_id": i, "quality_score": scores[i]} for i in train_ids))
    write_tables(public, private, "image_id", test_ids, "quality_score", "0.0", "quality_score",
                 {i: scores[i] for i in test_ids})
    write_split(private, train_ids, test_ids, rule="source")
