"""One case of each pixel grader at its real release's size, for ``bench_perf.py``'s grade / decode-floor ratios.

Sizes are those of typical cases of the public releases (the shared facts files record none): TopCoW CTA
512×512×256 at 0.4×0.4×0.6 mm; TopBrain MRA 528×528×256 at 0.35×0.35×0.6 mm; ISLES'22 DWI 112×112×73 at
2 mm (most of the release; the larger Philips grids are 256×256×~60); PANTHER task-1 arterial-phase T1
512×512×96 at 0.74×0.74×3 mm (thick slices); SEG.A CTA 512×512×500 at 0.8×0.8×1.0 mm; CellSeg one
5000×5000 whole-slide-size image with about 10,000 cells (the organisers' tiled branch, ≥ 25 Mpx).
Each builder writes ``answers/`` (answers.csv and the ground truth) and ``sub/`` (submission.csv and a
degraded prediction) under a folder and returns the two file paths the decode floor reads.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def _write_volume(array: np.ndarray, spacing, path: Path) -> None:
    import SimpleITK as sitk

    img = sitk.GetImageFromArray(array)
    img.SetSpacing(tuple(float(s) for s in spacing))
    path.parent.mkdir(parents=True, exist_ok=True)
    sitk.WriteImage(img, str(path), useCompression=True)


def _tables(folder: Path, id_column: str, case_id: str, answer_column: str, answer: str, prediction: str) -> None:
    (folder / "answers" / "answers.csv").write_text(f"{id_column},{answer_column}\n{case_id},{answer}\n")
    (folder / "sub" / "submission.csv").write_text(f"{id_column},predicted_mask_path\n{case_id},{prediction}\n")


def _volume_case(folder: Path, truth: np.ndarray, pred: np.ndarray, spacing, id_column: str, case_id: str,
                 answer_column: str, suffix: str, prediction_suffix: str | None = None) -> tuple[Path, Path]:
    a = folder / "answers" / f"{case_id}{suffix}"
    b = folder / "sub" / "predictions" / f"{case_id}{prediction_suffix or suffix}"
    _write_volume(truth, spacing, a)
    _write_volume(pred, spacing, b)
    _tables(folder, id_column, case_id, answer_column, a.name, f"predictions/{b.name}")
    return a, b


def _blob(shape, centre, radii) -> np.ndarray:
    zz, yy, xx = np.ogrid[:shape[0], :shape[1], :shape[2]]
    return ((zz - centre[0]) / radii[0]) ** 2 + ((yy - centre[1]) / radii[1]) ** 2 + ((xx - centre[2]) / radii[2]) ** 2 <= 1


def topcow(folder: Path) -> tuple[Path, Path]:
    sys.path.insert(0, str(HERE))
    from bench_grading import FULL_SHAPE, SPACING, build_case

    truth, pred = build_case(FULL_SHAPE)
    return _volume_case(folder, truth, pred, SPACING, "image_id", "topcow_ct_001", "label_path", ".nii.gz")


def topbrain(folder: Path) -> tuple[Path, Path]:
    """The TopBrain MRA phantom (all 42 labels, neighbours as its table allows) upsampled ×8 (z), ×11 (y, x),
    then thinned to vessel calibres (radius about 1.5–3 mm instead of the upsampled 4–5 mm): the Lee
    skeletons of clDice cost in proportion to a vessel's thickness, so a fat phantom would overstate them."""
    from scipy import ndimage

    from pytest_rexmle.competitions.topbrain.grade import TRACKS, load_valid_neighbors
    from pytest_rexmle.competitions.topbrain.synthetic import brain_phantom
    from pytest_rexmle.task import get_task

    task = get_task("topbrain-mra-seg")
    small = brain_phantom(load_valid_neighbors(task.folder / TRACKS["mra"].table), np.random.default_rng(7))
    truth = small.repeat(8, 0).repeat(11, 1).repeat(11, 2)
    depth = ndimage.distance_transform_edt(truth > 0, sampling=(0.6, 0.35, 0.35))
    truth[depth < 2.4] = 0
    pred = truth.copy()
    for label, shift, axis in ((5, 3, 2), (17, 2, 1), (23, -2, 0)):
        pred[pred == label] = 0
        pred[np.roll(truth == label, shift, axis=axis) & (pred == 0)] = label
    pred[pred == 41] = 0                                                     # a side-road label missed
    return _volume_case(folder, truth, pred, (0.35, 0.35, 0.6), "image_id", "topcow_mr_001", "label_path", ".nii.gz")


def isles22(folder: Path) -> tuple[Path, Path]:
    shape = (73, 112, 112)
    truth = (_blob(shape, (30, 50, 60), (6, 9, 7)) | _blob(shape, (45, 70, 40), (2, 3, 3))
             | _blob(shape, (20, 40, 30), (1.2, 1.5, 1.5))).astype(np.uint8)
    pred = (_blob(shape, (31, 51, 60), (6, 8, 8)) | _blob(shape, (55, 30, 80), (2, 2, 2))).astype(np.uint8)
    return _volume_case(folder, truth, pred, (2.0, 2.0, 2.0), "case_id", "sub-strokecase0001", "mask_path", ".nii.gz")


def panther(folder: Path) -> tuple[Path, Path]:
    shape = (96, 512, 512)
    truth = _blob(shape, (48, 260, 250), (5, 22, 25)).astype(np.uint8)
    pred = _blob(shape, (49, 262, 246), (5, 20, 27)).astype(np.uint8)
    return _volume_case(folder, truth, pred, (0.74, 0.74, 3.0), "image_id", "10000_0001", "label_path", ".mha")


def sega(folder: Path) -> tuple[Path, Path]:
    """An aorta: a vertical tube with an arch and two iliac branches, prediction one voxel thicker."""
    shape = (500, 512, 512)
    zz, yy, xx = np.ogrid[:shape[0], :shape[1], :shape[2]]
    truth = ((yy - 260) ** 2 + (xx - 250) ** 2 <= 14 ** 2) & (zz > 80) & (zz < 430)
    truth |= _blob(shape, (430, 230, 250), (18, 45, 16))
    for side in (-1, 1):
        truth |= ((yy - 260) ** 2 + (xx - 250 - side * (80 - zz) * 0.5) ** 2 <= 8 ** 2) & (zz >= 10) & (zz <= 80)
    from scipy import ndimage

    pred = ndimage.binary_dilation(truth, iterations=1)
    return _volume_case(folder, truth.astype(np.uint8), pred.astype(np.uint8), (0.8, 0.8, 1.0), "image_id", "D1",
                        "label_path", ".nrrd", ".seg.nrrd")


def cellseg(folder: Path) -> tuple[Path, Path]:
    """5000×5000, cells on a jittered 50-px lattice (about 10,000, radii 8–18 px); prediction ids shuffled,
    every cell shifted by up to 3 px, 5 % missed."""
    import tifffile
    from skimage.draw import disk

    rng = np.random.default_rng(11)
    h = w = 5000
    truth = np.zeros((h, w), np.uint16)
    pred = np.zeros((h, w), np.uint32)
    ids = rng.permutation(200_000)[:10_000] + 1
    n = 0
    for cy in range(25, h, 50):
        for cx in range(25, w, 50):
            r = rng.uniform(8, 18)
            y, x = cy + rng.uniform(-5, 5), cx + rng.uniform(-5, 5)
            n += 1
            truth[disk((y, x), r, shape=(h, w))] = n
            if rng.random() > 0.05:
                dy, dx = rng.integers(-3, 4, 2)
                pred[disk((y + dy, x + dx), r * rng.uniform(0.85, 1.1), shape=(h, w))] = ids[n % ids.size]
    a, b = folder / "answers" / "labeled_cell_00001_label.tiff", folder / "sub" / "predictions" / "labeled_cell_00001_label.tiff"
    a.parent.mkdir(parents=True, exist_ok=True)
    b.parent.mkdir(parents=True, exist_ok=True)
    tifffile.imwrite(a, truth, compression="zlib")
    tifffile.imwrite(b, pred, compression="zlib")
    _tables(folder, "image_id", "labeled_cell_00001", "label_path", a.name, f"predictions/{b.name}")
    return a, b


#: task id → (builder, what the decode floor reads the two files with)
CASES: dict[str, tuple[Callable[[Path], tuple[Path, Path]], str]] = {
    "topcow-cta-seg": (topcow, "sitk"), "topbrain-mra-seg": (topbrain, "sitk"), "isles22": (isles22, "sitk"),
    "panther-t1": (panther, "sitk"), "seg-a": (sega, "sitk"), "cellseg": (cellseg, "tifffile"),
}


def floor_code(reader: str, a: Path, b: Path) -> str:
    """A fresh Python that only decodes the two files (the least any grader must do)."""
    if reader == "tifffile":
        return f"import tifffile as t; t.imread({str(a)!r}); t.imread({str(b)!r})"
    return f"import SimpleITK as s; s.ReadImage({str(a)!r}); s.ReadImage({str(b)!r})"
