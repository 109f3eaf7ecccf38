"""TopCoW's raw file: the one Zenodo release all six TopCoW tasks share."""

from __future__ import annotations

from ...data.prepare.sources import Signatures

SIGNATURES: Signatures = {
    "TopCoW2024_Data_Release.zip": ((r"/cow_seg_labelstr/",), "the TopCoW release (cow_seg_labelsTr/)"),
}
