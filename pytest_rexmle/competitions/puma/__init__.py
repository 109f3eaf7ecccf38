"""PUMA: melanoma tissue segmentation and nuclei detection (tracks 1 and 2)."""
