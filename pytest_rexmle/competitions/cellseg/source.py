"""CellSeg's raw files: the labelled training and tuning archives on Zenodo."""

from __future__ import annotations

from ...data.prepare.sources import Signatures

SIGNATURES: Signatures = {
    "Training-labeled.zip": ((r"/training-labeled/.*_label\.tiff?$",), "CellSeg Training-labeled (labels/*_label.tiff)"),
    "Tuning.zip": ((r"/tuning/.*_label\.tiff?$",), "CellSeg Tuning (labels/*_label.tiff)"),
}
