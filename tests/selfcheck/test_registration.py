"""One registration rule for runtimes: the ``rexmle.runtimes`` entry points, the built-in ones included.

An editable install and an installed wheel of this project must both find local, docker and slurm through
their metadata alone; a source tree that was never installed finds none and says how to fix it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest_rexmle.runtime as runtime_package

from ..conftest import REPO

BUILTIN = {"docker": "pytest_rexmle.runtime.docker:DockerRuntime", "local": "pytest_rexmle.runtime.local:LocalRuntime",
           "slurm": "pytest_rexmle.runtime.slurm:SlurmRuntime"}
#: what a fresh environment reports of its runtimes: the entry points, and the names the package's registry finds
REPORT = ("import json; from importlib.metadata import entry_points; import pytest_rexmle.runtime as r; "
          "print(json.dumps({'eps': {e.name: e.value for e in entry_points(group='rexmle.runtimes')}, "
          "'names': r.RUNTIMES.names(), 'file': r.__file__}))")


def test_builtin_runtimes_are_entry_points_only():
    from importlib.metadata import entry_points

    found = {ep.name: ep.value for ep in entry_points(group=runtime_package.GROUP)}
    assert {name: found.get(name) for name in BUILTIN} == BUILTIN
    assert not hasattr(runtime_package, "BUILTIN_RUNTIMES")  # no second table to keep in step
    for name in BUILTIN:
        assert runtime_package.RUNTIMES.load(name).name == name


def test_a_source_tree_never_installed_says_to_install(tmp_path):
    """The package on PYTHONPATH of an environment where it was never installed: no metadata, no runtime."""
    venv.create(tmp_path / "venv", with_pip=False, symlinks=True)
    load = "from pytest_rexmle.runtime import RUNTIMES; RUNTIMES.load('local')"
    proc = subprocess.run([str(tmp_path / "venv" / "bin" / "python"), "-c", load], capture_output=True, text=True,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert proc.returncode == 1
    assert ("RexmleError: unknown runtime 'local': none is registered here; runtimes are registered as entry points "
            "of the rexmle.runtimes group; install pytest-rexmle (`pip install -e .`") in proc.stderr, proc.stderr


def _fresh_environment(folder: Path) -> Path:
    """A virtual environment with nothing installed: its python, which sees no other environment's packages."""
    venv.create(folder, with_pip=True, symlinks=True)
    return folder / "bin" / "python"


def _report(python: Path, cwd: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([str(python), "-c", REPORT], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _pip(python: Path, *args: str) -> None:
    proc = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", *args], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_editable_install_finds_the_builtin_runtimes(tmp_path):
    python = _fresh_environment(tmp_path / "venv")
    _pip(python, "-e", str(REPO))
    report = _report(python, tmp_path)
    assert report["eps"] == BUILTIN and report["names"] == sorted(BUILTIN)
    assert Path(report["file"]).resolve().is_relative_to(REPO.resolve())


def test_wheel_finds_the_builtin_runtimes(tmp_path):
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"),
                            str(REPO)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    [wheel] = (tmp_path / "dist").glob("pytest_rexmle-*.whl")
    python = _fresh_environment(tmp_path / "venv")
    _pip(python, str(wheel))
    report = _report(python, tmp_path)
    assert report["eps"] == BUILTIN and report["names"] == sorted(BUILTIN)
    assert "site-packages" in report["file"]  # the wheel's copy, not this checkout
