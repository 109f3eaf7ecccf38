"""Fixtures of the Docker runtime tests.

An engine is required on CI (``REXMLE_REQUIRE_DOCKER=1``, set by .ci/run after .ci/docker-setup.sh):
then a missing engine or test image FAILS; on a developer machine without Docker these tests skip.
The offline test image (``rexmle/test-base:latest``) is built by .ci/build-test-image.sh, which is a
no-op when the image is current; the fixture runs it under a file lock so xdist workers build it once.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from ..conftest import REPO, require_service

TEST_IMAGE = os.environ.get("REXMLE_TEST_IMAGE", "rexmle/test-base:latest")
AIDE_TEST_IMAGE = "rexmle/test-aide:latest"
SESSION_LABEL = "rexmle.session"


def _engine():
    try:
        import docker

        client = docker.from_env(timeout=120)
        client.ping()
        return client
    except Exception:
        return None


@pytest.fixture(scope="session")
def docker_client():
    client = _engine()
    require_service(client is not None, "REXMLE_REQUIRE_DOCKER", "a Docker engine")
    return client


def _locked_build(tmp_path_factory, name: str, build) -> None:
    from filelock import FileLock

    lock = tmp_path_factory.getbasetemp().parent / f"rexmle-{name}.lock"
    with FileLock(str(lock)):
        build()


@pytest.fixture(scope="session")
def test_image(docker_client, tmp_path_factory) -> str:
    def build():
        proc = subprocess.run([str(REPO / ".ci" / "build-test-image.sh")], capture_output=True, text=True,
                              env={**os.environ, "REXMLE_TEST_IMAGE": TEST_IMAGE}, timeout=900)
        if proc.returncode != 0:
            require_service(False, "REXMLE_REQUIRE_DOCKER", f"the test image ({proc.stderr.strip()[-500:]})")

    _locked_build(tmp_path_factory, "test-image", build)
    return TEST_IMAGE


@pytest.fixture(scope="session")
def aide_image(test_image, docker_client, tmp_path_factory) -> str:
    """agents/aide/Dockerfile built FROM the test image: the real aideml, no CUDA stack."""
    from pytest_rexmle.agents.image_build import build_image

    def build():  # always: an unchanged recipe is all cached layers (about a second)
        ca = "/etc/ssl/certs/ca-certificates.crt"
        build_image("aide", tag=AIDE_TEST_IMAGE, base=test_image, client=docker_client,
                    ca_bundle=ca if Path(ca).is_file() else None, log=lambda line: None)

    _locked_build(tmp_path_factory, "aide-image", build)
    return AIDE_TEST_IMAGE


@pytest.fixture
def session_id() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def docker_bench(bench, test_image, session_id, monkeypatch):
    """The ``bench`` runner on the docker runtime, every container labelled with this test's session."""
    monkeypatch.setenv("REXMLE_DOCKER_IMAGE", test_image)
    monkeypatch.setenv("REXMLE_SESSION", session_id)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))

    def run(*args: str, timeout: float = 300):
        return bench("-p", "tests.docker._wiring", "--rexmle-runtime=docker", "--rexmle-limit=cpus=1", *args,
                     timeout=timeout)

    run.path = bench.path
    return run


def session_containers(client, session: str) -> list:
    # ignore_removed: a container the harness removes between the engine's list and its inspect is gone, not an error
    return client.containers.list(all=True, filters={"label": f"{SESSION_LABEL}={session}"}, ignore_removed=True)
