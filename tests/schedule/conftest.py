"""Helpers for the schedule's tests: a stand-in NVML library and background sessions to signal."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ..conftest import require_service

HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def nvml_standin(tmp_path_factory) -> Path:
    """A folder holding ``libnvidia-ml.so.1`` compiled from ``nvml_standin.c`` (see its header): put it on
    ``LD_LIBRARY_PATH`` and nvidia-ml-py loads it by its soname as it would the driver's."""
    require_service(shutil.which("gcc") is not None, "REXMLE_REQUIRE_GCC", "gcc (to build the stand-in NVML library)")
    folder = tmp_path_factory.mktemp("nvml")
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-Wl,-soname,libnvidia-ml.so.1",
                    "-o", str(folder / "libnvidia-ml.so.1"), str(HERE / "nvml_standin.c")], check=True)
    return folder


def spawn(folder: Path, *args: str) -> subprocess.Popen:
    """pytest in the background in ``folder`` (as ``bench`` runs it), for signalling; SIGINT as in a terminal."""
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rexmle-data=synthetic", *args]
    log = open(folder / f"session-{uuid.uuid4().hex[:6]}.log", "wb")
    return subprocess.Popen(argv, cwd=folder, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def alive(marker: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]
