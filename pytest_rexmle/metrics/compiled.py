"""Compiled kernels of installed packages, loaded from their extension files without the package.

Importing ``scipy.ndimage`` costs about a quarter of a second per process (SciPy's array-API layer
touches every NumPy submodule at import), and ``skimage.morphology`` half a second, while the grade of
one case needs a single compiled function of each that depends on NumPy alone. A grade is a fresh
process per submission, so that start-up is paid on every one; the benchmark's goal is the grade
within 2.5× of merely decoding the two files.

A kernel loaded this way is checked on a probe with a known answer by its caller, and every caller
falls back to the public API when anything is unexpected (another layout, a renamed kernel, a probe
that disagrees): the result is the same either way, only the start-up differs.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import threading
from pathlib import Path
from types import ModuleType

_LOCK = threading.Lock()
_LOADED: dict[str, ModuleType] = {}


def load_extension(name: str) -> ModuleType:
    """The compiled module ``name`` (``package.sub._kernel``), executed from its file, once per process.

    Two threads asking together get the same module (a compiled module initialised twice could reset
    tables the other thread is using). Raises ImportError when there is no such extension file.
    """
    with _LOCK:
        module = sys.modules.get(name) or _LOADED.get(name)
        if module is None:
            # the package itself is not imported; a single-phase C module registers itself in sys.modules
            # (a later import of its package then reuses it, initialised), a multi-phase one (Cython)
            # does not, hence this process's own table
            module = _LOADED[name] = _execute(name)
        return module


def _execute(name: str) -> ModuleType:
    top, *middle, leaf = name.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin is None:
        raise ImportError(f"{top} is not installed")
    folder = Path(spec.origin).parent.joinpath(*middle)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = folder / f"{leaf}{suffix}"
        if path.is_file():
            break
    else:
        raise ImportError(f"no compiled {name} in {folder}")
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    module_spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    if module_spec is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(module_spec)
    loader.exec_module(module)
    return module
