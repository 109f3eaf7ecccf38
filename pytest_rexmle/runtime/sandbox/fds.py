"""Hand data to a child process on a file descriptor instead of its command line."""

from __future__ import annotations

import os


def data_fd(data: bytes, name: str = "rexmle") -> int:
    """A memory file holding ``data``, positioned at its start (no pipe-buffer size limit to block on).
    Close-on-exec: pass it with ``pass_fds`` to the one child that should read it."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
