"""PANTHER: pancreatic tumour segmentation in MRI (tasks 1 and 2)."""
