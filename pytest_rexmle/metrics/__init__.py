"""Metric library, one module per family (overlap, surface distance, topology, detection, instance
matching, correlation, image similarity). Functions take NumPy arrays and plain numbers, never paths,
so each is unit-testable on hand-computable cases."""
