"""Starting the sandbox's helper processes: data on a file descriptor instead of the command line, and
Python commands that import this very copy of the package."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest_rexmle


def data_fd(data: bytes, name: str = "rexmle") -> int:
    """A memory file holding ``data``, positioned at its start (no pipe-buffer size limit to block on).
    Close-on-exec: pass it with ``pass_fds`` to the one child that should read it."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def python_command(code: str, *args: str) -> list[str]:
    """``python -I -c CODE ARGS`` (no environment, no user site) with this very copy of the package
    importable, wherever it was imported from (installed, editable or on PYTHONPATH)."""
    home = str(Path(pytest_rexmle.__file__).resolve().parent.parent)
    return [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {home!r}); {code}", *args]
