"""NeurIPS 2022 CellSeg grader: one instance-label TIFF per test image.

A prediction is a 2-D non-negative integer label image (0 = background, one id per cell) of exactly the
ground truth's height and width, read with tifffile. Integral float arrays are accepted as labels (the
same rule as the 3-D graders' ``label_array``); NaN/inf, fractions, negatives, colour or stacked images
are invalid. Scores are the organisers' F1 at five IoU thresholds, averaged over images, unrounded.
"""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import tifffile

from ...agent_output import open_reader
from ...errors import InvalidSubmission
from ...graders.base import Grader
from ...metrics.instance import THRESHOLDS, image_f1
from ...metrics.parallel import both, parallel_map, worker_count
from ...submission import CaseTable

IMAGE_EXTENSIONS = (".tif", ".tiff", ".png", ".jpg", ".jpeg", ".bmp")
TIFF_EXTENSIONS = (".tif", ".tiff")
#: without a known grid: 16 bytes per pixel of a 4096² image
MAX_FILE_BYTES = 4096 * 4096 * 16


def read_labels(path: Path, case_id: str, shape: tuple[int, int] | None = None) -> np.ndarray:
    """A submitted label TIFF as a non-negative integer (H, W) array; every format problem is an InvalidSubmission."""
    where = f"case {case_id!r}"
    arr = _decode_tiff(path, where, shape)
    _check_label_values(arr, f"{where}: {path.name}")
    # integer images keep their own type (a 5000×5000 uint16 image stays 50 MB instead of 200 MB as int64):
    # the matching only counts ids; floats (integral, checked above) and uint64 (range checked) become int64
    if arr.dtype.kind == "b":
        return arr.view(np.uint8)
    if arr.dtype.kind == "f" or arr.dtype == np.uint64:
        return arr.astype(np.int64)
    return arr


def _decode_tiff(path: Path, where: str, shape: tuple[int, int] | None) -> np.ndarray:
    """The file's one 2-D image, its shape checked from the header before anything is decoded (a hostile
    file must not make us decode a huge image)."""
    limit = MAX_FILE_BYTES if shape is None else shape[0] * shape[1] * 16 + (1 << 20)
    try:
        with open_reader(path, limit, f"{where}: {path.name}") as fh, tifffile.TiffFile(fh) as tif:
            if not tif.series:
                raise InvalidSubmission(f"{where}: cannot read {path.name} as TIFF (no image data)")
            series = tif.series[0]
            dims = tuple(series.shape)
            if len(dims) != 2:
                raise InvalidSubmission(f"{where}: {path.name} must hold one 2-D label image, got shape {dims}")
            if shape is not None and dims != tuple(shape):
                raise InvalidSubmission(f"{where}: {path.name} has height×width {dims[0]}×{dims[1]} but the "
                                        f"ground truth is {shape[0]}×{shape[1]}; predictions are never resized")
            arr = series.asarray(maxworkers=worker_count())  # strips decoded on all cores
    except InvalidSubmission:
        raise
    except Exception as exc:  # tifffile raises many types on hostile bytes
        raise InvalidSubmission(f"{where}: cannot read {path.name} as TIFF ({type(exc).__name__}: {exc})") from None
    if not isinstance(arr, np.ndarray) or arr.size == 0 or arr.shape != dims:
        raise InvalidSubmission(f"{where}: cannot read {path.name} as TIFF (no image data)")
    return arr


def _check_label_values(arr: np.ndarray, what: str) -> None:
    """Labels are integers (floats only when integral and exact), none negative, all within int64."""
    if arr.dtype.kind == "f":
        if not np.isfinite(arr).all():
            raise InvalidSubmission(f"{what} contains NaN or infinite values")
        if not np.array_equal(arr, np.floor(arr)):
            raise InvalidSubmission(f"{what} has non-integer label values")
        if arr.size and float(arr.max()) >= 2.0 ** 53:
            raise InvalidSubmission(f"{what} has label values too large to be exact")
    elif arr.dtype.kind not in "iub":
        raise InvalidSubmission(f"{what} has unsupported pixel type {arr.dtype}; an integer label image is required")
    if arr.size and arr.dtype.kind in "if" and arr.min() < 0:
        raise InvalidSubmission(f"{what} has negative label values (min {arr.min()})")
    if arr.dtype == np.uint64 and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise InvalidSubmission(f"{what} has label values beyond the int64 range")


def public_test_image(public_dir: Path, case_id: str) -> Path:
    """The test image ``<id>.<ext>`` (extension as in the source release)."""
    folder = public_dir / "test" / "images"
    for candidate in sorted(folder.glob(f"{glob.escape(case_id)}.*")):
        if candidate.suffix.lower() in IMAGE_EXTENSIONS and candidate.stem == case_id:
            return candidate
    raise FileNotFoundError(f"no test image for {case_id!r} in {folder}")


def image_hw(path: Path) -> tuple[int, int]:
    """(height, width) of a trusted image; TIFF colour axes may come first or last."""
    if path.suffix.lower() in TIFF_EXTENSIONS:
        with tifffile.TiffFile(path) as tif:
            shape = tif.series[0].shape
        if len(shape) == 2:
            return int(shape[0]), int(shape[1])
        if len(shape) == 3 and shape[0] in (1, 3, 4) and shape[-1] not in (1, 3, 4):
            return int(shape[1]), int(shape[2])
        return int(shape[0]), int(shape[1])
    from PIL import Image  # the test images' size only (PNG/JPEG/BMP); grading reads TIFF alone

    with Image.open(path) as im:
        return im.size[1], im.size[0]


class CellInstances(Grader):
    prediction_format = "tiff"
    prediction_columns = ("predicted_mask_path",)
    answer_columns = ("label_path",)
    prediction_file = "predictions/{}_label.tiff"

    def score(self, submission: CaseTable, answers: CaseTable) -> dict[str, float]:
        def case_f1(case_id: str) -> dict[float, float]:
            truth_path = answers.root / answers.value(case_id, "label_path")
            with tifffile.TiffFile(truth_path) as tif:
                shape = tuple(tif.series[0].shape)
            if len(shape) != 2:
                raise RuntimeError(f"ground truth of {case_id!r} is not a 2-D label image: {shape}")
            # the two decodes side by side (the prediction checked against the truth's header first)
            truth, pred = both(lambda: tifffile.imread(truth_path, maxworkers=worker_count()),
                               lambda: read_labels(submission.file(case_id, "predicted_mask_path"), case_id, shape))
            if truth.dtype.kind not in "iu" or truth.dtype == np.uint64:
                truth = truth.astype(np.int64)   # the harness's own files are uint16/uint32: kept as they are
            return image_f1(truth, pred)

        # images on all cores (decoding and NumPy release the GIL); summed in id order, as before
        per_image = parallel_map(case_f1, answers.ids)
        return {f"f1_{t}": sum(f1s[t] for f1s in per_image) / len(per_image) for t in THRESHOLDS}

    def check_case(self, submission: CaseTable, case_id: str, public_dir: Path) -> None:
        read_labels(submission.file(case_id, "predicted_mask_path"), case_id,
                    image_hw(public_test_image(public_dir, case_id)))

    def write_baseline(self, public_dir: Path, out_dir: Path) -> None:
        """An empty label image (no cell) on each test image's grid."""
        self.write_files(out_dir, self.public_test_ids(public_dir), lambda i, path: tifffile.imwrite(
            path, np.zeros(image_hw(public_test_image(public_dir, i)), dtype=np.uint16)))


