"""PANTHER answers are the release's label 1 (tumour) voxel for voxel; training labels stay as released."""

from __future__ import annotations

import io
import json
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

from pytest_rexmle.data.prepare import prepare_task
from pytest_rexmle.data.taskdata import MANIFEST
from pytest_rexmle.graders.base import load_grader
from pytest_rexmle.task import registry


def _released(zip_data: bytes) -> dict[str, np.ndarray]:
    """label stem → released label array, read straight from the fake archive's bytes."""
    out = {}
    with zipfile.ZipFile(io.BytesIO(zip_data)) as zf, tempfile.TemporaryDirectory() as tmp:
        for name in zf.namelist():
            if "/LabelsTr/" in name and name.endswith(".mha"):
                path = Path(tmp) / "label.mha"
                path.write_bytes(zf.read(name))
                out[name.rsplit("/", 1)[1][: -len(".mha")]] = _array(path)
    return out


def _array(path) -> np.ndarray:
    return sitk.GetArrayFromImage(sitk.ReadImage(str(path)))


@pytest.mark.parametrize("task_id, archive", [("panther-t1", "PANTHER_Task1.zip"), ("panther-t2", "PANTHER_Task2.zip")])
def test_answers_are_release_label_one(fake_sources, tmp_path, task_id, archive):
    state, _ = fake_sources
    released = _released(state.zenodo["15192302"][archive])
    data = prepare_task(task_id, tmp_path, progress=False)
    split = json.loads((data.private / "split.json").read_text())
    assert split["test"], "the fake release must leave test cases"
    saw_pancreas_in_test = False
    for case_id in split["test"]:
        answer = _array(data.private / "test" / "labels" / f"{case_id}.mha")
        if case_id == "10301":           # task 2's label on a shifted grid: resampled, then binarised
            assert set(np.unique(answer)) <= {0, 1}
            continue
        assert np.array_equal(answer, (released[case_id] == 1).astype(answer.dtype)), case_id
        saw_pancreas_in_test |= bool((released[case_id] == 2).any())
    if task_id == "panther-t1":   # case 10001_0001 outlines the pancreas: it must be gone from the answer
        assert saw_pancreas_in_test
    for case_id in split["train"]:
        train_label = _array(data.public / "train" / "labels" / f"{case_id}.mha")
        if case_id != "10301":
            assert np.array_equal(train_label, released[case_id]), case_id   # as released: 0/1/2
    manifest = json.loads((data.private / MANIFEST).read_text())
    notes = manifest["notes"]
    assert notes["scored_label"] == 1
    assert notes["label_meaning"] == {"0": "background", "1": "tumour", "2": "pancreas"}
    assert notes["released_label_values"] == [0, 1, 2]
    assert set(notes["training_label_values"]) <= {0, 1, 2}

    grader = load_grader(registry().get(task_id))
    grader.write_perfect(data.private, tmp_path / "perfect")
    assert grader.grade(tmp_path / "perfect", data.private)["dsc"] == 1.0


def test_description_names_the_scored_label():
    for task_id in ("panther-t1", "panther-t2"):
        task = registry().get(task_id)
        text = task.description_path.read_text()
        assert "1 = tumour" in text and "2 = pancreas" in text and "Only the tumour is scored" in text
        assert task.extra["labels"]["scored"] == [1]
