"""Nothing outlives a run: time limit, harness SIGTERM, orphans of dead sessions; GPUs pinned per worker."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from pytest_rexmle.runtime import staging
from pytest_rexmle.runtime.docker import DockerRuntime, DockerSettings

from ..conftest import AGENTS, REPO, run_folders
from .conftest import session_containers


def test_time_limit_kills_the_container_and_is_a_fail(docker_bench, docker_client, session_id):
    marker = f"sleeper-{uuid.uuid4().hex[:8]}"
    start = time.monotonic()
    result = docker_bench("--agent=command", f"--agent-option=dir={AGENTS / 'sleeper'}",
                          f"--agent-option=cmd=python agent.py {marker}", "--rexmle-time-limit=3", "-k", "ldct-iqa")
    elapsed = time.monotonic() - start
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*FAIL [[]timeout[]] time limit of 3 s exceeded*"])
    assert elapsed < 30, elapsed
    run = run_folders(docker_bench.path, "ldct-iqa")[-1]
    record = json.loads((run / "result.json").read_text())
    assert record["status"] == "timeout" and 3.0 <= record["timings"]["agent_seconds"] < 10.0
    assert f"sleeper {marker}: children started" in (run / "logs" / "agent.stdout.log").read_text()
    assert session_containers(docker_client, session_id) == []


def test_orphan_sweep_removes_containers_of_dead_harnesses(docker_client, test_image):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    labels = {"rexmle": "1", "rexmle.session": f"orphan-{uuid.uuid4().hex[:8]}", "rexmle.host": os.uname().nodename}
    orphan = docker_client.containers.run(test_image, ["sleep", "600"], detach=True,
                                          labels={**labels, "rexmle.pid": str(dead.pid)})
    alive = docker_client.containers.run(test_image, ["sleep", "600"], detach=True,
                                         labels={**labels, "rexmle.pid": str(os.getpid())})
    try:
        removed = DockerRuntime(image=test_image).sweep_orphans()
        assert removed >= 1
        left = {c.id for c in session_containers(docker_client, labels["rexmle.session"])}
        assert orphan.id not in left and alive.id in left  # a live harness keeps its container
    finally:
        for c in (orphan, alive):
            try:
                c.remove(force=True)
            except Exception:
                pass


def test_orphan_sweep_skips_a_container_another_session_removed_meanwhile(docker_client, test_image, monkeypatch):
    # two sessions starting on one host sweep at once: one removes an orphan between the other's listing and
    # its inspection of that container, which must not stop the second session's start
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    labels = {"rexmle": "1", "rexmle.session": f"orphan-{uuid.uuid4().hex[:8]}", "rexmle.host": os.uname().nodename,
              "rexmle.pid": str(dead.pid)}
    gone = docker_client.containers.run(test_image, ["sleep", "600"], detach=True, labels=labels)
    runtime = DockerRuntime(image=test_image)
    inspect = runtime.client.api.inspect_container

    def removed_meanwhile(container_id, *args, **kwargs):
        if container_id == gone.id:
            docker_client.api.remove_container(gone.id, force=True)
        return inspect(container_id, *args, **kwargs)

    monkeypatch.setattr(runtime.client.api, "inspect_container", removed_meanwhile)
    try:
        runtime.sweep_orphans()      # before the fix: docker.errors.NotFound out of the session's configure
        assert gone.id not in {c.id for c in session_containers(docker_client, labels["rexmle.session"])}
    finally:
        try:
            gone.remove(force=True)
        except Exception:
            pass


def test_sigterm_to_pytest_mid_run_removes_the_container(bench, test_image, docker_client, session_id):
    env = {**os.environ, "REXMLE_DOCKER_IMAGE": test_image, "REXMLE_SESSION": session_id,
           "PYTHONPATH": str(REPO)}
    marker = f"sleeper-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.docker._wiring", "--rexmle-data=synthetic",
         "--rexmle-runtime=docker", "--rexmle-limit=cpus=1", "--agent=command", f"--agent-option=dir={AGENTS / 'sleeper'}",
         f"--agent-option=cmd=python agent.py {marker}", "-k", "ldct-iqa"],
        cwd=bench.path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not [c for c in session_containers(docker_client, session_id) if c.status == "running"]:
            assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read().decode()[-2000:]
            time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert session_containers(docker_client, session_id) == [], out.decode()[-2000:]


def test_two_xdist_workers_get_distinct_gpus(docker_bench, docker_client, session_id):
    """Each worker's container requests its own GPU. This engine has no NVIDIA runtime, so the engine
    refuses to *start* them (a harness error, not an agent FAIL); the requests are read back from the
    created containers (logs/docker.json is written from ``docker inspect`` before the start)."""
    result = docker_bench("-n", "2", "--rexmle-gpus=0,1", "--agent=sample", "-k", "ldct-iqa or isles22",
                          timeout=300)
    outcomes = result.parseoutcomes()
    has_gpu_runtime = "nvidia" in (docker_client.info().get("Runtimes") or {})
    if has_gpu_runtime:
        assert outcomes.get("passed") == 2, outcomes
    else:
        assert outcomes.get("error") in (2, None) or outcomes.get("errors") == 2, outcomes
        result.stdout.fnmatch_lines(["*could not start*"])
    requested = []
    for task in ("ldct-iqa", "isles22"):
        [run] = run_folders(docker_bench.path, task)
        record = json.loads((run / "logs" / "docker.json").read_text())
        [request] = record["device_requests"]
        assert request["Capabilities"] == [["gpu"]]
        requested.append(tuple(request["DeviceIDs"]))
        assert json.loads((run / "run.json").read_text())["gpus"] == list(request["DeviceIDs"])
    assert sorted(requested) == [("0",), ("1",)]
    assert session_containers(docker_client, session_id) == []


# -- the container's own limits ----------------------------------------------------------------------------

#: the killed harness's host name on its container's label: the orphan is this test's to watch and sweep, not
#: a concurrent session's (every session sweeps this host's orphans when it starts, as it should)
ISOLATED_HOST = "rexmle-lifecycle-test"
HARNESS = """
import socket, sys, tempfile
socket.gethostname = lambda: %r
from pathlib import Path
from pytest_rexmle.runtime.base import RunSpec
from pytest_rexmle.runtime.docker import DockerRuntime
t = Path(tempfile.mkdtemp())
for s in ("workspace", "submission", "logs", "public"):
    (t / s).mkdir()
(t / "instructions.md").write_text("x")
spec = RunSpec("ldct-iqa", ["sleep", "1000"], {}, t / "public", t / "workspace", t / "submission", t / "logs",
               t / "instructions.md", float(sys.argv[2]))
DockerRuntime(image=sys.argv[1]).run(spec)
""" % ISOLATED_HOST  # noqa: UP031 - a Python template


def test_container_stops_itself_at_its_limit_when_the_harness_is_sigkilled(docker_client, test_image, session_id,
                                                                           monkeypatch):
    """kill -9 of the harness leaves no finally to run; `timeout -s KILL` inside ends the container at
    limit + grace (here 4 s + 2 s) on its own, and the exited container is the next sweep's."""
    limit, grace = 4, 2
    env = {**os.environ, "REXMLE_SESSION": session_id, "REXMLE_DOCKER_GRACE": str(grace), "PYTHONPATH": str(REPO)}
    harness = subprocess.Popen([sys.executable, "-c", HARNESS, test_image, str(limit)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not [c for c in session_containers(docker_client, session_id) if c.status == "running"]:
            assert time.monotonic() < deadline and harness.poll() is None
            time.sleep(0.2)
        started = time.monotonic()
        harness.send_signal(signal.SIGKILL)
        harness.wait()
        [container] = session_containers(docker_client, session_id)
        assert container.status == "running"  # nothing on the host stopped it
        run_dir = Path(container.labels["rexmle.run_dir"])  # the run folder, whose folders sit in the stage
        assert not (run_dir / "workspace").exists() and (run_dir / "stage.json").exists()
        while container.status == "running":
            assert time.monotonic() - started < limit + grace + 5, "the container outlived its own deadline"
            time.sleep(0.3)
            container.reload()
        state = docker_client.api.inspect_container(container.id)["State"]
        # killed by its own deadline, not finished and not stopped early: judged by the engine's own clock
        # (the poll above may see the container running well after it started on a loaded machine)
        lived = (_docker_time(state["FinishedAt"]) - _docker_time(state["StartedAt"])).total_seconds()
        assert state["ExitCode"] == 137 and lived >= limit + grace - 0.5, (state, lived)
        # the next session on the harness's host: its sweep, then its recovery of the stage
        monkeypatch.setattr(socket, "gethostname", lambda: ISOLATED_HOST)
        assert DockerRuntime(image=test_image).sweep_orphans() >= 1
        assert session_containers(docker_client, session_id) == []
        assert staging.recover(run_dir) and (run_dir / "workspace").is_dir()
        monkeypatch.undo()
    finally:
        if harness.poll() is None:
            harness.kill()
        for c in session_containers(docker_client, session_id):
            c.remove(force=True)


def _docker_time(text: str):
    """An engine timestamp (RFC 3339 with nanoseconds) as a datetime (microseconds)."""
    from datetime import datetime

    stamp, _, fraction = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{stamp}.{(fraction + '000000')[:6]}+00:00")


def _tiny_spec(tmp_path, argv, time_limit=60.0, **kw):
    from pytest_rexmle.runtime.base import RunSpec

    for sub in ("workspace", "submission", "logs", "public", "private"):
        (tmp_path / sub).mkdir()
    (tmp_path / "private" / "answers.csv").write_text("id,value\n1,42\n")
    (tmp_path / "instructions.md").write_text("x")
    return RunSpec("ldct-iqa", argv, kw.pop("env", {}), tmp_path / "public", tmp_path / "workspace", tmp_path / "submission",
                   tmp_path / "logs", tmp_path / "instructions.md", time_limit, hidden=(tmp_path / "private",), **kw)


def test_memory_limit_is_a_fail_that_names_it(docker_bench, docker_client, session_id, monkeypatch):
    hog = "python3 -c \"b=[bytearray(16<<20) for _ in range(64)]; [x.__setitem__(slice(None,None,4096), b'1'*4096) for x in b]\""
    result = docker_bench("--agent=command", f"--agent-option=cmd=cp $REXMLE_DATA_DIR/sample_submission.csv "
                          f"$REXMLE_SUBMISSION_DIR/submission.csv && {hog}", "-k", "ldct-iqa", "--rexmle-time-limit=60",
                          "--rexmle-limit=memory=128m")
    result.assert_outcomes(failed=1)  # a valid submission, but the run broke its memory limit
    result.stdout.fnmatch_lines(["*memory limit of 128 MiB exceeded*"])
    run = run_folders(docker_bench.path, "ldct-iqa")[-1]
    meta = json.loads((run / "run.json").read_text())
    assert meta["oom_killed"] is True and meta["limits"]["memory"] == "128 MiB"
    assert session_containers(docker_client, session_id) == []


PROBE = r"""
import json, os, resource, urllib.request
def status():
    return {l.split(':')[0]: l.split(':', 1)[1].strip() for l in open('/proc/self/status')}
def fetch(url):
    try:
        return urllib.request.urlopen(url, timeout=3).read().decode()
    except Exception as exc:
        return type(exc).__name__
gw = [l.split() for l in open('/proc/net/route').read().splitlines()[1:]]
gw = ['.'.join(str(int(f[2][i:i + 2], 16)) for i in (6, 4, 2, 0)) for f in gw if f[1] == '00000000']
try:
    open('/proc/sys/net/ipv4/ip_default_ttl', 'w').write('64')
    sysctl = 'written'
except OSError as exc:
    sysctl = exc.strerror
s = status()
out = {'caps': s['CapEff'], 'nnp': s['NoNewPrivs'], 'seccomp': s['Seccomp'], 'sysctl': sysctl,
       'nofile': resource.getrlimit(resource.RLIMIT_NOFILE)[0], 'fsize': resource.getrlimit(resource.RLIMIT_FSIZE)[0],
       'mountinfo': open('/proc/self/mountinfo').read(), 'tmp': os.statvfs('/tmp').f_blocks * os.statvfs('/tmp').f_frsize,
       'loopback': {h: fetch(f'http://{h}:{os.environ["LOCAL_PORT"]}/') for h in ['127.0.0.1', *gw]},
       'gateway_open': {h: fetch(f'http://{h}:{os.environ["OPEN_PORT"]}/') for h in gw}}
print(json.dumps(out))
"""


def _server(host: str, token: str):
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.end_headers()
            self.wfile.write(token.encode())

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer((host, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("network", ["bridge", "none"])
def test_hardening_seen_from_inside(docker_client, test_image, session_id, tmp_path, network):
    """No capability, no_new_privs, seccomp filter, read-only /proc/sys, the limits as rlimits, a sized /tmp;
    the host's loopback service never answers; the bridge reaches the host's *public* side, none nothing."""
    local, public = _server("127.0.0.1", "loopback-token"), _server("0.0.0.0", "open-token")
    try:
        spec = _tiny_spec(tmp_path, ["python3", "-c", PROBE], network=network,
                          env={"LOCAL_PORT": str(local.server_address[1]), "OPEN_PORT": str(public.server_address[1])})
        rt = DockerRuntime(image=test_image, session=session_id,
                           settings=DockerSettings(image=test_image), limits={"file_size": "1g", "tmp": "64m"})
        outcome = rt.run(spec)
    finally:
        local.shutdown()
        public.shutdown()
    assert outcome.exit_code == 0, outcome.stderr.read_text()
    seen = json.loads(outcome.stdout.read_text())
    assert seen["caps"] == "0000000000000000" and seen["nnp"] == "1" and seen["seccomp"] == "2"
    assert seen["sysctl"] == "Read-only file system"
    assert seen["fsize"] == 1 << 30 and seen["nofile"] == outcome.details["limits"]["nofile"]
    assert seen["tmp"] == 64 << 20
    assert all(v != "loopback-token" for v in seen["loopback"].values()), seen["loopback"]
    # what mountinfo names: bind sources, never the hidden private folder
    assert str(tmp_path / "private") not in seen["mountinfo"]
    if network == "bridge":
        assert seen["gateway_open"] and set(seen["gateway_open"].values()) == {"open-token"}, seen["gateway_open"]
    else:
        assert seen["gateway_open"] == {} and outcome.details["network"] == "none"
    assert session_containers(docker_client, session_id) == []
