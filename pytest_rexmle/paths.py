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


def default_data_dir() -> Path:
    """Where ``rexmle prepare`` puts real data (``<data>/raw``, ``<data>/<task>/{public,private}``)."""
    env = os.environ.get("REXMLE_DATA_DIR")
    return Path(env) if env else cache_home() / "data"


def synthetic_cache_dir() -> Path:
    return cache_home() / "synthetic"
