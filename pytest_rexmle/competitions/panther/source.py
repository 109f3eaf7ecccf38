"""PANTHER's raw files: one Zenodo zip per task, told apart by how their labels are named."""

from __future__ import annotations

import re

from ...data.prepare.sources import Part
from ...task import Task

#: task 1 labels are ``<pid>_0001.mha``, task 2 labels ``<pid>.mha``
LABELS = {"1": r"/labelstr/\d+_0001\.mha$", "2": r"/labelstr/\d+\.mha$"}
EXAMPLE = {"1": "<pid>_0001.mha", "2": "<pid>.mha"}


def parts(task: Task) -> list[Part]:
    src = task.source
    out = []
    for name in src.get("files_used") or src.get("files") or []:
        if (task_number := re.search(r"Task(\d)", name)) is None:
            raise ValueError(f"{task.id}: source file {name!r} names no PANTHER task (Task1 or Task2)")
        number = task_number.group(1)
        out.append(Part(name, "zenodo", f"task{number}", record=str(src["record_id"]), files=(name,),
                        pattern=rf"(?i)task[_ -]?{number}\b.*\.zip$", signature=(LABELS[number],),
                        expects=f"PANTHER task {number} (LabelsTr/{EXAMPLE[number]})"))
    return out
