"""``rexmle images build --agent base`` as the README types it (step 3).

The base recipe's folder is ``common/``, the folder every context also carries for the shared start-script
helpers: assembling its context copied ``common/`` twice and stopped with ``FileExistsError`` before the
engine saw anything. The context test needs no engine; the CLI test gives the real command an unreachable
``TORCH_IMAGE`` so the engine fails at ``FROM`` within a second instead of downloading several GB.
"""

from __future__ import annotations

import subprocess
import sys

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

    has_base = local_image(docker_client, BASE_TAG) is not None
    done = _images_build("--agent", "aide")
    assert "FileExistsError" not in done.stderr + done.stdout, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    if not has_base:
        assert f"{BASE_TAG} is missing; building it first" in done.stderr
        assert "building rexmle/base:latest failed" in done.stderr
        assert done.returncode == 1
