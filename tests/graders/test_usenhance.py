"""USenhance: twin layout, self-consistency, degraded and malformed submissions."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from PIL import Image, ImageFilter

from pytest_rexmle.competitions.usenhance.grade import read_png
from pytest_rexmle.data.synthetic import generate
from pytest_rexmle.errors import InvalidSubmission
from pytest_rexmle.graders.base import load_grader
from pytest_rexmle.scoring.ranking import rank
from pytest_rexmle.task import registry

from .editing import assert_refused, copy_of, first_file, rows
from .twins import twin_fixtures

ORGANS = ("breast", "carotid", "kidney", "liver", "thyroid")


def task():
    return registry().get("usenhance")


def grader():
    return load_grader(task())


twin, perfect = twin_fixtures("usenhance")


# == twin ===============================================================================================
def test_twin_layout(twin):
    split = json.loads((twin.private / "split.json").read_text())
    assert split["n"] == 25 and len(split["test"]) == 5
    ids = split["train"] + split["test"]
    assert {i.split("_")[0] for i in ids} == set(ORGANS)
    for case_id in split["train"]:
        low = Image.open(twin.public / "train" / "low_quality" / f"{case_id}.png")
        high = Image.open(twin.public / "train" / "high_quality" / f"{case_id}.png")
        assert low.size == high.size and low.mode == "L"
    for case_id in split["test"]:
        assert (twin.public / "test" / "low_quality" / f"{case_id}.png").is_file()
        assert (twin.private / "test" / "high_quality" / f"{case_id}.png").is_file()
        assert not (twin.public / "test" / "high_quality").exists()
    sample = (twin.public / "sample_submission.csv").read_text().splitlines()
    assert sample[0] == "image_id,enhanced_image_path"
    assert sample[1] == f"{split['test'][0]},enhanced/{split['test'][0]}.png"
    answers = (twin.private / "answers.csv").read_text().splitlines()
    assert answers[0] == "image_id,ground_truth_path"


def test_twin_is_deterministic_and_small(twin, tmp_path):
    again = generate(task(), tmp_path / "again")
    for path in sorted(twin.root.rglob("*.png")):
        rel = path.relative_to(twin.root)
        assert path.read_bytes() == (again.root / rel).read_bytes(), rel
    size = sum(p.stat().st_size for p in twin.root.rglob("*") if p.is_file())
    assert size < 2_000_000


# == self-consistency ===================================================================================
def test_perfect_submission_scores_best(twin, perfect):
    g = grader()
    g.validate(perfect, twin.public)
    scores = g.grade(perfect, twin.private)
    # identical images: lncc and ssim exactly 1, psnr +inf (documented; ranks as the best value)
    assert scores == {"lncc": 1.0, "ssim": 1.0, "psnr": math.inf}
    assert all(type(v) is float for v in scores.values())
    assert rank(task(), scores).percentile == 1.0


def test_degraded_submission_scores_worse(twin, perfect, tmp_path):
    sub = copy_of(perfect, tmp_path / "sub")
    for row in rows(sub):
        path = sub / row["enhanced_image_path"]
        Image.open(path).filter(ImageFilter.GaussianBlur(1.5)).save(path)
    scores = grader().grade(sub, twin.private)
    assert scores["lncc"] < 1.0 and scores["ssim"] < 1.0 and math.isfinite(scores["psnr"])


def test_one_identical_image_makes_psnr_infinite(twin, perfect, tmp_path):
    sub = copy_of(perfect, tmp_path / "sub")
    for row in rows(sub)[1:]:
        path = sub / row["enhanced_image_path"]
        Image.open(path).filter(ImageFilter.GaussianBlur(1.0)).save(path)
    scores = grader().grade(sub, twin.private)
    assert scores["psnr"] == math.inf and scores["ssim"] < 1.0


def test_baseline_validates_and_scores_below_perfect(twin, tmp_path):
    g = grader()
    g.write_baseline(twin.public, tmp_path / "base")
    g.validate(tmp_path / "base", twin.public)
    scores = g.grade(tmp_path / "base", twin.private)
    assert all(math.isfinite(v) for v in scores.values())
    assert scores["lncc"] < 0.95 and scores["ssim"] < 0.8 and scores["psnr"] < 30
    assert rank(task(), scores).percentile < 1.0


def test_colour_and_palette_pngs_are_converted_to_luma(twin, perfect, tmp_path):
    """RGB (gray replicated in R=G=B) and P versions of the truth are the same image after convert('L')."""
    sub = copy_of(perfect, tmp_path / "sub")
    records = rows(sub)
    Image.open(sub / records[0]["enhanced_image_path"]).convert("RGB").save(sub / records[0]["enhanced_image_path"])
    Image.open(sub / records[1]["enhanced_image_path"]).convert("P").save(sub / records[1]["enhanced_image_path"])
    assert grader().grade(sub, twin.private) == {"lncc": 1.0, "ssim": 1.0, "psnr": math.inf}


# == malformed submissions ==============================================================================


def _garbage(sub):
    first_file(sub).write_bytes(b"\x89PNG\r\n\x1a\n this is not really a png")


def _wrong_size(sub):
    path = first_file(sub)
    im = Image.open(path)
    im.resize((im.width + 1, im.height)).save(path)


def _sixteen_bit(sub):
    path = first_file(sub)
    arr = np.asarray(Image.open(path)).astype(np.uint16) * 256
    Image.fromarray(arr).save(path)            # mode I;16 PNG


def _jpeg_content(sub):
    path = first_file(sub)
    Image.open(path).save(path, format="JPEG")  # right name, wrong format


def _float_tiff(sub):
    path = first_file(sub)
    Image.fromarray(np.full((10, 10), np.nan, dtype=np.float32)).save(path, format="TIFF")


MALFORMED = {
    "unreadable file": (_garbage, "cannot read"),
    "wrong size": (_wrong_size, "never resized"),
    "16-bit png": (_sixteen_bit, "mode"),
    "jpeg": (_jpeg_content, "must be a PNG"),
    "float/NaN image": (_float_tiff, "must be a PNG"),
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_malformed_submission_is_invalid(kind, twin, perfect, tmp_path):
    make, reason = MALFORMED[kind]
    assert_refused(grader(), perfect, twin, make, reason, tmp_path)


def test_read_png_rejects_wrong_size_directly(twin, tmp_path):
    path = tmp_path / "x.png"
    Image.fromarray(np.zeros((5, 6), np.uint8)).save(path)
    assert read_png(path, "c", (6, 5)).shape == (5, 6)
    with pytest.raises(InvalidSubmission, match="case 'c'.*6×5"):
        read_png(path, "c", (5, 6))
