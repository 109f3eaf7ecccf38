"""DENTEX's raw file: the Zenodo training archive."""

from __future__ import annotations

from ...data.prepare.sources import Signatures

SIGNATURES: Signatures = {
    "training_data.zip": ((r"enumeration.disease[^/]*\.json$",), "DENTEX training_data (quadrant-enumeration-disease JSON)"),
}
