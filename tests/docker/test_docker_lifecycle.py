"""Nothing outlives a run: time limit, harness SIGTERM, orphans of dead sessions; GPUs pinned per worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

from pytest_rexmle.runtime.docker import DockerRuntime

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


def test_sigterm_to_pytest_mid_run_removes_the_container(bench, test_image, docker_client, session_id):
    env = {**os.environ, "REXMLE_DOCKER_IMAGE": test_image, "REXMLE_SESSION": session_id,
           "PYTHONPATH": str(REPO), "REXMLE_DOCKER_CPUS": "1"}
    marker = f"sleeper-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.docker._wiring", "--rexmle-data=synthetic",
         "--rexmle-runtime=docker", "--agent=command", f"--agent-option=dir={AGENTS / 'sleeper'}",
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
