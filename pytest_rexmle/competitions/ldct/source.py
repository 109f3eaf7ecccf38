"""LDCT-IQA's raw files: the training set on Zenodo, the test set (with its scores) on Google Drive."""

from __future__ import annotations

from ...data.prepare.sources import GDRIVE_PAGE, Part
from ...task import Task


def parts(task: Task) -> list[Part]:
    src = task.source
    return [Part(f"Zenodo record {src['train']['record_id']} (all files)", "zenodo", "train",
                 record=str(src["train"]["record_id"]), signature=(r"/train\.json$", r"\.tiff?$"),
                 expects="the LDCT-IQA training set (train.json and image/*.tif)"),
            Part("test_dataset.zip", "manual", "test", files=("test_dataset.zip",),
                 page=GDRIVE_PAGE.format(id=src["test"]["file_id"]), signature=(r"\.tiff?$", r"\.json$"),
                 excludes=(r"/train\.json$",),
                 expects="the LDCT-IQA test set (TIFF slices and a JSON of their scores, no train.json)")]
