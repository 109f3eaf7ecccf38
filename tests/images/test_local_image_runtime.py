"""The local runtime runs an image agent from its unpacked image, entered by bubblewrap: the image's Python and
packages, the image's variables with the contract's on top, and the same sandbox as any local agent (the
image read-only, data read-only, workspace and submission writable, nothing of the host's folders). Where
bubblewrap cannot run, or the image was never imported, the agent is refused with the way out."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from pytest_rexmle.images import runnable
from pytest_rexmle.runtime.base import RunSpec, RuntimeUnavailable
from pytest_rexmle.runtime.local import LocalRuntime
from pytest_rexmle.runtime.sandbox.bwrap import DRIVER_INSIDE

from ..agent_images import KEY
from ..conftest import REPO
from .conftest import agent_image

#: the tests with an imported image: exported from Docker beforehand (the runs never use it), run under bubblewrap
image_run = pytest.mark.usefixtures("needs_bwrap")

PROBE = r"""
import json, os, socket, sys
out = {"python": sys.executable, "version": sys.version_info[:2], "env": dict(os.environ), "uid": os.getuid()}
try:
    import aide
    out["aide"] = aide.__file__
except ImportError as exc:
    out["aide"] = None
def attempt(fn):
    try:
        fn()
        return "ok"
    except OSError as exc:
        return exc.strerror
out["write_usr"] = attempt(lambda: open("/usr/pwned", "w"))
out["write_data"] = attempt(lambda: open(os.environ["REXMLE_DATA_DIR"] + "/pwned", "w"))
out["write_harness"] = attempt(lambda: open("/.rexmle-harness/pytest_rexmle/pwned", "w"))
out["write_submission"] = attempt(lambda: open(os.environ["REXMLE_SUBMISSION_DIR"] + "/s.csv", "w").write("x"))
out["seen"] = {p: os.path.exists(p) for p in sys.argv[1:]}
import multiprocessing
out["semaphore"] = attempt(lambda: multiprocessing.Lock())  # POSIX semaphores live in /dev/shm
out["connect"] = attempt(lambda: socket.create_connection(("1.1.1.1", 53), timeout=2))
out["driver"] = sorted(os.listdir(%r)) if os.path.isdir(%r) else None
print(json.dumps(out))
""" % (DRIVER_INSIDE, DRIVER_INSIDE)  # noqa: UP031 - a Python template full of braces


def run_in_image(tmp_path: Path, image: str, *visible: str, gpus: tuple[str, ...] = (), runtime=None):
    for folder in ("data", "run/workspace", "run/submission", "run/logs"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    (tmp_path / "data" / "public.csv").write_text("id\n1\n")
    (tmp_path / "run" / "instructions.md").write_text("do it")
    env = {"REXMLE_TASK": "ldct-iqa", "REXMLE_DATA_DIR": "/rexmle/data", "REXMLE_SUBMISSION_DIR": "/rexmle/submission",
           "REXMLE_AGENT": "the contract wins", "ANTHROPIC_API_KEY": KEY, "CUDA_VISIBLE_DEVICES": ",".join(gpus)}
    spec = RunSpec("ldct-iqa", ["python3", "-c", PROBE, *visible], env, tmp_path / "data", tmp_path / "run/workspace",
                   tmp_path / "run/submission", tmp_path / "run/logs", tmp_path / "run/instructions.md", 120.0,
                   image=image, network="none", gpus=gpus, secret_env=("ANTHROPIC_API_KEY",))
    outcome = (runtime or LocalRuntime()).run(spec)
    stdout = outcome.stdout.read_text()
    assert outcome.exit_code == 0, (stdout, outcome.stderr.read_text())
    return json.loads(stdout.strip().splitlines()[-1]), outcome, tmp_path / "run/submission"


@pytest.fixture
def aide_in_cache(imported, shared_cache, monkeypatch):
    monkeypatch.setenv("REXMLE_CACHE_DIR", str(shared_cache))
    if LocalRuntime().mechanism() != "bwrap":
        pytest.skip("bubblewrap cannot run here: image agents are refused (tested below)")
    return imported("aide")


@pytest.mark.docker
@pytest.mark.sandbox
@image_run
def test_an_image_agent_runs_on_its_images_python_in_the_same_sandbox(aide_in_cache, tmp_path, shared_cache):
    tag, image = aide_in_cache
    seen, outcome, submission = run_in_image(tmp_path, tag, str(REPO), str(shared_cache), sys.prefix, "/rexmle/data/public.csv")
    # the image's own Python (rexmle/base: /opt/conda, first on the image's PATH) and its aide package
    image_python = next(f"{folder}/python3" for folder in image.env()["PATH"].split(":")
                        if (image.rootfs / folder.lstrip("/") / "python3").exists())
    assert seen["python"].startswith(image_python.rsplit("/bin/", 1)[0]), (seen["python"], image_python)
    assert seen["aide"].endswith("/aide/__init__.py") and (image.rootfs / seen["aide"].lstrip("/")).is_file()
    assert not Path(seen["aide"]).is_relative_to(sys.prefix)
    # the image's variables, the contract's on top, the agent's tools first on the image's PATH
    assert seen["env"]["PYTHONDONTWRITEBYTECODE"] == "1" and seen["env"]["REXMLE_AGENT"] == "the contract wins"
    assert seen["env"]["PATH"] == "/rexmle/bin:" + image.env()["PATH"]
    assert seen["env"]["HOME"] == "/rexmle/workspace"
    assert seen["write_usr"] == "Read-only file system" and seen["write_data"] == "Read-only file system"
    assert seen["write_harness"] == "Read-only file system"
    assert seen["write_submission"] == "ok" and (submission / "s.csv").read_text() == "x"
    assert seen["semaphore"] == "ok"  # AIDE's multiprocessing: bubblewrap's own /dev/shm is root's 0755
    assert seen["seen"] == {str(REPO): False, str(shared_cache): False, sys.prefix: False,
                            "/rexmle/data/public.csv": True}
    assert seen["connect"] in ("Network is unreachable", "Address family not supported by protocol")  # seccomp or no route
    if os.geteuid() == 0:
        assert seen["uid"] == outcome.details["agent_uid"] != 0  # a uid of the run's own
    assert outcome.details["image_id"] == image.digest and outcome.details["image_runner"] == "bwrap-rootfs"
    assert outcome.details["sandbox"] == "bwrap" and outcome.details["image"] == tag
    assert not os.path.exists(image.rootfs / "usr" / "pwned")


@pytest.mark.docker
@pytest.mark.sandbox
@image_run
def test_a_gpu_run_gets_the_host_drivers_libraries(aide_in_cache, tmp_path, monkeypatch):
    """What the NVIDIA toolkit does for a container: the driver's user-space libraries, read-only, on the
    library path (this machine has no GPU: a stand-in library file takes libcuda's place)."""
    fake = tmp_path / "libcuda.so.550.1"
    fake.write_bytes(b"\x7fELF stand-in")
    monkeypatch.setattr(runnable, "driver_libraries", lambda: ((fake, "libcuda.so.1"),))
    seen, _, _ = run_in_image(tmp_path / "r", aide_in_cache[0], gpus=("0",))
    assert seen["driver"] == ["libcuda.so.1"]
    assert seen["env"]["LD_LIBRARY_PATH"].split(":")[0] == DRIVER_INSIDE
    assert seen["env"]["CUDA_VISIBLE_DEVICES"] == "0"  # as the contract set it, the run's GPU


def test_the_host_drivers_libraries_are_found_with_ldconfig(tmp_path, monkeypatch):
    listing = ("3 libs found in cache `/etc/ld.so.cache'\n"
               f"\tlibcuda.so.1 (libc6,x86-64) => {tmp_path}/libcuda.so.1\n"
               f"\tlibnvidia-ml.so.1 (libc6,x86-64) => {tmp_path}/libnvidia-ml.so.1\n"
               f"\tlibcuda.so.1 (libc6) => {tmp_path}/i386/libcuda.so.1\n"
               f"\tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6\n")
    for name in ("libcuda.so.1", "libnvidia-ml.so.1"):
        (tmp_path / name).write_text("x")
    import subprocess

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, listing, ""))
    runnable.driver_libraries.cache_clear()
    try:
        assert runnable.driver_libraries() == ((tmp_path / "libcuda.so.1", "libcuda.so.1"),
                                               (tmp_path / "libnvidia-ml.so.1", "libnvidia-ml.so.1"))
    finally:
        runnable.driver_libraries.cache_clear()


def test_landlock_alone_refuses_image_agents_with_the_alternatives():
    why = runnable.local_image_refusal("rexmle/aide:latest", "landlock")
    assert "only bubblewrap can make the agent's `/`" in why and "this machine's own Python" in why
    assert "--rexmle-runtime=docker" in why and "--rexmle-runtime=slurm" in why
    runtime = LocalRuntime(sandbox="landlock")
    with pytest.raises(RuntimeUnavailable) as refused:
        runtime.check_image("rexmle/aide:latest")
    # Landlock missing here too: the refusal is the sandbox's own; either way the agent never runs on the host
    assert "only bubblewrap" in str(refused.value) or "cannot isolate the agent" in str(refused.value)


def test_an_image_never_imported_is_refused_with_how_to_import(tmp_path, monkeypatch):
    monkeypatch.setenv("REXMLE_CACHE_DIR", str(tmp_path))
    why = runnable.local_image_refusal("rexmle/aide:latest", "bwrap")
    assert f"not in the image cache ({tmp_path}/images)" in why
    # the agent is known from its image: its real name, not a literal NAME (issue #40)
    assert "rexmle images export --agent aide FILE" in why and "rexmle images import FILE" in why
    assert "NAME" not in why
    own = runnable.local_image_refusal("lab/my-agent:1", "bwrap")
    assert "`docker save lab/my-agent:1 -o FILE`" in own and "NAME" not in own  # no --agent exports an image of yours


def test_an_image_agent_on_the_local_runtime_without_its_image_is_a_usage_error(bench, tmp_path):
    result = bench("--agent=aide", "--rexmle-runtime=local", "--agent-option=image=lab/never-imported:1",
                   "-k", "ldct-iqa")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*the local runtime cannot run image 'lab/never-imported:1' here*"])
    assert not (bench.path / ".rexmle" / "runs").exists()


def test_image_agents_declare_the_local_isolation():
    from pytest_rexmle.agents import get_agent

    assert get_agent("aide", {}).supported_isolation == ("docker", "local")
    assert agent_image("aide").endswith(":latest")


@pytest.mark.docker
@pytest.mark.sandbox
@image_run
def test_the_hostile_agent_inside_an_image_finds_no_answers_and_writes_nowhere(aide_in_cache, tmp_path, shared_cache):
    """The local runtime's red-team agent (fixtures/agents/hostile) run on the image's Python: it walks the
    whole visible tree for answers and the private folder's path, lists processes, writes everywhere."""
    import shutil

    from pytest_rexmle.data.synthetic import ensure_synthetic
    from pytest_rexmle.task import registry

    from ..conftest import AGENTS

    twin = ensure_synthetic(registry().get("ldct-iqa"), shared_cache)
    run = tmp_path / "run"
    for folder in ("workspace", "submission", "logs"):
        (run / folder).mkdir(parents=True)
    shutil.copy(AGENTS / "hostile" / "agent.py", run / "workspace" / "agent.py")
    (run / "instructions.md").write_text("do it")
    escape = tmp_path / "escaped.txt"
    env = {"REXMLE_DATA_DIR": "/rexmle/data", "REXMLE_WORKSPACE": "/rexmle/workspace", "HOSTILE_TARGET": str(escape)}
    spec = RunSpec("ldct-iqa", ["python3", "agent.py", str(twin.private)], env, twin.public, run / "workspace",
                   run / "submission", run / "logs", run / "instructions.md", 300.0, image=aide_in_cache[0],
                   network="none", hidden=(twin.private,))
    outcome = LocalRuntime().run(spec)
    assert outcome.exit_code == 0, outcome.stderr.read_text()[-2000:]
    report = json.loads((run / "workspace" / "hostile.json").read_text())
    assert not any("answers.csv" in p or "prepare_manifest" in p or "/private/" in p for p in report["found_names"])
    assert report["found_content"] == [], "the private folder's path must not appear in any visible file"
    assert max(pid for pid, _ in report["processes"]) < 20, report["processes"]  # its own PID namespace
    assert report["wrote"] == [] and not escape.exists()
    assert not (twin.public / "rexmle-hostile").exists()
    assert not any((aide_in_cache[1].rootfs / p).exists() for p in ("etc/rexmle-hostile", "usr/rexmle-hostile"))
