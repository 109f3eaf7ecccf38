"""PUMA's raw files: ROI TIFFs and the tissue and nuclei GeoJSON archives on Zenodo (a task fetches only what it uses)."""

from __future__ import annotations

from ...data.prepare.sources import Signatures

SIGNATURES: Signatures = {
    "01_training_dataset_tif_ROIs.zip": ((r"_roi_\d+\.tiff?$",), "PUMA ROI TIFFs (training_set_*_roi_*.tif)"),
    "01_training_dataset_geojson_tissue.zip": ((r"_tissue\.geojson$",), "PUMA tissue GeoJSON (*_tissue.geojson)"),
    "01_training_dataset_geojson_nuclei.zip": ((r"_nuclei\.geojson$",), "PUMA nuclei GeoJSON (*_nuclei.geojson)"),
}
