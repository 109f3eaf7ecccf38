"""TopCoW's raw file: the one Zenodo release all six TopCoW tasks share."""

from __future__ import annotations

from ...data.prepare.sources import Part, Signatures, zenodo_parts
from ...task import Task

#: release file name → (member regexes identifying it, words for users)
SIGNATURES: Signatures = {
    "TopCoW2024_Data_Release.zip": ((r"/cow_seg_labelstr/",), "the TopCoW release (cow_seg_labelsTr/)"),
}


def parts(task: Task) -> list[Part]:
    return zenodo_parts(task, SIGNATURES)
