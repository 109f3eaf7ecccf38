"""NeurIPS CellSeg: twin layout, self-consistency, degraded and malformed submissions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tifffile
from scipy import ndimage

from pytest_rexmle.competitions.cellseg.grade import image_hw, public_test_image, read_labels
from pytest_rexmle.graders.base import load_grader
from pytest_rexmle.scoring.ranking import rank
from pytest_rexmle.task import registry

from .editing import assert_refused, copy_of, first_file, rows
from .twins import twin_fixtures

KEYS = ("f1_0.5", "f1_0.6", "f1_0.7", "f1_0.8", "f1_0.9")


def task():
    return registry().get("cellseg")


def grader():
    return load_grader(task())


twin, perfect = twin_fixtures("cellseg")


def rewrite_all(sub: Path, fn) -> None:
    for row in rows(sub):
        path = sub / row["predicted_mask_path"]
        tifffile.imwrite(path, fn(tifffile.imread(path)))


# == twin ===============================================================================================
def test_twin_layout(twin):
    split = json.loads((twin.private / "split.json").read_text())
    assert split["n"] == 25 and len(split["test"]) == 5
    ids = split["train"] + split["test"]
    assert any(i.startswith("labeled_") for i in ids) and any(i.startswith("tuning_") for i in ids)
    assert "labeled_cell_00001" in ids and "tuning_cell_00001" in ids      # reused stems, prefixed ids
    exts = {p.suffix for p in (twin.public / "train" / "images").iterdir()}
    assert len(exts) >= 3 and exts <= {".png", ".tif", ".tiff", ".bmp"}
    for case_id in split["train"]:
        labels = tifffile.imread(twin.public / "train" / "labels" / f"{case_id}_label.tiff")
        assert labels.ndim == 2 and labels.dtype.kind == "u"
        image = next((twin.public / "train" / "images").glob(f"{case_id}.*"))
        assert image_hw(image) == labels.shape
    for case_id in split["test"]:
        truth = tifffile.imread(twin.private / "test" / "labels" / f"{case_id}_label.tiff")
        assert image_hw(public_test_image(twin.public, case_id)) == truth.shape
        assert not list((twin.public / "test").glob("*label*"))
    sample = (twin.public / "sample_submission.csv").read_text().splitlines()
    assert sample[0] == "image_id,predicted_mask_path"
    assert sample[1] == f"{split['test'][0]},predictions/{split['test'][0]}_label.tiff"
    assert (twin.private / "answers.csv").read_text().splitlines()[0] == "image_id,label_path"


def test_twin_is_small(twin):
    assert sum(p.stat().st_size for p in twin.root.rglob("*") if p.is_file()) < 2_000_000


# == self-consistency ===================================================================================
def test_perfect_submission_scores_best(twin, perfect):
    g = grader()
    g.validate(perfect, twin.public)
    scores = g.grade(perfect, twin.private)
    assert scores == {k: 1.0 for k in KEYS}
    assert all(type(v) is float for v in scores.values())
    assert rank(task(), scores).percentile == 1.0


def test_relabelled_prediction_is_still_perfect(twin, perfect, tmp_path):
    """Instance ids carry no meaning: a permutation with gaps and another integer type scores the same."""
    sub = copy_of(perfect, tmp_path / "sub")

    def shuffle(labels):
        values = np.unique(labels)
        lut = np.zeros(values.max() + 1, dtype=np.int32)
        lut[values[1:]] = 1000 + 7 * np.arange(len(values) - 1)[::-1]
        return lut[labels]

    rewrite_all(sub, shuffle)
    assert grader().grade(sub, twin.private) == {k: 1.0 for k in KEYS}


def test_eroded_cells_lose_the_strict_thresholds(twin, perfect, tmp_path):
    sub = copy_of(perfect, tmp_path / "sub")
    rewrite_all(sub, lambda lab: np.where(ndimage.binary_erosion(lab > 0), lab, 0).astype(lab.dtype))
    scores = grader().grade(sub, twin.private)
    # a 1-pixel erosion of 3–6 px radius cells keeps IoU >= 0.5 for most cells but never reaches 0.9
    assert 0.8 < scores["f1_0.5"] <= 1.0
    assert scores["f1_0.9"] == 0.0
    assert all(scores[a] >= scores[b] for a, b in zip(KEYS, KEYS[1:], strict=False))


def test_dropping_cells_lowers_f1(twin, perfect, tmp_path):
    sub = copy_of(perfect, tmp_path / "sub")

    def drop_half(labels):
        out = labels.copy()
        for v in np.unique(labels)[1::2]:
            out[labels == v] = 0
        return out

    rewrite_all(sub, drop_half)
    scores = grader().grade(sub, twin.private)
    assert 0.0 < scores["f1_0.5"] < 1.0


def test_merged_cells_are_one_instance(twin, perfect, tmp_path):
    sub = copy_of(perfect, tmp_path / "sub")
    rewrite_all(sub, lambda lab: (lab > 0).astype(np.uint8))   # semantic mask: all cells one instance
    scores = grader().grade(sub, twin.private)
    assert scores["f1_0.5"] < 0.5


def test_baseline_validates_and_scores_zero(twin, tmp_path):
    g = grader()
    g.write_baseline(twin.public, tmp_path / "base")
    g.validate(tmp_path / "base", twin.public)
    scores = g.grade(tmp_path / "base", twin.private)
    assert scores == {k: 0.0 for k in KEYS}
    assert rank(task(), scores).percentile < 0.1


def test_integral_float_and_bool_labels_are_accepted(tmp_path):
    path = tmp_path / "x.tiff"
    tifffile.imwrite(path, np.array([[0, 1.0], [2.0, 0]], dtype=np.float32))
    assert read_labels(path, "c", (2, 2)).tolist() == [[0, 1], [2, 0]]
    tifffile.imwrite(path, np.array([[True, False], [False, False]]))
    assert read_labels(path, "c", (2, 2)).tolist() == [[1, 0], [0, 0]]


# == malformed submissions ==============================================================================


def _garbage(sub):
    first_file(sub).write_bytes(b"II*\x00garbage that is not a tiff")


def _replace_first(fn):
    def make(sub):
        path = first_file(sub)
        tifffile.imwrite(path, fn(tifffile.imread(path)))
    return make


MALFORMED = {
    "unreadable file": (_garbage, "cannot read"),
    "wrong shape": (_replace_first(lambda a: a[:-1]), "never resized"),
    "transposed": (_replace_first(lambda a: np.ascontiguousarray(a.T) if a.shape[0] != a.shape[1]
                                  else a[:, :-1]), "never resized"),
    "3-D stack": (_replace_first(lambda a: np.stack([a, a])), "2-D"),
    "RGB": (_replace_first(lambda a: np.stack([a, a, a], -1).astype(np.uint8)), "2-D"),
    "negative labels": (_replace_first(lambda a: a.astype(np.int32) - 1), "negative"),
    "fractional labels": (_replace_first(lambda a: a.astype(np.float32) + 0.5), "non-integer"),
    "NaN": (_replace_first(lambda a: np.where(a > 0, np.nan, 0).astype(np.float32)), "NaN"),
    "complex": (_replace_first(lambda a: a.astype(np.complex64)), "pixel type"),
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_malformed_submission_is_invalid(kind, twin, perfect, tmp_path):
    make, reason = MALFORMED[kind]
    assert_refused(grader(), perfect, twin, make, reason, tmp_path)
