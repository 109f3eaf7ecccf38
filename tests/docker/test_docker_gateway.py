"""``--rexmle-network=gateway`` on Docker: the agent's container shares the network namespace of a holder
container started with ``--network none``, in which the harness placed the gateway's listener before
the agent started. The same key-hunting agent as the local tests: it finds only the token, reaches the
gateway, and neither the host's loopback, the host's own address, a UDP service, the host's unix
sockets nor an abstract one; nothing of the run (holder included) survives it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

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
                       settings=DockerSettings(image=test_image), limits={"file_size": "1g", "tmp": "64m"})
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


IN_CONTAINER = r'''
import json, sys, tempfile
from pathlib import Path
sys.path.insert(0, "/repo")
from tests.sandbox.gateway_standin import StandInGateway, hunt_code
from pytest_rexmle.runtime.base import RunSpec
from pytest_rexmle.runtime.local import LocalRuntime

gateway = StandInGateway()
runtime = LocalRuntime(sandbox="landlock", gateway=lambda: gateway)
notices = runtime.network_notices("gateway")
root = Path(tempfile.mkdtemp(dir="/var/tmp"))
root.chmod(0o755)
for folder in ("public", "run/workspace", "run/submission", "run/logs"):
    (root / folder).mkdir(parents=True)
(root / "run/instructions.md").write_text("x")
(root / "run/workspace/agent.py").write_text(hunt_code({"tcp": [["127.0.0.1", 1], ["127.0.0.1", 8484]],
                                                        "unix": "/nonexistent", "abstract": "x", "dns": ["127.0.0.1", 9]}))
spec = RunSpec("t", [sys.executable, "agent.py"], {"OPENAI_API_KEY": "sk-real-in-container"}, root / "public",
               root / "run/workspace", root / "run/submission", root / "run/logs", root / "run/instructions.md", 60,
               network="gateway", secret_env=("OPENAI_API_KEY",))
outcome = runtime.run(runtime.stage(spec))
print(json.dumps({"notices": notices, "exit_code": outcome.exit_code, "details": outcome.details,
                  "stdout": outcome.stdout.read_text(), "stderr": outcome.stderr.read_text()[-2000:],
                  "loot": (root / "run/workspace/loot.txt").read_text()}))
'''


def test_landlock_gateway_in_an_ordinary_container(docker_client, test_image, tmp_path):
    """The README's fresh-machine case: a harness that is root in a default ``docker run`` container (no
    CAP_SYS_ADMIN, Docker's seccomp profile) cannot create a network namespace, so Landlock's agent gets
    the gateway's one TCP port on the container's loopback and nothing else."""
    import subprocess

    import landlockpy

    from pytest_rexmle.runtime.sandbox.landlock import abi
    from tests.conftest import REPO

    if abi() < 4:
        pytest.skip("Landlock's TCP rules need ABI 4 (this kernel lacks them)")
    script = tmp_path / "harness.py"
    script.write_text(IN_CONTAINER)
    # the binding where the image's python3 finds it in isolated mode (-I, as the sandbox starts agents' helpers)
    site = docker_client.containers.run(test_image, ["python3", "-c", "import sysconfig; print(sysconfig.get_paths()"
                                                     "['purelib'])"], remove=True).decode().strip()
    done = subprocess.run(["docker", "run", "--rm", "--network", "none", "-v", f"{REPO}:/repo:ro",
                           "-v", f"{Path(landlockpy.__file__).parent}:{site}/landlockpy:ro",
                           "-v", f"{script}:/harness.py:ro", "-e", "PYTHONPATH=/repo", "-e", "PYTHONDONTWRITEBYTECODE=1",
                           test_image, "python3", "/harness.py"], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["exit_code"] == 0, result["stderr"]
    assert len(result["notices"]) == 1 and "one port only" in result["notices"][0]
    assert result["details"]["gateway_confinement"] == "tcp-port" and result["details"]["network"] == "gateway"
    report = json.loads([line for line in result["stdout"].splitlines() if line.startswith("{")][-1])
    assert report["gateway"] == 200 and report["env_keys"]["OPENAI_API_KEY"].startswith("rexmle-standin-")
    assert set(report["tcp"].values()) == {"EACCES"}, report["tcp"]
    assert report["unix"] == report["abstract"] == "EAFNOSUPPORT" and report["udp_dns"] == "EPERM"
    assert "sk-real-in-container" not in result["loot"]
