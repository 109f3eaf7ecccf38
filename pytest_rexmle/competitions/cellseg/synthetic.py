"""NeurIPS CellSeg twin: microscopy-like images with instance-label TIFFs.

Cases come from both source sets with *reused stems* (``labeled_cell_00001`` and ``tuning_cell_00001``),
images use the release's mix of extensions (png, tif, tiff, bmp; colour brightfield and grayscale
fluorescence) and sizes, and label ids are not always sequential, so graders must relabel as the
organisers do. Some cells touch the image border (they are dropped by the metric); every image keeps
interior cells so an empty prediction never scores like a perfect one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tifffile
from PIL import Image
from skimage.draw import ellipse

from ...data.split import split_ids, write_split
from ...data.synthetic.common import case_paths, write_tables
from ...task import Task

N_LABELED, N_TUNING = 18, 7  # 25 cases -> 20 train / 5 test
SHAPES = ((48, 64), (64, 64), (56, 72), (60, 48))
EXTENSIONS = (".png", ".tif", ".tiff", ".bmp")


def _cells(shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """Non-overlapping, non-touching ellipses; ids shuffled with gaps in about half of the images.

    Placement tests enclosing circles (centre distance > r1 + r2 + 2), which keeps a background gap
    between cells without any image-sized work per attempt.
    """
    h, w = shape
    labels = np.zeros(shape, dtype=np.uint32)
    placed: list[tuple[float, float, float]] = []
    for _ in range(60):
        if len(placed) >= 12:
            break
        cy, cx = rng.uniform(0, h), rng.uniform(0, w)
        ry, rx = rng.uniform(3, 6), rng.uniform(3, 6)
        r = max(ry, rx)
        if any((cy - y) ** 2 + (cx - x) ** 2 <= (r + q + 2) ** 2 for y, x, q in placed):
            continue
        rr, cc = ellipse(cy, cx, ry, rx, shape=shape, rotation=rng.uniform(0, np.pi))
        if rr.size < 12:
            continue
        placed.append((cy, cx, r))
        labels[rr, cc] = len(placed)
    n_cells = len(placed)
    if rng.random() < 0.5:
        ids = np.concatenate([[0], rng.choice(np.arange(1, 4 * n_cells + 1), n_cells, replace=False)])
        labels = ids[labels].astype(np.uint32)
    return labels


def _interior_cells(labels: np.ndarray) -> int:
    frame = np.ones(labels.shape, dtype=bool)
    frame[2:-2, 2:-2] = False
    return len(set(np.unique(labels).tolist()) - set(np.unique(labels[frame]).tolist()) - {0})


def _render(labels: np.ndarray, colour: bool, rng: np.random.Generator) -> np.ndarray:
    fg = labels > 0
    if colour:  # brightfield: dark stained cells on a light background
        base = np.where(fg, 90.0, 210.0) + rng.normal(0, 12, labels.shape)
        tint = np.array([1.0, 0.85, 1.05])
        return np.clip(base[..., None] * tint, 0, 255).astype(np.uint8)
    return np.clip(np.where(fg, 170.0, 25.0) + rng.normal(0, 15, labels.shape), 0, 255).astype(np.uint8)


def _save_image(image: np.ndarray, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix in (".tif", ".tiff"):
        tifffile.imwrite(path, image)
    else:
        Image.fromarray(image).save(path)


def _save_labels(labels: np.ndarray, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    dtype = np.uint16 if labels.max() < 2 ** 16 else np.uint32
    tifffile.imwrite(path, labels.astype(dtype))


def generate(task: Task, public: Path, private: Path, rng: np.random.Generator) -> None:
    ids = [f"labeled_cell_{i:05d}" for i in range(1, N_LABELED + 1)]
    ids += [f"tuning_cell_{i:05d}" for i in range(1, N_TUNING + 1)]
    train, test = split_ids(ids)
    answers: dict[str, str] = {}
    for k, case_id in enumerate(ids):
        shape = SHAPES[k % len(SHAPES)]
        labels = _cells(shape, rng)
        while _interior_cells(labels) < 3:
            labels = _cells(shape, rng)
        ext = EXTENSIONS[int(rng.integers(len(EXTENSIONS)))]
        image = _render(labels, colour=ext in (".png", ".bmp"), rng=rng)
        image_path, label_path = case_paths(public, private, case_id, case_id in train, f"{case_id}{ext}",
                                            f"{case_id}_label.tiff", answers)
        _save_image(image, image_path)
        _save_labels(labels, label_path)
    write_tables(public, private, task.id_column, test, "predicted_mask_path", lambda i: f"predictions/{i}_label.tiff",
                 "label_path", answers)
    write_split(private, train, test)
