"""ISLES'22 twin: DWI/ADC on one grid with lesion blobs, FLAIR on its own grid."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...data.split import split_ids, write_split
from ...data.synthetic.common import write_tables
from ...data.synthetic.volumes import ellipsoid, make_image, noisy_intensity
from ...medimage.geometry import write_image
from ...task import Task

DWI_SHAPE = (16, 40, 40)            # (z, y, x)
DWI_SPACING = (2.0, 2.0, 3.0)       # (x, y, z) mm
FLAIR_SHAPE = (20, 48, 48)
FLAIR_SPACING = (1.6, 1.6, 2.4)
N_CASES = 25


def _lesions(rng: np.random.Generator) -> np.ndarray:
    mask = np.zeros(DWI_SHAPE, dtype=bool)
    for _ in range(int(rng.choice([1, 1, 2, 3]))):
        center = (rng.integers(3, 13), rng.integers(8, 32), rng.integers(8, 32))
        mask |= ellipsoid(DWI_SHAPE, center, (rng.uniform(1, 2.5), rng.uniform(1.5, 4), rng.uniform(1.5, 4)))
    return mask


def generate(task: Task, public: Path, private: Path, rng: np.random.Generator) -> None:
    ids = [f"sub-strokecase{i:04d}" for i in range(1, N_CASES + 1)]
    train, test = split_ids(ids)
    brain = ellipsoid(DWI_SHAPE, (8, 20, 20), (7.5, 17, 15)).astype(np.float64)
    for case_id in ids:
        lesion = _lesions(rng)
        dwi = make_image(noisy_intensity(brain * 400 + lesion * 500, rng, 20.0), DWI_SPACING)
        adc = make_image(noisy_intensity(brain * 800 - lesion * 400, rng, 30.0), DWI_SPACING)
        flair = make_image(noisy_intensity(np.full(FLAIR_SHAPE, 200.0), rng, 25.0), FLAIR_SPACING, origin=(-3.0, -3.0, -2.0))
        msk = make_image(lesion.astype(np.uint8), DWI_SPACING)
        where, label_root = ("train", public) if case_id in train else ("test", private)
        for kind, image in (("dwi", dwi), ("adc", adc), ("flair", flair)):
            write_image(image, public / where / f"{case_id}_{kind}.nii.gz")
        write_image(msk, label_root / where / f"{case_id}_msk.nii.gz")   # the label: private for a test case
    answers = {i: f"test/{i}_msk.nii.gz" for i in test}
    write_tables(public, private, task.id_column, test, "predicted_mask_path", lambda i: f"predictions/{i}.nii.gz",
                 "mask_path", answers)
    write_split(private, train, test)
