"""USenhance twin: low/high-quality B-mode-like PNG pairs over the five organs.

The high-quality image is a smooth echo pattern (fan-shaped sector, a few anechoic or bright
structures, fine speckle); the low-quality one is the same scene blurred, with lower contrast and
coarser multiplicative speckle, as a hand-held device would give. Image size differs per organ, as in
the real release, so a grader that assumes one size fails here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image
from scipy.ndimage import gaussian_filter

from ...data.split import split_ids, write_split
from ...data.synthetic.common import write_tables
from ...task import Task

#: organ -> (width, height) in pixels
ORGANS: dict[str, tuple[int, int]] = {
    "breast": (56, 44), "carotid": (64, 40), "kidney": (48, 48), "liver": (60, 44), "thyroid": (52, 40),
}
PER_ORGAN = 5  # 25 pairs -> 20 train / 5 test


def _scene(size: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    w, h = size
    yy, xx = np.mgrid[:h, :w].astype(np.float64)
    sector = (np.abs(np.arctan2(xx - w / 2, yy + 4)) < 0.75).astype(np.float64)
    tissue = 0.4 + 3.0 * (gaussian_filter(rng.random((h, w)), 2) - 0.5)
    for _ in range(3):
        cy, cx, r = rng.uniform(0.3, 0.8) * h, rng.uniform(0.25, 0.75) * w, rng.uniform(3, 8)
        level = rng.choice([0.05, 0.8])  # cyst (anechoic) or bright interface
        tissue = np.where((yy - cy) ** 2 + (xx - cx) ** 2 < r * r, level, tissue)
    return np.clip(tissue, 0, 1) * sector


def _to_png(img: np.ndarray, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.clip(np.round(img * 255), 0, 255).astype(np.uint8)).save(path)


def generate(task: Task, public: Path, private: Path, rng: np.random.Generator) -> None:
    pairs = {}
    for organ, size in ORGANS.items():
        stems = sorted(rng.choice(np.arange(1, 200), PER_ORGAN, replace=False).tolist())
        for stem in stems:
            scene = _scene(size, rng)
            high = scene * rng.gamma(20.0, 1 / 20.0, scene.shape)
            low = gaussian_filter(scene, 1.2) * 0.7 + 0.05
            low = low * gaussian_filter(rng.gamma(4.0, 1 / 4.0, scene.shape), 0.7)
            pairs[f"{organ}_{stem}"] = (low, high)
    train, test = split_ids(pairs)
    for case_id, (low, high) in pairs.items():   # the high-quality image is the label: private for a test case
        where, label_root = ("train", public) if case_id in train else ("test", private)
        _to_png(low, public / where / "low_quality" / f"{case_id}.png")
        _to_png(high, label_root / where / "high_quality" / f"{case_id}.png")
    answers = {i: f"test/high_quality/{i}.png" for i in test}
    write_tables(public, private, task.id_column, test, "enhanced_image_path", lambda i: f"enhanced/{i}.png",
                 "ground_truth_path", answers)
    write_split(private, train, test)
