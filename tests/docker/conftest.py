"""Fixtures of the Docker runtime tests.

An engine is required on CI (``REXMLE_REQUIRE_DOCKER=1``, set by .ci/run after .ci/docker-setup.sh):
then a missing engine or test image FAILS; on a developer machine without Docker these tests skip.
The images are the real ones the README's ``rexmle images build --agent NAME`` makes (``rexmle/base:latest``,
``rexmle/<agent>:latest``): CI builds them beforehand (.ci/build-agent-images.sh, with Docker Hub's PyTorch
image answered by the loopback registry mirror of .ci/registry-mirror.sh); a fixture builds what is missing
the same way (a no-op when the tag carries its recipe's hash), under a file lock so xdist workers build once.
"""

from __future__ import annotations

import ipaddress
import os
import uuid
from pathlib import Path

import pytest

from ..conftest import REPO, require_service

#: the docker runtime's default image, the real base recipe's (agents/common/Dockerfile)
TEST_IMAGE = "rexmle/base:latest"
#: the ML-Master source CI builds from: its GitHub is unreachable here, so the stand-in is the source
ML_MASTER_SOURCE = Path(os.environ.get("REXMLE_ML_MASTER_SOURCE") or Path(__file__).resolve().parent / "ml_master_standin")
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


def agent_image(name: str, docker_client, tmp_path_factory) -> str:
    """``rexmle images build --agent NAME`` as the README gives it: the real recipe, its real tag, on the real
    base (built first when missing); ML-Master from ``ML_MASTER_SOURCE``. Fails (CI) or skips with the build's
    last lines when it cannot be built here."""
    from pytest_rexmle.agents.image_build import RECIPES, build_image
    from pytest_rexmle.errors import RexmleError

    ca = "/etc/ssl/certs/ca-certificates.crt"
    names = [name] if name == "base" else ["base", name]

    def build():
        try:
            for each in names:
                build_image(each, client=docker_client, ca_bundle=ca if Path(ca).is_file() else None,
                            source=ML_MASTER_SOURCE if RECIPES[each].takes_source else None, log=lambda line: None)
        except RexmleError as exc:
            require_service(False, "REXMLE_REQUIRE_DOCKER", f"the image {RECIPES[name].tag} ({str(exc)[-500:]})")

    _locked_build(tmp_path_factory, "agent-images", build)  # one at a time: they share rexmle/base
    return RECIPES[name].tag


@pytest.fixture(scope="session")
def test_image(docker_client, tmp_path_factory) -> str:
    """rexmle/base:latest, the image the docker runtime starts for agents without their own."""
    return agent_image("base", docker_client, tmp_path_factory)


@pytest.fixture(scope="session")
def aide_image(test_image, docker_client, tmp_path_factory) -> str:
    """rexmle/aide:latest: agents/aide/Dockerfile on the real base, the real aideml."""
    return agent_image("aide", docker_client, tmp_path_factory)


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


def description_line(twin) -> str:
    """The first line of the task's description, which every agent's prompt must quote."""
    return next(line for line in (twin.public / "description.md").read_text().splitlines() if line.strip())


def assert_no_file_holds(run: Path, *secrets: str, largest: int = 5_000_000) -> None:
    """The provider key (or another secret) reached the scripted server only: no file of the run folder
    (below ``largest`` bytes) holds it."""
    for path in run.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.stat().st_size < largest:
            for secret in secrets:
                assert secret.encode() not in path.read_bytes(), path


def bridge_gateway(client) -> str:
    """The host's address on Docker's default bridge: where a container reaches a scripted provider."""
    config = client.networks.get("bridge").attrs["IPAM"]["Config"][0]
    return config.get("Gateway") or str(next(ipaddress.ip_network(config["Subnet"]).hosts()))


def point_openai_at(llm, key: str, client, monkeypatch) -> None:
    """The agent's OpenAI variables (key and base URL) aimed at the scripted ``llm`` on the host."""
    monkeypatch.setenv("OPENAI_API_KEY", key)
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://{bridge_gateway(client)}:{llm.port}/v1")


def assert_atif_is_the_meters(run: Path, meta: dict) -> None:
    """The run's trajectory.atif.json validates against ATIF v1.7's rules and, where the gateway metered the
    run, its totals are the meter's (prompt, completion and cached tokens)."""
    from pytest_rexmle.report.atif import load

    trajectory = load(run / "trajectory.atif.json")
    usage = meta.get("usage") or {}
    if usage.get("source") == "gateway":
        final = trajectory.final_metrics
        assert (final.total_prompt_tokens, final.total_completion_tokens, final.total_cached_tokens) == \
            (usage["input_tokens"], usage["output_tokens"], usage["cached_tokens"]), (final, usage)
