"""Default locations, each overridable by an environment variable or a command-line option."""

from __future__ import annotations

import os
from pathlib import Path


def cache_home() -> Path:
    base = os.environ.get("REXMLE_CACHE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "rexmle"


def python_mirror_home() -> Path:
    """Where a root harness keeps mirrors of its Python for the agent's uid (``runtime/sandbox/mirror.py``).

    Not under :func:`cache_home`: that is ``/root/.cache`` by default (0700, so the agent could not
    reach it) and it holds the twins' secret and answers, whose location the agent's command line
    and PATH would then name. ``/var/cache`` is root's own, traversable by everyone and writable by
    no one else."""
    env = os.environ.get("REXMLE_PYTHON_MIRROR_DIR")
    return Path(env) if env else Path("/var/cache/rexmle/python-mirror")


def default_data_dir() -> Path:
    """Where ``rexmle prepare`` puts real data (``<data>/raw``, ``<data>/<task>/{public,private}``)."""
    env = os.environ.get("REXMLE_DATA_DIR")
    return Path(env) if env else cache_home() / "data"


def synthetic_cache_dir() -> Path:
    return cache_home() / "synthetic"
