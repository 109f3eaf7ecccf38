"""Agent images without a Docker engine: an image's root filesystem unpacked once into the cache.

Why: GPU clusters rarely run a Docker engine, but an agent's environment (its Python, PyTorch, the agent)
is an image. ``rexmle images export`` writes one archive where Docker runs; ``rexmle images import``
unpacks it (``unpack.py``: safe extraction, whiteouts honoured) into ``$REXMLE_CACHE_DIR/images/``
(``store.py``: content-addressed by the image's digest, read-only, shared by every run and session), where
the local runtime enters it with bubblewrap (``runtime/sandbox/bwrap.py``).
"""
