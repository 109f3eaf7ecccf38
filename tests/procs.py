"""Process and namespace helpers for tests that must run on a minimal system.

A fresh Debian has no ``procps`` (no ``pgrep``), and an ordinary container refuses ``unshare`` with
"Operation not permitted" (no CAP_SYS_ADMIN): neither may turn a test into a failure there. Processes are
found by reading ``/proc``; a test that needs a namespace first asks whether it can have one, and skips
naming what is missing (or fails where ``.ci/run`` requires it).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from functools import cache
from pathlib import Path

from .conftest import require_service


def processes_matching(marker: str) -> list[str]:
    """``pid command line`` of every process whose command line contains ``marker`` (what ``pgrep -af``
    prints), this process excluded."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if marker in cmdline:
            out.append(f"{entry.name} {cmdline}")
    return out


@cache
def _unshare_works(flags: tuple[str, ...]) -> str | None:
    """None when ``unshare FLAGS true`` works here, else why not."""
    if shutil.which("unshare") is None:
        return "util-linux's unshare is not installed"
    proc = subprocess.run(["unshare", *flags, "true"], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        return f"`unshare {' '.join(flags)}` fails here ({proc.stderr.strip() or proc.returncode})"
    return None


def require_unshare(*flags: str) -> None:
    """Skip (or fail under ``REXMLE_REQUIRE_SANDBOX=1``) unless ``unshare`` with these flags works: root
    with CAP_SYS_ADMIN, which a default container does not grant."""
    why = _unshare_works(tuple(flags))
    require_service(why is None, "REXMLE_REQUIRE_SANDBOX",
                    f"a private namespace via util-linux unshare {' '.join(flags)} (needs CAP_SYS_ADMIN: {why})")


def terminal_sigint() -> None:
    """``preexec_fn`` for a session a test will Ctrl-C: SIGINT at its default, as a terminal gives it. A
    suite started in the background of a non-interactive shell (``.ci/run &``, nohup) inherits SIGINT
    *ignored*, and Python then installs no KeyboardInterrupt handler, so the signal would never arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
