"""``--rexmle-network=gateway``: the agent's only peer is the gateway's listener in its own namespace.

Under bubblewrap and Landlock, with the harness as root and as uid 65534, an agent that hunts for the
real key (its environment, every ``/proc/*/environ`` and ``cmdline`` it can read, its files) finds only
the run's token; it reaches the gateway, and nothing else: not a TCP service on the host's 127.0.0.1
(a stand-in provider) or on the host's own address, not a UDP service (a stand-in DNS server), not a
pathname unix socket of the host (a stand-in for munged's, under ``/run``), not an abstract one.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from pytest_rexmle.limits import Limits
from pytest_rexmle.runtime.base import RunSpec, RuntimeUnavailable
from pytest_rexmle.runtime.local import LocalRuntime
from pytest_rexmle.runtime.sandbox import gateway_net

from .conftest import require_mechanism
from .gateway_standin import UdpResponder, UnixService, gateway_factory, host_address, hunt_code, real_host_services
from .standin import TokenServer
from .test_unprivileged import NOBODY, unprivileged_site  # noqa: F401 (a fixture)

REAL_KEY = "sk-rexmle-REAL-" + "9f2c" * 8


@pytest.fixture
def host_services():
    """The host's services an agent must not reach, and the hunt's targets naming them."""
    provider, everywhere = TokenServer("127.0.0.1"), TokenServer("0.0.0.0")
    munge, abstract, dns = UnixService(), UnixService(abstract=True), UdpResponder()
    real_tcp, real_unix = real_host_services()
    targets = {"tcp": [["127.0.0.1", provider.port], [host_address(), everywhere.port], *real_tcp],
               "unix": munge.address, "abstract": abstract.address, "dns": list(dns.address), "unix_extra": real_unix}
    try:
        yield targets, (provider, everywhere, munge, abstract, dns)
    finally:
        for service in (provider, everywhere, munge, abstract, dns):
            service.close()


#: the agent's interpreter: the system's, which every run's uid can start (not this harness's venv, which
#: a Landlock agent's uid may not reach: the session would refuse it, as it should)
AGENT_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


#: the hunt tries every route out, each until it is refused or times out: on a loaded 2-core machine (a whole
#: test suite beside it) that once took past 60 s, which cut the run before it reported
HUNT_SECONDS = 180


def make_run(root: Path, code: str, network: str = "gateway") -> RunSpec:
    public = root / "data" / "public"
    for folder in (public, root / "run" / "workspace", root / "run" / "submission", root / "run" / "logs"):
        folder.mkdir(parents=True)
    (root / "run" / "instructions.md").write_text("do the task\n")
    (root / "run" / "workspace" / "agent.py").write_text(code)
    run = root / "run"
    return RunSpec("net-test", [AGENT_PYTHON, "agent.py"], {"OPENAI_API_KEY": REAL_KEY, "REXMLE_TASK": "net-test"},
                   public, run / "workspace", run / "submission", run / "logs", run / "instructions.md",
                   HUNT_SECONDS,
                   network=network, secret_env=("OPENAI_API_KEY",), limits=Limits())


def check_confined(report: dict, loot: str, token: str | None, outcome_details: dict, services) -> None:
    """Everything a confined agent must see, whoever ran the harness."""
    assert REAL_KEY not in loot, "the real key reached the sandbox"
    if token is not None:  # the stand-in's token (the real gateway's is its own secret)
        assert report["env_keys"]["OPENAI_API_KEY"] == token and token in loot
    assert report["env_keys"]["OPENAI_API_KEY"] not in (None, REAL_KEY)
    assert report["gateway"] == 200 or isinstance(report["gateway"], int), report["gateway"]
    for target, result in report["tcp"].items():
        # refused by the kernel: no route (own namespace) or Landlock's TCP rule (the one-port fallback)
        assert result in ("ECONNREFUSED", "ENETUNREACH", "EACCES", "EPERM"), (target, result)
    assert report["unix"] in ("ENOENT", "EAFNOSUPPORT"), report["unix"]
    for path, result in report.get("unix_extra", {}).items():  # munged's, MariaDB's, Docker's, D-Bus's
        assert result in ("ENOENT", "EAFNOSUPPORT"), (path, result)
    assert report["abstract"] in ("ECONNREFUSED", "EAFNOSUPPORT", "EPERM"), report["abstract"]
    assert report["dns"] == "gaierror" and report["udp_dns"] in ("ENETUNREACH", "ECONNREFUSED", "TimeoutError",
                                                                "EPERM"), report  # EPERM: seccomp's TCP-only rule
    provider, everywhere, munge, abstract, dns = services
    assert munge.accepted == abstract.accepted == dns.received == 0
    assert outcome_details["network"] == "gateway"


@pytest.mark.parametrize("mechanism", ["bwrap", "landlock"])
def test_agent_reaches_only_the_gateway(tmp_path, mechanism, host_services, monkeypatch):
    require_mechanism(mechanism)
    targets, services = host_services
    monkeypatch.setenv("OPENAI_API_KEY", REAL_KEY)  # in the harness's own environment too, as in real use
    factory, standin = gateway_factory()
    runtime = LocalRuntime(sandbox=mechanism, gateway=factory)
    spec = make_run(tmp_path, hunt_code(targets))
    outcome = runtime.run(runtime.stage(spec))
    stdout, stderr = outcome.stdout.read_text(), outcome.stderr.read_text()
    assert outcome.exit_code == 0, stderr[-2000:]
    report = json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])
    loot = (spec.workspace / "loot.txt").read_text()
    token = standin.runs[0].token if standin else None
    check_confined(report, loot, token, outcome.details, services)
    assert report["proc_read"] > 0  # the hunt did read its own /proc entries
    if standin is not None:
        assert report["gateway"] == 200 and standin.runs[0].paths == ["/rexmle/ping"]
        assert outcome.details["usage"] == {"requests": 1, "source": "gateway"}
    assert "usage" in outcome.details and "egress" in outcome.details
    assert REAL_KEY not in stdout + stderr


def test_landlock_agent_has_no_unix_sockets_but_socketpair(tmp_path):
    """Landlock leaves the host's /run visible: socket(AF_UNIX) is refused, socketpair() still works."""
    require_mechanism("landlock")
    code = ("import socket, errno, json\nout = {}\n"
            "try:\n    socket.socket(socket.AF_UNIX); out['socket'] = 'made'\n"
            "except OSError as e:\n    out['socket'] = errno.errorcode[e.errno]\n"
            "a, b = socket.socketpair(); a.send(b'x'); out['pair'] = b.recv(1).decode()\nprint(json.dumps(out))\n")
    factory, _ = gateway_factory()
    runtime = LocalRuntime(sandbox="landlock", gateway=factory)
    for network in ("gateway", "none", "host"):
        spec = make_run(tmp_path / network, code, network=network)
        outcome = runtime.run(runtime.stage(spec))
        assert outcome.exit_code == 0, outcome.stderr.read_text()[-2000:]
        last = [line for line in outcome.stdout.read_text().splitlines() if line.startswith("{")][-1]
        assert json.loads(last) == {"socket": "EAFNOSUPPORT", "pair": "x"}, network


def test_listener_hand_over_refuses_a_dead_sandbox():
    """A sandbox that dies before making its listener gives a clear error, not a hang."""
    import subprocess

    channel = gateway_net.ListenerChannel()
    try:
        proc = subprocess.Popen(["true"], pass_fds=(channel.child_fd,))
        proc.wait()
        with pytest.raises(gateway_net.GatewayNetworkError, match="before it made the gateway listener"):
            channel.receive(proc, timeout=5)
    finally:
        channel.close()


def test_landlock_without_namespace_or_tcp_rules_refuses_to_start(monkeypatch):
    require_mechanism("landlock")
    monkeypatch.setattr("pytest_rexmle.runtime.local._own_netns", (False, "unshare: Operation not permitted"))
    monkeypatch.setattr("pytest_rexmle.runtime.sandbox.landlock.abi", lambda: 3)
    runtime = LocalRuntime(sandbox="landlock", gateway=gateway_factory()[0])
    spec = RunSpec("t", ["true"], {}, Path("/nonexistent"), Path("/nonexistent/w"), Path("/nonexistent/s"),
                   Path("/nonexistent/l"), Path("/nonexistent/i"), 10, network="gateway")
    with pytest.raises(RuntimeUnavailable, match="needs a network namespace for the agent or Landlock's TCP"):
        runtime.network(spec)
    with pytest.raises(RuntimeUnavailable, match="unshare: Operation not permitted"):
        runtime.network_notices("gateway")


def test_landlock_without_a_namespace_reaches_only_the_gateways_port(tmp_path, host_services, monkeypatch):
    """No network namespace to be had (a default Docker container, user namespaces off): the agent may
    connect to the gateway's port on the host's loopback and nowhere else, with no UDP, raw or unix socket."""
    require_mechanism("landlock")
    monkeypatch.setattr("pytest_rexmle.runtime.local._own_netns", (False, "unshare: Operation not permitted"))
    targets, services = host_services
    monkeypatch.setenv("OPENAI_API_KEY", REAL_KEY)
    factory, standin = gateway_factory()
    runtime = LocalRuntime(sandbox="landlock", gateway=factory)
    assert "one port only" in runtime.network_notices("gateway")[0]
    spec = make_run(tmp_path, hunt_code(targets))
    outcome = runtime.run(runtime.stage(spec))
    stdout, stderr = outcome.stdout.read_text(), outcome.stderr.read_text()
    assert outcome.exit_code == 0, stderr[-2000:]
    report = json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])
    assert outcome.details["gateway_confinement"] == "tcp-port" and outcome.details["network"] == "gateway"
    assert REAL_KEY not in (spec.workspace / "loot.txt").read_text()
    assert isinstance(report["gateway"], int)  # the gateway answered (the stand-in 200, the real one 404)
    assert set(report["tcp"].values()) == {"EACCES"}, report["tcp"]  # Landlock's connect rule
    assert report["unix"] == report["abstract"] == "EAFNOSUPPORT"
    assert set(report["unix_extra"].values()) <= {"EAFNOSUPPORT"}, report["unix_extra"]
    assert report["udp_dns"] == "EPERM" and report["dns"] == "gaierror"
    provider, everywhere, munge, abstract, dns = services
    assert munge.accepted == abstract.accepted == dns.received == 0


# -- the harness as uid 65534 ----------------------------------------------------------------------------
UNPRIVILEGED_HARNESS = r'''
import json, os, sys, tempfile
from pathlib import Path
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gateway_standin import StandInGateway
from pytest_rexmle.runtime.base import RunSpec
from pytest_rexmle.runtime.local import LocalRuntime

mechanism, code, key = sys.argv[1], open(sys.argv[2]).read(), os.environ["OPENAI_API_KEY"]
root = Path(tempfile.mkdtemp(prefix="rexmle-unpriv-gw-"))
public = root / "data" / "public"
for folder in (public, root / "workspace", root / "submission", root / "logs"):
    folder.mkdir(parents=True)
(root / "instructions.md").write_text("do the task\n")
(root / "workspace" / "agent.py").write_text(code)
gateway = StandInGateway()
python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
spec = RunSpec("unpriv-gw", [python, "agent.py"], {"OPENAI_API_KEY": key}, public, root / "workspace",
               root / "submission", root / "logs", root / "instructions.md", 60, network="gateway",
               secret_env=("OPENAI_API_KEY",))
runtime = LocalRuntime(sandbox=mechanism, gateway=lambda: gateway, unsafe_same_uid=mechanism == "landlock")  # the network is tested here; same-uid Landlock is refused by default (tests/sandbox/test_unprivileged.py)
outcome = runtime.run(runtime.stage(spec))
print(json.dumps({"details": outcome.details, "exit_code": outcome.exit_code, "stdout": outcome.stdout.read_text(),
                  "stderr": outcome.stderr.read_text()[-3000:], "root": str(root), "token": gateway.runs[0].token,
                  "loot": (root / "workspace" / "loot.txt").read_text() if (root / "workspace" / "loot.txt").exists() else "",
                  "paths": gateway.runs[0].paths}))
'''


@pytest.fixture(scope="module")
def unprivileged_gateway_site(unprivileged_site):  # noqa: F811
    python, setpriv, site = unprivileged_site
    shutil.copy(Path(__file__).parent / "gateway_standin.py", site / "gateway_standin.py")
    (site / "gateway_harness.py").write_text(UNPRIVILEGED_HARNESS)
    for name in ("gateway_standin.py", "gateway_harness.py"):
        (site / name).chmod(0o644)
    return python, setpriv, site


@pytest.mark.parametrize("mechanism", ["bwrap", "landlock"])
def test_unprivileged_harness_agent_reaches_only_the_gateway(unprivileged_gateway_site, mechanism, host_services):
    import subprocess

    require_mechanism(mechanism)
    python, setpriv, site = unprivileged_gateway_site
    targets, services = host_services
    code = site / f"hunt_{mechanism}.py"
    code.write_text(hunt_code(targets))
    code.chmod(0o644)
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "PYTHONPATH": str(site), "LANG": "C.UTF-8",
           "OPENAI_API_KEY": REAL_KEY}  # the harness's environment, as in real use (never a command line)
    done = subprocess.run([setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", python,
                           str(site / "gateway_harness.py"), mechanism, str(code)],
                          capture_output=True, text=True, env=env, cwd="/", timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    try:
        assert result["exit_code"] == 0, result["stderr"]
        assert result["details"]["agent_uid"] == NOBODY
        report = json.loads([line for line in result["stdout"].splitlines() if line.startswith("{")][-1])
        check_confined(report, result["loot"], result["token"], result["details"], services)
        assert report["gateway"] == 200 and result["paths"] == ["/rexmle/ping"]
    finally:
        subprocess.run([setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "rm", "-rf",
                        result["root"]], capture_output=True, timeout=60)



# -- through the real gateway: the provider gets the real key, the agent only the token; data hosts refused --
CHAT = r'''
import json, os, socket, urllib.request
out = {}
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", method="POST",
                             data=json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}).encode(),
                             headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
out["chat"] = json.loads(urllib.request.urlopen(req, timeout=20).read())["choices"][0]["message"]["content"]
s = socket.socket(); s.settimeout(3)
try:
    s.connect(("127.0.0.1", PROVIDER_PORT)); out["direct"] = "connected"
except OSError as exc:
    out["direct"] = type(exc).__name__
try:
    out["zenodo"] = urllib.request.urlopen("https://zenodo.org/api/records/1", timeout=10).status
except OSError as exc:
    out["zenodo"] = str(getattr(exc, "reason", exc))[:200]
print(json.dumps(out))
'''


@pytest.mark.parametrize("mechanism", ["bwrap", "landlock"])
def test_real_gateway_swaps_the_key_meters_and_refuses_data_hosts(tmp_path, mechanism):
    from .gateway_standin import StandInProvider, require_real_gateway

    require_mechanism(mechanism)
    require_real_gateway()
    from pytest_rexmle.gateway import Gateway

    provider = StandInProvider()
    try:
        gateway = Gateway(environ={"OPENAI_API_KEY": REAL_KEY, "OPENAI_BASE_URL": provider.base_url})
        runtime = LocalRuntime(sandbox=mechanism, gateway=lambda: gateway, unsafe_same_uid=mechanism == "landlock")  # the network is tested here; same-uid Landlock is refused by default (tests/sandbox/test_unprivileged.py)
        spec = make_run(tmp_path, f"PROVIDER_PORT = {provider.port}\n{CHAT}")
        outcome = runtime.run(runtime.stage(spec))
        gateway.close()
    finally:
        provider.close()
    stdout = outcome.stdout.read_text()
    assert outcome.exit_code == 0, outcome.stderr.read_text()[-2000:]
    report = json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])
    assert report["chat"] == StandInProvider.ANSWER
    assert provider.authorizations == [f"Bearer {REAL_KEY}"]  # only the gateway's call, with the real key
    assert report["direct"] in ("ConnectionRefusedError", "PermissionError")  # no route, or Landlock's port rule
    assert "403" in report["zenodo"], report["zenodo"]
    details = outcome.details
    assert details["network"] == "gateway" and details["usage"]["requests"] == 1
    assert details["usage"]["input_tokens"] == 11 and details["usage"]["output_tokens"] == 7
    refused = [e for e in details["egress"] if e["host"] == "zenodo.org"]
    assert refused and refused[0]["allowed"] is False and refused[0]["port"] == 443
    calls = (spec.logs / "model-calls.jsonl").read_text()
    assert REAL_KEY not in calls and StandInProvider.ANSWER in calls


@pytest.mark.slow  # a session of several sandboxed runs
def test_bridge_warnings_once_per_session_and_the_network_in_run_json(bench):
    """``bridge`` is an explicit choice: its warnings (answers downloadable; Landlock's fallback to the
    host's network) appear once per session, not once per xdist worker, and run.json says what ran."""
    require_mechanism("landlock")
    result = bench("--agent=sample", "-n", "2", "-k", "ldct-iqa or isles22", "--rexmle-network=bridge",
                   "--rexmle-sandbox=landlock", "-W", "always::UserWarning")
    result.assert_outcomes(passed=2)
    out = result.stdout.str() + result.stderr.str()
    assert out.count("test labels included, is downloadable") == 1, out[-3000:]
    assert out.count("runs the local agents on the host's network") == 1, out[-3000:]
    runs = sorted((bench.path / ".rexmle" / "runs").glob("*/*/*/run.json"))
    assert len(runs) == 2 and {json.loads(p.read_text())["network"] for p in runs} == {"host"}
