"""A fresh clone of this checkout, as a reader's ``git clone`` gives it, with the working tree's own edits
(changed and new files git does not ignore) carried over, so the journey tests the documentation being edited."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def _git(repo: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, **kwargs)


def fresh_clone(repo: Path, into: Path) -> Path:
    """``git clone`` of ``repo`` into ``into``, then its uncommitted changes applied and new files copied."""
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(repo), str(into)], check=True, capture_output=True)
    diff = _git(repo, "diff", "HEAD", "--binary").stdout
    if diff:
        subprocess.run(["git", "-C", str(into), "apply", "--whitespace=nowarn"], input=diff, check=True,
                       capture_output=True)
    untracked = _git(repo, "ls-files", "--others", "--exclude-standard", "-z").stdout.decode().split("\0")
    for name in filter(None, untracked):
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / name, into / name)
    return into
