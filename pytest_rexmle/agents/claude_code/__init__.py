"""Claude Code: adapter (``adapter.py``), image recipe
(``image.toml``: the shared ``common/node_cli.Dockerfile`` with its pins) and start script.

``start.py`` runs inside the image (beside ``common/``'s helpers); it is not imported here."""
