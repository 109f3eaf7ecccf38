"""DENTEX's raw file: the Zenodo training archive."""

from __future__ import annotations

from ...data.prepare.sources import Part, Signatures, zenodo_parts
from ...task import Task

#: release file name → (member regexes identifying it, words for users)
SIGNATURES: Signatures = {
    "training_data.zip": ((r"enumeration.disease[^/]*\.json$",), "DENTEX training_data (quadrant-enumeration-disease JSON)"),
}


def parts(task: Task) -> list[Part]:
    return zenodo_parts(task, SIGNATURES)
