"""Helpers for the schedule's tests: a stand-in NVML library and background sessions to signal."""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ..conftest import require_service
from ..procs import terminal_sigint

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


def baseline_agent(folder: Path, tasks: list[str]) -> Path:
    """A ``command`` agent's folder holding each task's baseline submission, written here on the host
    (as the ``sample`` agent's ``setup`` does) from the same synthetic twins the sessions use (the cache
    is shared): the agent inside only copies ``$REXMLE_TASK/`` into its submission folder, with no
    harness code (:data:`COPY_BASELINE`). Written by a child process: pytester restores ``sys.modules``
    after each test, and NumPy cannot be imported twice into one process."""
    agent = folder / "baseline-agent"
    script = ("import sys\nfrom pathlib import Path\n"
              "from pytest_rexmle.data.synthetic import ensure_synthetic\n"
              "from pytest_rexmle.graders.base import load_grader\n"
              "from pytest_rexmle.task import registry\n"
              "for task_id in sys.argv[2:]:\n"
              "    task = registry().get(task_id)\n"
              "    out = Path(sys.argv[1]) / task_id\n"
              "    out.mkdir(parents=True, exist_ok=True)\n"
              "    load_grader(task).write_baseline(ensure_synthetic(task).public, out)\n")
    subprocess.run([sys.executable, "-c", script, str(agent), *tasks], check=True, timeout=600)
    return agent


#: the in-sandbox half of :func:`baseline_agent` (its working directory is the agent's copied folder)
COPY_BASELINE = 'cp -R "$REXMLE_TASK/." "$REXMLE_SUBMISSION_DIR/"'


def spawn(folder: Path, *args: str) -> subprocess.Popen:
    """pytest in the background in ``folder`` (as ``bench`` runs it), for signalling; SIGINT as in a terminal."""
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rexmle-data=synthetic", *args]
    log = open(folder / f"session-{uuid.uuid4().hex[:6]}.log", "wb")
    return subprocess.Popen(argv, cwd=folder, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=terminal_sigint)


def alive(marker: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]
