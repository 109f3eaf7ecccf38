"""Is the process that left something behind still alive? (a pid alone may have been reused)

A killed session leaves containers (Docker) and staged folders (:mod:`.staging`) behind; the next
session may only clean up after owners that are gone, never after a live concurrent session.
"""

from __future__ import annotations

import os
from pathlib import Path


def process_start(pid: int) -> str | None:
    """Start time of a process (clock ticks since boot): tells a live owner from a reused pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def pid_alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return start is None or process_start(pid) in (None, start)
