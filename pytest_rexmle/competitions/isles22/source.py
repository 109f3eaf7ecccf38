"""ISLES'22's raw file: the BIDS archive on Zenodo."""

from __future__ import annotations

from ...data.prepare.sources import Signatures

SIGNATURES: Signatures = {
    "ISLES-2022.zip": ((r"sub-strokecase\d+_ses-\d+_(dwi|adc|flair|msk)\.nii\.gz$",),
                       "ISLES'22 BIDS volumes (sub-strokecase*_ses-*_dwi.nii.gz ...)"),
}
