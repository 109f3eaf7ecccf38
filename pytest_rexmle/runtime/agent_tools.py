"""The few commands the harness puts on the agent's PATH, none of which needs the harness's venv.

Why: whatever the agent runs inside its sandbox must work for a uid that cannot reach the harness's
interpreter (a pyenv under a 0700 ``/root``, a venv in someone's home) and inside any image. So the
agent gets a small read-only folder of tools, the first entry of its ``PATH``:

* ``rexmle-validate`` — the gateway's standard-library validation client
  (``pytest_rexmle/gateway/validate_client.py``): it sends the run's submission to
  ``$REXMLE_VALIDATE_URL`` and prints the verdict; the gateway checks the format against public data
  only, never the answers;
* ``rexmle`` — ``rexmle validate ...`` as the README and the instructions name it, handed to
  ``rexmle-validate``; every other subcommand is refused with a message (the harness's CLI is not here);
* ``python`` — the system's ``python3``, only where the system has no ``python`` of its own, so that
  ``python agent.py`` keeps working without naming the harness's interpreter (not for an agent that
  brings its own environment, whose ``bin/`` follows the tools on ``PATH``).

Each runtime shows the folder read-only: bubblewrap and Docker bind it at ``/rexmle/bin``; Landlock
(no mount namespace) finds it in the run's stage, readable and executable by the agent's uid only.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import RunSpec

CLIENT = Path(__file__).resolve().parent.parent / "gateway" / "validate_client.py"
#: where bubblewrap and Docker show the folder inside the sandbox
INSIDE = Path("/rexmle/bin")
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
DISPATCHER = """#!/bin/sh
# rexmle inside the sandbox: only `rexmle validate ...`, answered by the gateway through rexmle-validate
if [ "$1" = validate ]; then
    shift
    exec "$(dirname "$0")/rexmle-validate" "$@"
fi
echo "rexmle: inside the sandbox only 'rexmle validate [--submission DIR]' is available" >&2
exit 2
"""
MISSING_CLIENT = """#!/bin/sh
echo "rexmle-validate: this harness has no validation client (pytest_rexmle/gateway/validate_client.py)" >&2
exit 3
"""


def client_source() -> bytes | None:
    """The validation client's text, with a ``#!`` line for the system's Python (None: not installed)."""
    try:
        text = CLIENT.read_bytes()
    except OSError:
        return None
    return text if text.startswith(b"#!") else b"#!/usr/bin/env python3\n" + text


#: the tools' commands (a container also gets them in /usr/local/bin, for login shells' PATH)
COMMANDS = ("rexmle", "rexmle-validate")


def write_tools(folder: Path, python: bool = True) -> Path:
    """Fill ``folder`` (created here, mode 0755 with 0755 files) with the agent's tools; returns it.
    The caller gives it to the agent's uid read-only (ownership stays the harness's). ``python=False``:
    no ``python`` stand-in, for an agent that brings its own (``--agent-option env=``), found after the tools."""
    folder.mkdir(mode=0o755)
    client = client_source()
    _write(folder / "rexmle-validate", client if client is not None else MISSING_CLIENT.encode())
    _write(folder / "rexmle", DISPATCHER.encode())
    if python and not any(os.path.exists(os.path.join(d, "python")) for d in SYSTEM_PATH.split(":")):
        python3 = shutil.which("python3", path=SYSTEM_PATH)
        if python3:
            os.symlink(python3, folder / "python")
    os.chmod(folder, 0o755)
    return folder


def folder_of(spec: RunSpec) -> Path:
    """Where a run's tools are written: its stage's ``bin`` (the stage is all Landlock's agent reaches), else
    ``.bin`` beside its workspace."""
    return spec.stage / "bin" if spec.stage is not None else spec.workspace.parent / ".bin"


def agent_path(tools: str | Path) -> str:
    """The agent's PATH: its tools, then the system's folders — never the harness's interpreter."""
    return f"{tools}:{SYSTEM_PATH}"


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, 0o755)
