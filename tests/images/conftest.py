"""Fixtures of the image-agent tests: an agent's test image saved from Docker (``docker save``, the one thing
Docker is needed for) and imported into the session's cache, as a cluster user would do with
``rexmle images export`` on a workstation and ``rexmle images import`` on the cluster."""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from ..conftest import require_service

#: the one place naming the agents' test images: CI builds rexmle/test-<agent>:latest (.ci/build-agent-images.sh);
#: REXMLE_AGENT_IMAGE_TAG=rexmle/{agent}:latest points every image test at the real tags instead
AGENT_IMAGE_TAG = os.environ.get("REXMLE_AGENT_IMAGE_TAG", "rexmle/test-{agent}:latest")


def agent_image(agent: str) -> str:
    return AGENT_IMAGE_TAG.format(agent=agent)


@contextmanager
def cache_at(folder: Path):
    """``REXMLE_CACHE_DIR`` set to ``folder`` for the duration (session fixtures cannot monkeypatch)."""
    before = os.environ.get("REXMLE_CACHE_DIR")
    os.environ["REXMLE_CACHE_DIR"] = str(folder)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("REXMLE_CACHE_DIR", None)
        else:
            os.environ["REXMLE_CACHE_DIR"] = before


def _docker_saves(tag: str, env: dict[str, str]) -> bool:
    done = subprocess.run(["docker", "image", "inspect", tag], capture_output=True, timeout=60, env=env) \
        if _has_docker() else None
    return done is not None and done.returncode == 0


def _has_docker() -> bool:
    from shutil import which

    return which("docker") is not None


@pytest.fixture(scope="session")
def imported(shared_cache, tmp_path_factory):
    """``imported(agent)``: the agent's test image exported from Docker and imported into the session's
    cache (once per session); returns (tag, StoredImage)."""
    from pytest_rexmle.images import store

    done: dict[str, tuple] = {}
    engine_env = dict(os.environ)  # before a test hides the engine (DOCKER_HOST at a dead socket)

    def load(agent: str):
        if agent in done:
            return done[agent]
        tag = agent_image(agent)
        require_service(_docker_saves(tag, engine_env), "REXMLE_REQUIRE_DOCKER", f"the Docker image {tag} (to export)")
        archive = tmp_path_factory.mktemp("export") / f"{agent}.tar"
        subprocess.run(["docker", "save", "-o", str(archive), tag], check=True, timeout=900, env=engine_env)
        with cache_at(shared_cache):
            image, _ = store.import_archive(archive)
        archive.unlink()
        done[agent] = (tag, image)
        return done[agent]

    return load
