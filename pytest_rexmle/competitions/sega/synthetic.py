"""SEG.A twin: small CTA volumes with an aorta-like tube tree, gzip NRRD.

Real conventions kept: ids of three centres (``D``ongyang, ``K``iTS, ``R``ider) numbered without
padding so that string order (D1, D10, D2, …) differs from numeric order; per-centre anisotropic
spacing and grid; ``<id>.nrrd`` images and ``<id>.seg.nrrd`` binary labels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...data.split import split_ids, write_split
from ...data.synthetic.common import case_paths, write_tables
from ...data.synthetic.volumes import ellipsoid, make_image, noisy_intensity, tube
from ...medimage.geometry import write_image
from ...task import Task

#: centre → (number of cases, shape (z, y, x), SimpleITK spacing (x, y, z))
CENTRES = {
    "D": (10, (20, 32, 32), (0.8, 0.8, 2.0)),
    "K": (8, (16, 30, 34), (0.75, 0.75, 3.0)),
    "R": (7, (24, 28, 28), (0.9, 0.9, 1.5)),
}


def vessel_tree(shape: tuple[int, int, int], rng: np.random.Generator) -> np.ndarray:
    """Descending aorta along z, two iliac branches at the bottom, renal and coeliac side branches."""
    nz, ny, nx = shape
    yc, xc = ny / 2 + rng.uniform(-2, 2), nx / 2 + rng.uniform(-2, 2)
    bifurcation = nz * rng.uniform(0.65, 0.75)
    tree = tube(shape, (0, yc, xc), (bifurcation, yc, xc), rng.uniform(2.5, 3.5))
    spread = nx * rng.uniform(0.25, 0.32)
    for side in (-1, 1):
        tree |= tube(shape, (bifurcation, yc, xc), (nz - 1, yc + rng.uniform(-2, 2), xc + side * spread),
                     rng.uniform(1.6, 2.1))
        renal_z = nz * rng.uniform(0.3, 0.45)
        tree |= tube(shape, (renal_z, yc, xc), (renal_z + rng.uniform(-1, 1), yc + rng.uniform(-3, 3),
                                                xc + side * nx * 0.42), rng.uniform(1.0, 1.4))
    coeliac_z = nz * rng.uniform(0.15, 0.25)
    tree |= tube(shape, (coeliac_z, yc, xc), (coeliac_z - 1, yc - ny * 0.35, xc), rng.uniform(1.0, 1.3))
    return tree


def generate(task: Task, public: Path, private: Path, rng: np.random.Generator) -> None:
    cases = {f"{centre}{n}": centre for centre, (count, _, _) in CENTRES.items() for n in range(1, count + 1)}
    train, test = split_ids(cases)
    answers: dict[str, str] = {}
    for case_id in sorted(cases):
        _, shape, spacing = CENTRES[cases[case_id]]
        origin = (float(np.round(rng.uniform(-180, -120), 2)), float(np.round(rng.uniform(-180, -120), 2)),
                  float(np.round(rng.uniform(-600, -100), 2)))
        vessels = vessel_tree(shape, rng)
        body = ellipsoid(shape, (shape[0] / 2, shape[1] / 2, shape[2] / 2), (shape[0] * 2, shape[1] * 0.48, shape[2] * 0.5))
        hu = np.where(body, 40.0, -1000.0) + vessels * 310.0
        image = make_image(noisy_intensity(hu, rng, 20.0), spacing, origin)
        label = make_image(vessels.astype(np.uint8), spacing, origin)
        image_path, label_path = case_paths(public, private, case_id, case_id in train, f"{case_id}.nrrd",
                                            f"{case_id}.seg.nrrd", answers)
        write_image(image, image_path)
        write_image(label, label_path)
    write_tables(public, private, task.id_column, test, "predicted_mask_path", lambda i: f"predictions/{i}.seg.nrrd",
                 "label_path", answers)
    write_split(private, train, test)
