"""TopBrain's raw file: the Zenodo release of batches 1 and 2."""

from __future__ import annotations

from ...data.prepare.sources import Signatures

SIGNATURES: Signatures = {
    "TopBrain_Data_Release_Batches1n2_081425.zip": ((r"/labelstr_topbrain_",), "the TopBrain release (labelsTr_topbrain_*/)"),
}
