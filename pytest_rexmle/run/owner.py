"""Which harness process owns an unfinished run, and whether it is still there.

A run folder without ``result.json`` and without ``finished`` in ``run.json`` is either in progress or the
remains of a session that was stopped: Ctrl-C and SIGTERM (the harness writes ``interrupted`` on its way
out when it still can) or ``kill -9`` and a lost machine (it cannot). So ``run.json`` names its owner
(host, boot, pid and the pid's start time, since a pid alone may be reused), and ``rexmle status`` calls a
run whose owner is gone "interrupted" instead of showing a ghost "running" whose elapsed time grows.
"""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime
from pathlib import Path

from ..runtime.liveness import pid_alive, process_start

ALIVE, GONE, UNKNOWN = "alive", "gone", "unknown"


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def owner_record() -> dict:
    """This process as the owner of the runs it starts (stored under ``owner`` in ``run.json``)."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "boot": _boot_id(), "pid": pid, "start": process_start(pid)}


def owner_state(meta: dict) -> str:
    """``alive``, ``gone`` (the owning process, or the boot it ran in, is over) or ``unknown`` (another
    host, or a run.json from before owners were recorded)."""
    owner = meta.get("owner")
    if not isinstance(owner, dict) or not isinstance(owner.get("pid"), int):
        return UNKNOWN
    if owner.get("host") != socket.gethostname():
        return UNKNOWN
    if owner.get("boot") and _boot_id() and owner["boot"] != _boot_id():
        return GONE  # the machine rebooted since
    return ALIVE if pid_alive(owner["pid"], owner.get("start")) else GONE


def last_activity(run_dir: Path) -> datetime:
    """When the run last showed a sign of life: the newest modification among ``run.json`` and its logs
    (the best "when" for a harness killed without a chance to say so)."""
    newest = 0.0
    for path in [run_dir / "run.json", *sorted((run_dir / "logs").glob("*"))[:200]]:
        try:
            newest = max(newest, path.stat().st_mtime)
        except OSError:
            continue
    return datetime.fromtimestamp(newest, UTC)


def interrupted_meta(meta: dict, cause: BaseException) -> dict:
    """``meta`` marked as interrupted now, by ``cause`` (KeyboardInterrupt for Ctrl-C, SystemExit for a
    SIGTERM turned into an exit, ...)."""
    return {**meta, "interrupted": datetime.now(UTC).isoformat(), "interrupted_by": type(cause).__name__}
