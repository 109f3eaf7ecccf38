"""DENTEX 2023: hierarchical tooth detection (quadrant, enumeration, diagnosis) on panoramic X-rays."""
