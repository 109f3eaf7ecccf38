"""Codex CLI: adapter (``adapter.py``), image recipe (``Dockerfile``) and start script.

``start.py`` runs inside the image (beside ``common/``'s helpers); it is not imported here."""
