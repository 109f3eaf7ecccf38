"""Podman as the Docker engine: its Docker-compatible service runs the docker runtime, which passes selfcheck.

Podman's service gives a container the engine's default limits unless told otherwise, and where it runs
without CAP_SYS_RESOURCE (in a container, as on CI) those defaults exceed its own limits: the OCI runtime
refused every container ("error setting rlimit type 6"/"type 7"). The runtime now names nofile and nproc for
every container it makes. ``--init`` needs Podman's init binary (catatonit), which a refusal names.

CI installs podman and catatonit (.ci/docker-setup.sh) and sets ``REXMLE_REQUIRE_PODMAN=1``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_rexmle.runtime.docker import start_failure
from pytest_rexmle.testing import CHECKS

from ..conftest import require_service

IMAGE = "rexmle/test-base:latest"  # the offline Debian image of .ci/build-test-image.sh, with python3


@pytest.fixture(scope="module")
def podman_socket(tmp_path_factory, docker_client) -> str:
    """Podman's Docker-compatible service on a socket of the test's own, with the test image loaded from Docker."""
    podman = shutil.which("podman")
    require_service(podman is not None and shutil.which("catatonit") is not None, "REXMLE_REQUIRE_PODMAN",
                    "podman and catatonit (apt-get install podman catatonit)")
    assert podman is not None
    if subprocess.run([podman, "image", "exists", IMAGE]).returncode != 0:
        saved = subprocess.Popen(["docker", "save", IMAGE], stdout=subprocess.PIPE)
        loaded = subprocess.run([podman, "load"], stdin=saved.stdout, capture_output=True, text=True)
        saved.wait()
        assert loaded.returncode == 0, loaded.stderr[-2000:]
    socket = tmp_path_factory.mktemp("podman") / "podman.sock"
    service = subprocess.Popen([podman, "system", "service", "--time=0", f"unix://{socket}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    for _ in range(100):
        if socket.exists():
            break
        time.sleep(0.1)
    assert socket.exists(), "podman's service did not create its socket"
    yield f"unix://{socket}"
    service.terminate()
    try:
        service.wait(timeout=30)
    except subprocess.TimeoutExpired:
        service.kill()


def test_the_docker_runtime_passes_selfcheck_on_podman(podman_socket, tmp_path):
    env = {**os.environ, "DOCKER_HOST": podman_socket}
    rexmle = Path(sys.executable).with_name("rexmle")
    done = subprocess.run([str(rexmle), "selfcheck", "--runtime", "docker", "--image", IMAGE,
                           "--work-dir", str(tmp_path)], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"docker: {len(CHECKS)}/{len(CHECKS)} checks passed" in done.stdout, done.stdout
    assert "Traceback" not in done.stderr


class _EngineError(Exception):
    def __init__(self, explanation: str) -> None:
        super().__init__(explanation)
        self.explanation = explanation


@pytest.mark.parametrize("engine_says, fix", [
    ("container-init binary not found on the host: stat /usr/libexec/podman/catatonit: no such file or directory",
     "install catatonit (`apt-get install catatonit`)"),
    ("runc create failed: error setting rlimits for ready process: error setting rlimit type 6: operation not "
     "permitted", "lower it with --rexmle-limit"),
])
def test_an_engine_refusal_names_the_fix(engine_says, fix):
    message = start_failure("the agent's container", _EngineError(engine_says))
    assert message.startswith(f"the engine could not start the agent's container: {engine_says}") and fix in message
