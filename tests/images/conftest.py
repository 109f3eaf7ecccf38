"""Fixtures of the image-agent tests: an agent's test image saved from Docker (``docker save``, the one thing
Docker is needed for) and imported into the session's cache, as a cluster user would do with
``rexmle images export`` on a workstation and ``rexmle images import`` on the cluster."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pytest_rexmle.paths import cache_home_at

from ..conftest import require_service

#: the one place naming the agents' images: the real tags `rexmle images build --agent NAME` makes (CI builds them
#: with .ci/build-agent-images.sh); REXMLE_AGENT_IMAGE_TAG points every image test at other tags
AGENT_IMAGE_TAG = os.environ.get("REXMLE_AGENT_IMAGE_TAG", "rexmle/{agent}:latest")


def pytest_collection_modifyitems(config, items):
    """Every test that imports an agent image runs on one xdist worker (``--dist=loadgroup``): the real images
    are several GB each, imported once per session, not once per worker."""
    for item in items:
        if "imported" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("imported-agent-images"))


def agent_image(agent: str) -> str:
    return AGENT_IMAGE_TAG.format(agent=agent)


def _docker_saves(tag: str, env: dict[str, str]) -> bool:
    done = subprocess.run(["docker", "image", "inspect", tag], capture_output=True, timeout=60, env=env) \
        if _has_docker() else None
    return done is not None and done.returncode == 0


def _engine_id(tag: str, env: dict[str, str]) -> str:
    return subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", tag], capture_output=True, text=True,
                          timeout=60, env=env).stdout.strip()


def _has_docker() -> bool:
    from shutil import which

    return which("docker") is not None


@pytest.fixture(scope="session")
def imported(shared_cache, tmp_path_factory):
    """``imported(agent)``: the agent's test image exported from Docker and imported into the session's
    cache; returns (tag, StoredImage). One image is kept at a time (the tests of the group run one agent's
    tests together): the one before is removed before the next export, so the disk holds at most one unpacked
    image and one archive (about 16 GB) rather than every image imported so far beside the archive."""
    from pytest_rexmle.images import store

    done: dict[str, tuple] = {}
    engine_env = dict(os.environ)  # before a test hides the engine (DOCKER_HOST at a dead socket)

    def load(agent: str):
        if agent in done:
            return done[agent]
        with cache_home_at(shared_cache):
            for _, image in done.values():
                store.remove(image)
        done.clear()
        tag = agent_image(agent)
        require_service(_docker_saves(tag, engine_env), "REXMLE_REQUIRE_DOCKER", f"the Docker image {tag} (to export)")
        archive = tmp_path_factory.mktemp("export") / f"{agent}.tar"
        # what a user runs where Docker is (`rexmle images export`), then on the cluster (`rexmle images import`)
        exported = subprocess.run([sys.executable, "-m", "pytest_rexmle", "images", "export", "--agent", agent,
                                   "--tag", tag, str(archive)], capture_output=True, text=True, timeout=900,
                                  env=engine_env)
        assert exported.returncode == 0 and f"exported {tag}" in exported.stdout, exported.stderr
        imported = subprocess.run([sys.executable, "-m", "pytest_rexmle", "images", "import", "--tag", tag,
                                   str(archive)],
                                  capture_output=True, text=True, timeout=900,
                                  env={**engine_env, "REXMLE_CACHE_DIR": str(shared_cache)})
        assert imported.returncode == 0 and tag in imported.stdout, imported.stderr
        archive.unlink()
        with cache_home_at(shared_cache):
            image = store.find(tag)
        assert image is not None and image.digest == _engine_id(tag, engine_env)  # the id Docker shows
        done[agent] = (tag, image)
        return done[agent]

    yield load
    # the real images unpack to several GB each: gone with the session, not kept in pytest's last three temps
    with cache_home_at(shared_cache):
        for _, image in done.values():
            store.remove(image)
