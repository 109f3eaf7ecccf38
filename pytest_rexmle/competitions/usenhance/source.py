"""USenhance's raw file: the training archive on Google Drive, which only a browser can fetch."""

from __future__ import annotations

from ...data.prepare.sources import GDRIVE_PAGE, Part
from ...task import Task

PNG = r"/(breast|carotid|kidney|liver|thyroid)/low_quality/[^/]+\.png$"


def parts(task: Task) -> list[Part]:
    return [Part("train_dataset.zip", "manual", "train_dataset", page=GDRIVE_PAGE.format(id=task.source["file_id"]),
                 files=("train_dataset.zip",), signature=(PNG,),
                 expects="USenhance training PNGs (<organ>/low_quality/*.png)")]
