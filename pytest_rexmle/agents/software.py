"""An agent's own software stack on the host (``--agent-option env=PATH``): what the sandbox must show.

A venv is not self-contained: its ``bin/python`` is a symlink to the interpreter it was made from (a pyenv
or uv build under a home folder, ``/usr/bin/python3.11``, ...), which reads its standard library, and with
``--system-site-packages`` its packages, from that interpreter's prefix. A sandbox that binds only the venv
shows a dangling link. So the roots are the environment and, where its python resolves outside it and
outside the system folders every sandbox shows anyway, the prefix of the interpreter it resolves to.
A conda prefix holds its own interpreter.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import RexmleError

#: folders every sandbox shows already (bwrap's and Landlock's system view; an image has its own)
SYSTEM_PREFIXES = ("/usr", "/bin", "/lib", "/lib64", "/opt")


@dataclass(frozen=True)
class Software:
    roots: tuple[Path, ...]                 # shown read-only at their own paths, the environment first
    path: tuple[Path, ...]                  # PATH entries, after the harness's tools
    variables: dict[str, str] = field(default_factory=dict)  # VIRTUAL_ENV or CONDA_PREFIX


def _is_system(path: Path) -> bool:
    return any(path == Path(p) or Path(p) in path.parents for p in SYSTEM_PREFIXES)


def software_of(env: str | Path) -> Software:
    """The stack a host environment folder needs; RexmleError when it is not one."""
    root = Path(env).expanduser()
    if not root.is_absolute():
        root = Path.cwd() / root
    root = root.resolve()
    bin_dir = root / "bin"
    if not bin_dir.is_dir():
        raise RexmleError(f"agent option env={env}: {root} is not a virtual environment or conda prefix (no bin/)")
    if _is_system(root) or root == Path("/"):
        raise RexmleError(f"agent option env={env}: {root} is a system folder, which the sandbox shows already")
    roots = [root]
    for name in ("python", "python3"):
        python = bin_dir / name
        if python.exists():
            interpreter = Path(os.path.realpath(python))
            prefix = interpreter.parent.parent  # <prefix>/bin/pythonX.Y
            if not interpreter.is_relative_to(root) and not _is_system(interpreter):
                roots.append(prefix)
            break
    if (root / "pyvenv.cfg").is_file():
        variables = {"VIRTUAL_ENV": str(root)}
    elif (root / "conda-meta").is_dir():
        variables = {"CONDA_PREFIX": str(root)}
    else:
        variables = {}
    return Software(tuple(roots), (bin_dir,), variables)
