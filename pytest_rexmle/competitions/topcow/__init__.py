"""TopCoW 2024: Circle-of-Willis segmentation, bounding boxes and edge classification (CTA and MRA)."""
