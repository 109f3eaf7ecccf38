"""Task data: the prepared layout (:mod:`.taskdata`), from real releases or synthetic twins."""
