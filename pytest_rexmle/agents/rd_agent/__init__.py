"""R&D-Agent: adapter (``adapter.py``), image recipe (``Dockerfile`` with its lock file) and start script.

``start.py`` runs inside the image (beside ``common/``'s helpers); it is not imported here."""
