"""Resource limits of the local runtime: each one, exceeded, ends the run as a FAIL naming the limit."""

from __future__ import annotations

import socket
import threading

import pytest

from .conftest import run_agent

PROCS_CODE = '''
import os, time
children = []
for _ in range(200):
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    children.append(pid)
print("forked", len(children))
'''


@pytest.mark.parametrize("name, value, code, label", [
    ("memory", "200M", "x = bytearray(700 * 2**20)\nprint(len(x))\n", "memory limit of 200 MiB exceeded"),
    ("processes", "40", PROCS_CODE, "process limit of 40 exceeded"),
    ("file_size", "10M", "open('big.bin', 'wb').write(b'0' * (20 * 2**20))\n", "file size limit of 10 MiB exceeded"),
])
def test_refused_resource_is_a_limit_named_in_the_outcome(tmp_path, mechanism, name, value, code, label):
    run = run_agent(tmp_path, mechanism, code, overrides={name: value}, time_limit=120)
    assert run.outcome.exit_code not in (0, None), (run.stdout, run.stderr[-2000:])
    assert run.outcome.details["limit_exceeded"] == name, (run.outcome.details, run.stderr[-2000:])
    assert run.outcome.killed.startswith(label), run.outcome.killed
    if name == "file_size":
        assert (run.root / "workspace" / "big.bin").stat().st_size <= 10 * 2**20


@pytest.mark.parametrize("name, where", [("disk", "os.environ['REXMLE_OUT']"), ("tmp", "os.environ['TMPDIR']")])
def test_disk_and_tmp_are_watched_and_the_run_killed_at_the_limit(tmp_path, mechanism, name, where):
    code = f'''
import os, time
folder = {where}
for i in range(400):
    with open(os.path.join(folder, f"chunk{{i}}"), "wb") as fh:
        fh.write(os.urandom(2**20))
    time.sleep(0.02)
print("wrote everything")
'''
    run = run_agent(tmp_path, mechanism, code.replace("os.environ['REXMLE_OUT']", "os.getcwd()"),
                    overrides={name: "40M"}, time_limit=120)
    assert run.outcome.exit_code is None and not run.outcome.timed_out
    assert run.outcome.details["limit_exceeded"] == name
    assert run.outcome.killed.startswith({"disk": "workspace disk", "tmp": "/tmp size"}[name] + " limit of 40 MiB exceeded")
    assert "wrote everything" not in run.stdout
    assert run.outcome.duration < 60


def test_limits_from_the_task_and_overrides_reach_the_agent(tmp_path, mechanism):
    from pytest_rexmle.limits import Limits

    code = '''
import json, resource
print(json.dumps({"fsize": resource.getrlimit(resource.RLIMIT_FSIZE)[0], "core": resource.getrlimit(resource.RLIMIT_CORE)[0]}))
'''
    run = run_agent(tmp_path, mechanism, code, limits=Limits(file_size=3 << 20), overrides={"processes": "77"})
    assert run.report() == {"fsize": 3 << 20, "core": 0}
    assert run.outcome.details["limits"]["file_size"] == 3 << 20 and run.outcome.details["limits"]["processes"] == 77


@pytest.fixture
def loopback_service():
    """A TCP service on the host's loopback that answers 'hello' (what --rexmle-network=none must hide)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.5)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.sendall(b"hello")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(2)
    server.close()


@pytest.mark.parametrize("network", ["host", "none"])
def test_network_host_reaches_loopback_and_none_reaches_nothing(tmp_path, mechanism, loopback_service, network):
    code = f'''
import errno, json, socket
out = {{}}
try:
    s = socket.create_connection(("127.0.0.1", {loopback_service}), timeout=5)
    out["tcp"] = s.recv(5).decode()
except OSError as exc:
    out["tcp"] = errno.errorcode.get(exc.errno, str(exc))
try:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.sendto(b"x", ("127.0.0.1", 9))
    out["udp"] = "sent"
except OSError as exc:
    out["udp"] = errno.errorcode.get(exc.errno, str(exc))
a, b = socket.socketpair()
a.sendall(b"ok")
out["socketpair"] = b.recv(2).decode()
print(json.dumps(out))
'''
    run = run_agent(tmp_path, mechanism, code, network=network)
    report = run.report()
    assert report["socketpair"] == "ok"  # local IPC keeps working
    if network == "host":
        assert report == {"tcp": "hello", "udp": "sent", "socketpair": "ok"}
    else:
        assert report["tcp"] != "hello" and report["udp"] != "sent", report
        assert run.outcome.details["network"] == "none"


def test_cgroups_of_a_dead_session_are_swept():
    import subprocess

    from pytest_rexmle.limits import Limits
    from pytest_rexmle.runtime.sandbox.limits import RunCgroup, sweep_cgroups

    dead = subprocess.Popen(["true"])
    dead.wait()
    group = RunCgroup.create(f"rexmle-{dead.pid}-swept", Limits())
    if group is None:
        pytest.skip("no writable cgroup v2 hierarchy here")
    folders = [group.path, *group.legacy.values()]
    assert all(f.is_dir() for f in folders)
    assert sweep_cgroups() >= len(folders)
    assert not any(f.exists() for f in folders)
