"""NeurIPS 2022 CellSeg: multi-modality cell instance segmentation."""
