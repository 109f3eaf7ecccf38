"""Task data: the prepared layout of challenges.md §0.2, from real releases or synthetic twins."""
