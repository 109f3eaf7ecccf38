"""USenhance grader: one enhanced 8-bit PNG per low-quality test image.

Both images go through Pillow's ``convert("L")`` (ITU-R 601-2 luma) and float64 before lncc, ssim and
psnr. A prediction of another size is rejected, never resized (the reference resized silently).
A perfect submission scores psnr = +inf (identical images), which the ranking handles as the best value.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from statistics import mean
from typing import TYPE_CHECKING

from PIL import Image

from ...agent_output import open_reader
from ...errors import InvalidSubmission
from ...graders.base import Grader
from ...metrics.image_similarity import similarity_scores
from ...submission import CaseTable

if TYPE_CHECKING:
    import numpy as np  # start-up: numpy only where this runs

PNG_MODES = ("L", "LA", "P", "RGB", "RGBA")
KEYS = ("lncc", "ssim", "psnr")
#: without a known size: 8 bytes per pixel (RGBA, 16-bit) of a 4096² image
MAX_FILE_BYTES = 4096 * 4096 * 8


def read_png(path: Path, case_id: str, size: tuple[int, int] | None = None) -> np.ndarray:
    """An 8-bit PNG as float64 grayscale; ``size`` = (width, height) the image must have."""
    import numpy as np  # start-up: numpy only where this runs

    where = f"case {case_id!r}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            limit = MAX_FILE_BYTES if size is None else size[0] * size[1] * 8 + (1 << 20)
            with open_reader(path, limit, f"{where}: {path.name}") as fh, Image.open(fh) as im:
                fmt, mode, im_size = im.format, im.mode, im.size
                if fmt != "PNG":
                    raise InvalidSubmission(f"{where}: {path.name} must be a PNG file, got format {fmt}")
                if mode not in PNG_MODES:
                    raise InvalidSubmission(f"{where}: {path.name} has Pillow mode {mode!r}; an 8-bit PNG in one of "
                                            f"the modes {', '.join(PNG_MODES)} is required")
                if size is not None and im_size != size:
                    raise InvalidSubmission(f"{where}: {path.name} is {im_size[0]}×{im_size[1]} (width×height) but "
                                            f"the ground truth is {size[0]}×{size[1]}; predictions are never resized")
                gray = im.convert("L")
                gray.load()
    except InvalidSubmission:
        raise
    except Exception as exc:  # any decoder failure on agent bytes is a format problem
        raise InvalidSubmission(f"{where}: cannot read {path.name} as PNG ({type(exc).__name__}: {exc})") from None
    return np.asarray(gray, dtype=np.float64)


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from the header of a trusted image."""
    with Image.open(path) as im:
        return im.size


class ImageEnhancement(Grader):
    prediction_format = "png"
    prediction_columns = ("enhanced_image_path",)
    answer_columns = ("ground_truth_path",)
    prediction_file = "enhanced/{}.png"
    test_input = "test/low_quality/{}.png"

    def score(self, submission: CaseTable, answers: CaseTable) -> dict[str, float]:
        import numpy as np  # start-up: numpy only where this runs

        per_case = []
        for case_id, predicted, reference in self.case_files(submission, answers):
            with Image.open(reference) as im:
                truth = np.asarray(im.convert("L"), dtype=np.float64)
            pred = read_png(predicted, case_id, (truth.shape[1], truth.shape[0]))
            per_case.append(similarity_scores(pred, truth))
        return {k: float(mean(c[k] for c in per_case)) for k in KEYS}

    def check_case(self, submission: CaseTable, case_id: str, public_dir: Path) -> None:
        size = png_size(self.test_input_path(public_dir, case_id))
        read_png(submission.file(case_id, "enhanced_image_path"), case_id, size)

    def write_baseline(self, public_dir: Path, out_dir: Path) -> None:
        """The low-quality input itself as the 'enhanced' image: valid, and the no-op floor."""
        self.write_files(out_dir, self.public_test_ids(public_dir),
                         lambda i, path: shutil.copyfile(self.test_input_path(public_dir, i), path))
