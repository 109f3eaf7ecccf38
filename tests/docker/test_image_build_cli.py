"""``rexmle images build --agent base`` as the README types it (step 3).

The base recipe's folder is ``common/``, the folder every context also carries for the shared start-script
helpers: assembling its context copied ``common/`` twice and stopped with ``FileExistsError`` before the
engine saw anything. The context test needs no engine; the CLI test gives the real command an unreachable
``TORCH_IMAGE`` so the engine fails at ``FROM`` within a second instead of downloading several GB.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO


def test_every_recipe_context_holds_its_dockerfile_and_the_shared_helpers(tmp_path):
    from pytest_rexmle.agents.image_build import RECIPES, build_context, recipes_root

    for name, recipe in RECIPES.items():
        context = build_context(recipes_root(), recipe, tmp_path / name)
        assert (context / recipe.dockerfile).is_file(), name
        assert (context / "common" / "rexmle_adapter.py").is_file(), name
        assert (context / "extra-ca.pem").read_bytes() == b"", name
    base = tmp_path / "base"
    assert sorted(p.name for p in base.iterdir()) == ["common", "extra-ca.pem"]


def _images_build(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_rexmle", "images", "build", *args,
                           "--build-arg", "TORCH_IMAGE=rexmle/absent-torch-base:never"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)


def test_images_build_base_reaches_the_engine(docker_client):
    done = _images_build("--agent", "base")
    assert "FileExistsError" not in done.stderr + done.stdout, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 1, done.stderr
    # the engine ran the recipe up to its FROM line: the context was assembled and sent
    assert "FROM ${TORCH_IMAGE}" in done.stdout
    assert "building rexmle/base:latest failed" in done.stderr


def test_images_build_aide_builds_a_missing_base_through_the_same_context(docker_client):
    from pytest_rexmle.agents.image_build import BASE_TAG, local_image

    if local_image(docker_client, BASE_TAG) is not None:  # it would build the real aide image: not cheap
        pytest.skip(f"{BASE_TAG} is built here: `--agent aide` would not build the base first")
    done = _images_build("--agent", "aide")
    assert "FileExistsError" not in done.stderr + done.stdout, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"{BASE_TAG} is missing; building it first" in done.stderr
    assert "building rexmle/base:latest failed" in done.stderr
    assert done.returncode == 1


def test_an_image_built_on_demand_shows_the_builds_own_steps_with_the_elapsed_time(docker_client, aide_image,
                                                                                   test_image):
    """The aide recipe on the offline test base, under a tag of its own (the layers are the fixture's cache)."""
    import re
    import uuid

    from pytest_rexmle.agents.image_build import RECIPES
    from pytest_rexmle.agents.image_ready import _build

    tag = f"rexmle/test-on-demand:{uuid.uuid4().hex[:8]}"
    lines: list[str] = []
    try:
        ca = "/etc/ssl/certs/ca-certificates.crt"  # as the fixture built it, so every layer is its cache
        _build(docker_client, RECIPES["aide"], "aide", lines.append, base=test_image, tag=tag,
               ca_bundle=ca if Path(ca).is_file() else None)
        assert docker_client.images.get(tag).labels.get("rexmle.recipe")
    finally:
        docker_client.images.remove(tag, noprune=False)
    assert lines[0].startswith(f"rexmle: building {tag} for agent 'aide' (recipe pytest_rexmle/agents/aide/Dockerfile)")
    steps = [line for line in lines if re.match(r"rexmle: \[ *\d+\.\d s\] Step \d+/\d+ : ", line)]
    assert len(steps) >= 3 and any("FROM" in line for line in steps)
    assert re.fullmatch(rf"rexmle: built {re.escape(tag)} in \d+ s", lines[-1])
    assert len(lines) == len(steps) + 2  # the steps' own output (pip's) stays out of the terminal


def test_a_base_the_engine_cannot_fetch_lists_the_ways_on(docker_client):
    """Without Docker Hub the build used to end with the engine's raw DNS error and no next step; the error is
    kept (it says why) and the ways on follow, naming the agent asked for: ``docker load``, ``--base``, a
    registry mirror, ``rexmle images import``."""
    torch = "nonexistent.invalid/pytorch/pytorch:1"  # a registry host that does not resolve: no Docker Hub
    done = subprocess.run([sys.executable, "-m", "pytest_rexmle", "images", "build", "--agent", "base", "--agent",
                           "aide", "--build-arg", f"TORCH_IMAGE={torch}"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 1, done.stderr
    err = done.stderr
    assert "building rexmle/base:latest failed" in err and "nonexistent.invalid" in err
    assert f"this Docker engine does not have {torch} and could not fetch it (above); ways on:" in err
    routes = [line for line in err.splitlines() if line.startswith("  - ")]
    assert len(routes) == 4, err
    assert f"`docker save {torch} -o base.tar`, here `docker load -i base.tar`" in routes[0]
    assert "`rexmle images build --agent aide --base IMAGE`" in routes[1]
    assert "registry-mirrors" in routes[2] and "/etc/docker/daemon.json" in routes[2]
    assert "`rexmle images export --agent aide FILE`; here `rexmle images import FILE`" in routes[3]
    assert "NAME" not in err and "Traceback" not in err
