"""Default locations, each overridable by an environment variable or a command-line option; and
:class:`Entry`, one line per fixed entry of a folder object (a run folder, a task folder, a data root)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, overload

#: the file of the benchmark item, which the plugin adds to the collection when ``--agent`` is given
BENCHMARK_MODULE = Path(__file__).with_name("benchmark.py")


class Entry:
    """A fixed file or folder inside the folder an object stands for: ``workspace = Entry("workspace")``
    reads ``obj.root / "workspace"``. The layout of a folder is then its list of entries, in one place."""

    def __init__(self, name: str, root: str = "root") -> None:
        self.name = name
        self.root = root

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Entry: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> Path: ...

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self if obj is None else getattr(obj, self.root) / self.name


@contextmanager
def cache_home_at(folder: Path) -> Iterator[None]:
    """``REXMLE_CACHE_DIR`` at ``folder`` for the duration, then as it was: a check-up's or a test's images and
    twins never land in the user's own cache."""
    before = os.environ.get("REXMLE_CACHE_DIR")
    os.environ["REXMLE_CACHE_DIR"] = str(folder)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("REXMLE_CACHE_DIR", None)
        else:
            os.environ["REXMLE_CACHE_DIR"] = before


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
