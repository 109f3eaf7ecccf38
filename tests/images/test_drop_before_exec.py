"""An image's own interpreter is hostile input: nothing of the image runs before the run's uid, an empty
capability set, ``no_new_privs``, the seccomp filter and the rlimits are in force (issue #38, item 1).

The local runtime starts its sandbox launcher on the image's ``python3``. Run by a root harness, that
interpreter (or any ``.pth`` file in the image's site-packages, which ``python3 -I`` still runs) used to
start as host uid 0 with every capability: it could set ``security.capability`` on a file of the workspace
(``nobody`` then becomes root on the host from it) or make files immutable that the clean-up cannot remove.
These tests build two small images from this machine's system Python (``pytest_rexmle.testing.hostile_image``:
``rexmle images import`` of a root folder, no Docker): one whose ``python3`` is replaced by a script, one genuine with one ``.pth`` added. Each
runs through the real local runtime; the hostile code reports what it observed and what its attacks did.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from pytest_rexmle.runtime.base import RunSpec, RuntimeUnavailable
from pytest_rexmle.runtime.local import LocalRuntime
from pytest_rexmle.testing.hostile_image import NoSystemPython, build_root, left_behind, problems, reports

from ..sandbox.gateway_standin import gateway_factory
from ..sandbox.test_unprivileged import NOBODY, unprivileged_site  # noqa: F401 (a fixture)

LIMITS = {"open_files": "321", "file_size": "96M"}


@pytest.fixture(scope="module")
def hostile_images(tmp_path_factory):
    """``(cache, tags)``: the replaced-``python3`` image and the genuine one with a ``.pth``, imported into a
    cache of their own that every user can read (an unprivileged harness runs them too); each test sets
    ``REXMLE_CACHE_DIR`` to it."""
    from pytest_rexmle.images import store

    if shutil.which("bwrap") is None:
        pytest.skip("image agents run under bubblewrap only")
    cache = Path(tempfile.mkdtemp(prefix="rexmle-hostile-images-"))
    cache.chmod(0o755)
    before = os.environ.get("REXMLE_CACHE_DIR")
    os.environ["REXMLE_CACHE_DIR"] = str(cache)
    try:
        tags = {}
        for name, replaced, pth in (("replaced", True, False), ("pth", False, True)):
            try:
                root = build_root(tmp_path_factory.mktemp(name) / "root", replaced_python=replaced, pth=pth)
            except NoSystemPython as exc:
                pytest.skip(f"these images are built from the system's Python: {exc}")
            tags[name] = f"hostile/{name}:1"
            store.import_archive(root, tags=(tags[name],))
            shutil.rmtree(root)
    finally:
        if before is None:
            os.environ.pop("REXMLE_CACHE_DIR", None)
        else:
            os.environ["REXMLE_CACHE_DIR"] = before
    yield cache, tags
    shutil.rmtree(cache, ignore_errors=True)


#: the agent's own command in the images: it writes that it ran
AGENT = "open('/rexmle/submission/done', 'w').write('agent ran')"


def run_image(tmp_path: Path, tag: str, code: str = AGENT, network: str = "none",
              gateway=None) -> tuple[list[dict], object, str]:
    for folder in ("data", "run/workspace", "run/submission", "run/logs"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    (tmp_path / "data" / "public.csv").write_text("id\n1\n")
    (tmp_path / "run" / "instructions.md").write_text("do it")
    env = {"REXMLE_TASK": "ldct-iqa", "REXMLE_DATA_DIR": "/rexmle/data", "REXMLE_SUBMISSION_DIR": "/rexmle/submission"}
    spec = RunSpec("ldct-iqa", ["python3", "-I", "-c", code], env, tmp_path / "data", tmp_path / "run/workspace",
                   tmp_path / "run/submission", tmp_path / "run/logs", tmp_path / "run/instructions.md", 120.0,
                   image=tag, network=network)
    runtime = LocalRuntime(sandbox="bwrap", limits=LIMITS, gateway=gateway)
    if runtime.mechanism() != "bwrap":
        pytest.skip("bubblewrap cannot run here")
    outcome = runtime.run(spec)
    stdout = outcome.stdout.read_text()
    found = reports(stdout)
    assert found, (stdout, outcome.stderr.read_text())
    return found, outcome, outcome.stderr.read_text()


def assert_dropped(found: list[dict], outcome, tmp_path: Path) -> None:
    """Every hostile start saw the run's uid, no capability, no_new_privs, the filter and the limits; its
    attacks failed; nothing with a file capability or an immutable flag is left on the host."""
    uid = outcome.details["agent_uid"]
    recorded = outcome.details["limits"]
    for report in found:
        status = report["status"]
        assert status["Uid"] == str(uid) and status["Gid"] == str(uid), (status, uid)
        if os.geteuid() == 0:
            assert uid != 0
        for field in ("CapEff", "CapPrm", "CapInh", "CapAmb"):
            assert status[field] == "0000000000000000", (field, status)
        assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2", status
        assert report["limits"]["Max open files"] == str(recorded["open_files"]) == "321"
        assert report["limits"]["Max file size"] == str(recorded["file_size"]) == str(96 << 20)
        assert report["limits"]["Max core file size"] == "0"
        for attack in ("setcap /rexmle/workspace", "setcap /tmp", "immutable /rexmle/workspace", "immutable /tmp"):
            assert report[attack] == "Operation not permitted", (attack, report)
    getcap = subprocess.run(["getcap", "-r", str(tmp_path)], capture_output=True, text=True, timeout=60).stdout
    assert getcap.strip() == "" and left_behind(tmp_path) == [], (getcap, left_behind(tmp_path))
    assert problems(found, uid, recorded, os.geteuid() == 0) == []


@pytest.mark.sandbox
def test_a_replaced_python3_runs_as_the_run_with_nothing_to_gain(hostile_images, tmp_path, monkeypatch):
    cache, tags = hostile_images
    monkeypatch.setenv("REXMLE_CACHE_DIR", str(cache))
    found, outcome, _ = run_image(tmp_path, tags["replaced"])
    assert len(found) == 1 and outcome.exit_code == 0  # the attack ran instead of the launcher
    assert not (tmp_path / "run/submission/done").exists()
    assert_dropped(found, outcome, tmp_path)


@pytest.mark.sandbox
def test_a_pth_file_in_a_genuine_image_runs_as_the_run_with_nothing_to_gain(hostile_images, tmp_path, monkeypatch):
    cache, tags = hostile_images
    monkeypatch.setenv("REXMLE_CACHE_DIR", str(cache))
    found, outcome, stderr = run_image(tmp_path, tags["pth"])
    # the .pth ran in the launcher, then again in the agent's own python3; the agent itself ran to the end
    assert len(found) == 2 and outcome.exit_code == 0, stderr
    assert (tmp_path / "run/submission/done").read_text() == "agent ran"
    assert_dropped(found, outcome, tmp_path)


#: a genuine image's agent as it needs its sandbox: the gateway's listener (made by the launcher, now
#: unprivileged inside) answering, POSIX semaphores in /dev/shm
GATEWAY_AGENT = """
import json, multiprocessing, os, urllib.request
req = urllib.request.Request(os.environ["REXMLE_GATEWAY"] + "/rexmle/ping")
try:
    status = urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=10).status
except OSError as exc:
    status = getattr(exc, "code", None) or repr(exc)
multiprocessing.Lock()
open("/rexmle/submission/done", "w").write(json.dumps({"gateway": status, "uid": os.getuid()}))
"""


@pytest.mark.sandbox
def test_a_genuine_image_still_gets_its_gateway_and_semaphores(hostile_images, tmp_path, monkeypatch):
    cache, tags = hostile_images
    monkeypatch.setenv("REXMLE_CACHE_DIR", str(cache))
    factory, standin = gateway_factory()
    found, outcome, stderr = run_image(tmp_path, tags["pth"], GATEWAY_AGENT, network="gateway", gateway=factory)
    assert outcome.exit_code == 0, stderr
    done = json.loads((tmp_path / "run/submission/done").read_text())
    assert done["uid"] == outcome.details["agent_uid"] and outcome.details["network"] == "gateway"
    assert isinstance(done["gateway"], int), done  # the gateway answered (200 from the stand-in)
    if standin is not None:
        assert done["gateway"] == 200 and standin.runs[0].paths == ["/rexmle/ping"]
    assert_dropped(found, outcome, tmp_path)


#: the harness run by uid 65534 (tests/sandbox/test_unprivileged.py's site: the system Python, a copy of
#: this package): one image run, its outcome as JSON
UNPRIVILEGED_HARNESS = r'''
import json, sys, tempfile
from pathlib import Path
from pytest_rexmle.runtime.base import RunSpec, RuntimeUnavailable
from pytest_rexmle.runtime.local import LocalRuntime
from pytest_rexmle.testing.hostile_image import NoSystemPython, build_root, left_behind, problems, reports

tag, limits = sys.argv[1], json.loads(sys.argv[2])
root = Path(tempfile.mkdtemp(prefix="rexmle-unpriv-image-"))
for folder in ("data", "workspace", "submission", "logs"):
    (root / folder).mkdir()
(root / "data" / "public.csv").write_text("id\n1\n")
(root / "instructions.md").write_text("do it")
spec = RunSpec("ldct-iqa", ["python3", "-I", "-c", "print('agent ran')"], {}, root / "data", root / "workspace",
               root / "submission", root / "logs", root / "instructions.md", 60, image=tag, network="none")
outcome = LocalRuntime(sandbox="bwrap", limits=limits).run(spec)
print(json.dumps({"details": outcome.details, "exit_code": outcome.exit_code, "root": str(root),
                  "stdout": outcome.stdout.read_text(), "stderr": outcome.stderr.read_text()[-3000:]}))
'''


@pytest.mark.sandbox
def test_an_unprivileged_harness_keeps_the_limits_on_a_replaced_python3(hostile_images, unprivileged_site):  # noqa: F811
    """A harness that is not root (a Slurm job) ran the image's interpreter as its own uid already; the
    rlimits were the launcher's to set, and a replaced ``python3`` skipped them."""
    cache, tags = hostile_images
    python, setpriv, site = unprivileged_site
    (site / "image_harness.py").write_text(UNPRIVILEGED_HARNESS)
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "PYTHONPATH": str(site), "LANG": "C.UTF-8",
           "REXMLE_CACHE_DIR": str(cache)}
    done = subprocess.run([setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", python,
                           str(site / "image_harness.py"), tags["replaced"], json.dumps(LIMITS)],
                          capture_output=True, text=True, env=env, cwd="/", timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    try:
        found = reports(result["stdout"])
        assert len(found) == 1 and result["exit_code"] == 0, result
        assert result["details"]["agent_uid"] == NOBODY

        class Outcome:
            details = result["details"]

        assert_dropped(found, Outcome, Path(result["root"]))
    finally:
        subprocess.run([setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "rm", "-rf",
                        result["root"]], capture_output=True, timeout=60)


@pytest.mark.sandbox
def test_a_root_harness_refuses_an_image_run_its_uids_cannot_sandbox(hostile_images, tmp_path, monkeypatch):
    """Where an ordinary uid cannot run bubblewrap (here: a copy of it only root may execute, standing for
    user namespaces that are off), an image run is refused with the fix, never run as root instead."""
    if os.geteuid() != 0:
        pytest.skip("a root harness's check")
    cache, tags = hostile_images
    monkeypatch.setenv("REXMLE_CACHE_DIR", str(cache))
    root_only = tmp_path / "bwrap"
    shutil.copy2(shutil.which("bwrap"), root_only)
    root_only.chmod(0o700)
    runtime = LocalRuntime(sandbox="bwrap", bwrap=str(root_only))
    with pytest.raises(RuntimeUnavailable) as refused:
        runtime.check_image(tags["pth"])
    message = str(refused.value)
    assert message.startswith(f"the local runtime cannot run image '{tags['pth']}' here: bubblewrap failed to start "
                              "as an ordinary uid: [Errno 13] Permission denied")
    assert "create a user namespace" in message and "--rexmle-runtime=docker" in message
    assert LocalRuntime(sandbox="bwrap", bwrap=str(root_only), agent_as_root=True).check_image(tags["pth"]) is None


@pytest.mark.sandbox
@pytest.mark.parametrize(("network", "gpus"), [("bridge", ()), ("none", ("0",))])
def test_bridge_and_gpu_image_runs_still_get_their_files(hostile_images, tmp_path, monkeypatch, network, gpus):
    """bubblewrap, now the run's uid, cannot create a mount point in the read-only image: the bridge's
    resolv.conf (images seldom have one) is given a place by the harness, and the host driver's libraries
    (files, bound through the bridge like folders) still appear (a stand-in file for libcuda)."""
    from pytest_rexmle.images import runnable
    from pytest_rexmle.runtime.sandbox.slirp import slirp4netns

    if network == "bridge" and not slirp4netns():
        pytest.skip("slirp4netns is not installed")
    cache, tags = hostile_images
    monkeypatch.setenv("REXMLE_CACHE_DIR", str(cache))
    fake = tmp_path / "libcuda.so.550.1"
    fake.write_bytes(b"\x7fELF stand-in")
    monkeypatch.setattr(runnable, "driver_libraries", lambda: ((fake, "libcuda.so.1"),))
    code = ("import json, os; d = '/.rexmle-driver'; open('/rexmle/submission/done', 'w').write(json.dumps("
            "{'resolv': open('/etc/resolv.conf').read() if os.path.exists('/etc/resolv.conf') else None, "
            "'driver': sorted(os.listdir(d)) if os.path.isdir(d) else None,"
            " 'cuda': open(d + '/libcuda.so.1', 'rb').read().decode() if os.path.isdir(d) else None}))")
    for folder in ("data", "run/workspace", "run/submission", "run/logs"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "run" / "instructions.md").write_text("do it")
    spec = RunSpec("ldct-iqa", ["python3", "-I", "-c", code], {}, tmp_path / "data", tmp_path / "run/workspace",
                   tmp_path / "run/submission", tmp_path / "run/logs", tmp_path / "run/instructions.md", 120.0,
                   image=tags["pth"], network=network, gpus=gpus)
    outcome = LocalRuntime(sandbox="bwrap", limits=LIMITS).run(spec)
    assert outcome.exit_code == 0, outcome.stderr.read_text()
    done = json.loads((tmp_path / "run/submission/done").read_text())
    assert outcome.details["network"] == network
    if network == "bridge":
        assert "nameserver 10.0.2.3" in done["resolv"] and done["driver"] is None
    else:
        assert done["driver"] == ["libcuda.so.1"] and done["cuda"] == "\x7fELF stand-in"
    assert_dropped(reports(outcome.stdout.read_text()), outcome, tmp_path / "run")


@pytest.mark.sandbox
def test_a_failed_drop_stops_the_run_with_its_reason(hostile_images, tmp_path, monkeypatch):
    """Nothing runs when a step before bubblewrap fails (here the bridge's mount point is gone, so its tmpfs
    cannot be mounted): the error names the step, and the run's folders are the harness's again."""
    if os.geteuid() != 0:
        pytest.skip("the bridge is a root harness's")
    from pytest_rexmle.runtime.sandbox import hostdrop

    cache, tags = hostile_images
    monkeypatch.setenv("REXMLE_CACHE_DIR", str(cache))
    monkeypatch.setattr(hostdrop.Bridge, "create", classmethod(lambda cls: cls(tmp_path / "no-such-folder")))
    with pytest.raises(RuntimeUnavailable) as refused:
        run_image(tmp_path, tags["replaced"])
    assert str(refused.value) == ("the local runtime could not start the sandbox: rexmle: the run's confinement "
                                  "failed before bubblewrap: [Errno 2] a tmpfs for the bind sources: No such file "
                                  "or directory")
    assert (tmp_path / "run/workspace").stat().st_uid == 0 and not (tmp_path / "run/submission/done").exists()


@pytest.mark.sandbox
def test_a_slurm_nodes_check_says_its_uids_cannot_sandbox_an_image(hostile_images, tmp_path):
    """The Slurm runtime's probe job asks the node (``pytest_rexmle.runtime.node_check``) before any run: a root
    job on a node whose ordinary uids cannot run bubblewrap names that, rather than fail inside each run."""
    if os.geteuid() != 0:
        pytest.skip("a root harness's check")
    cache, tags = hostile_images
    (tmp_path / "bin").mkdir()
    shutil.copy2(shutil.which("bwrap"), tmp_path / "bin" / "bwrap")
    (tmp_path / "bin" / "bwrap").chmod(0o700)
    def node_check(path: str) -> str:
        env = {**os.environ, "REXMLE_CACHE_DIR": str(cache), "PATH": path}
        return subprocess.run([sys.executable, "-m", "pytest_rexmle.runtime.node_check", "--sandbox", "bwrap",
                               tags["pth"]], capture_output=True, text=True, env=env, timeout=120).stdout

    assert node_check(os.environ["PATH"]).startswith("ok ")
    refused = node_check(f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    assert refused.startswith("missing on node ") and "bubblewrap failed to start as an ordinary uid" in refused, refused
