"""``--rexmle-network=gateway`` on Docker: the agent's container shares the network namespace of a holder
container started with ``--network none``, in which the harness placed the gateway's listener before
the agent started. The same key-hunting agent as the local tests: it finds only the token, reaches the
gateway, and neither the host's loopback, the host's own address, a UDP service, the host's unix
sockets nor an abstract one; nothing of the run (holder included) survives it.
"""

from __future__ import annotations

import json
import os

import pytest

from pytest_rexmle.runtime.base import RunSpec, RuntimeUnavailable
from pytest_rexmle.runtime.docker import DockerRuntime, DockerSettings

from ..sandbox.gateway_standin import gateway_factory, hunt_code
from ..sandbox.test_gateway_network import REAL_KEY, check_confined, host_services  # noqa: F401 (a fixture)
from .conftest import session_containers


def test_agent_container_reaches_only_the_gateway(docker_client, test_image, session_id, tmp_path, host_services,  # noqa: F811
                                                  monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("the gateway's listener enters the container's namespace with setns: a root harness")
    targets, services = host_services
    monkeypatch.setenv("OPENAI_API_KEY", REAL_KEY)
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "agent.py").write_text(hunt_code(targets))
    for name in ("submission", "logs", "public", "private"):
        (tmp_path / name).mkdir()
    (tmp_path / "private" / "answers.csv").write_text("id,value\n1,42\n")
    (tmp_path / "instructions.md").write_text("x")
    spec = RunSpec("ldct-iqa", ["python3", "agent.py"], {"OPENAI_API_KEY": REAL_KEY}, tmp_path / "public",
                   tmp_path / "workspace", tmp_path / "submission", tmp_path / "logs", tmp_path / "instructions.md",
                   60, hidden=(tmp_path / "private",), network="gateway", secret_env=("OPENAI_API_KEY",))
    factory, standin = gateway_factory()
    rt = DockerRuntime(image=test_image, session=session_id, gateway=factory,
                       settings=DockerSettings(image=test_image, fsize="1g", tmp_size="64m"))
    outcome = rt.run(spec)
    stdout, stderr = outcome.stdout.read_text(), outcome.stderr.read_text()
    assert outcome.exit_code == 0, stderr[-2000:]
    report = json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])
    loot = (tmp_path / "workspace" / "loot.txt").read_text()
    check_confined(report, loot, standin.runs[0].token if standin else None, outcome.details, services)
    if standin is not None:
        assert report["gateway"] == 200 and standin.runs[0].paths == ["/rexmle/ping"]
    docker_json = json.loads((tmp_path / "logs" / "docker.json").read_text())
    assert docker_json["network_mode"].startswith("container:")
    assert REAL_KEY not in (tmp_path / "logs" / "docker.json").read_text()
    assert session_containers(docker_client, session_id) == []  # the agent's container and its holder


def test_gateway_on_docker_needs_a_root_harness(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(RuntimeUnavailable, match="needs a root harness"):
        DockerRuntime(client=object()).network_notices("gateway")
    assert DockerRuntime(client=object()).network_notices("none") == []
