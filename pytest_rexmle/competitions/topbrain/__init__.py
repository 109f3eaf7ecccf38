"""TopBrain 2025: multi-class brain-vessel segmentation (CTA and MRA); reuses TopCoW's volume scoring."""
