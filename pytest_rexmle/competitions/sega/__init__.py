"""SEG.A 2023: aorta segmentation in CTA."""
