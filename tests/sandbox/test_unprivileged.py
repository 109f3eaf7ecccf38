"""The same guarantees when the harness itself is an ordinary user (uid 65534 via ``setpriv``).

The harness's own interpreter lives under /root (0700) on many machines, so the unprivileged harness
here is the system Python with a world-readable copy of this package (and landlockpy) on PYTHONPATH;
without a system Python that has PyYAML, or without setpriv, the test skips and says why.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from .conftest import SECRET, require_mechanism
from .test_privileges import PROBE

REPO = Path(__file__).resolve().parents[2]
#: an agent that tries to poison the data for the next run: chmod 000, utime, chown of every public file
POISON = r'''
import errno, json, os
out = {}
data = os.environ["REXMLE_DATA_DIR"]
for name in sorted(os.listdir(data)):
    path = os.path.join(data, name)
    for what, call in (("chmod", lambda: os.chmod(path, 0)), ("utime", lambda: os.utime(path, (1, 1))),
                       ("chown", lambda: os.chown(path, os.getuid(), os.getgid()))):
        try:
            call()
            out[f"{name}:{what}"] = "ok"
        except OSError as exc:
            out[f"{name}:{what}"] = errno.errorcode.get(exc.errno, str(exc.errno))
print(json.dumps(out))
'''
NOBODY = 65534
HARNESS = r'''
import json, sys, tempfile, textwrap
from pathlib import Path
from pytest_rexmle.runtime.base import RunSpec
from pytest_rexmle.runtime.base import RuntimeUnavailable
from pytest_rexmle.runtime.local import LocalRuntime

mechanism, code = sys.argv[1], open(sys.argv[2]).read()
network = sys.argv[3] if len(sys.argv) > 3 else "bridge"
same_uid = len(sys.argv) > 4 and sys.argv[4] == "unsafe-same-uid"
root = Path(tempfile.mkdtemp(prefix="rexmle-unpriv-run-"))
public, private = root / "data" / "public", root / "data" / "private"
for folder in (public, private, root / "workspace", root / "submission", root / "logs"):
    folder.mkdir(parents=True)
(private / "answers.csv").write_text("case,label\n2,%s\n")
(root / "instructions.md").write_text("do the task\n")
(root / "workspace" / "agent.py").write_text(code)
(root / "workspace" / "target.txt").write_text(str(private / "answers.csv"))
(public / "train.csv").write_text("case,label\n1,0\n")
spec = RunSpec("unpriv", ["python3", "agent.py"], {}, public, root / "workspace", root / "submission",
               root / "logs", root / "instructions.md", 60, hidden=(private,), network=network)
runtime = LocalRuntime(sandbox=mechanism, unsafe_same_uid=same_uid)
try:
    spec = runtime.stage(spec)
    spec.env["REXMLE_DATA_DIR"] = runtime.contract_paths(spec)["data"]  # as run.launch sets the contract
    outcome = runtime.run(spec)
except RuntimeUnavailable as exc:
    print(json.dumps({"refused": str(exc), "root": str(root)}))
    raise SystemExit(0)
st = (public / "train.csv").stat()
print(json.dumps({"details": outcome.details, "exit_code": outcome.exit_code, "stdout": outcome.stdout.read_text(),
                  "stderr": outcome.stderr.read_text()[-3000:], "root": str(root),
                  "public": {"mode": st.st_mode & 0o7777, "mtime": st.st_mtime, "uid": st.st_uid,
                             "text": (public / "train.csv").read_text()}}))
''' % SECRET  # noqa: UP031 (a Python template full of braces: % needs no escaping)


def _system_python() -> str | None:
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(candidate) and subprocess.run([candidate, "-c", "import yaml"], capture_output=True).returncode == 0:
            return candidate
    return None


@pytest.fixture(scope="module")
def unprivileged_site():
    if os.geteuid() != 0:
        pytest.skip("the harness already runs unprivileged: every other sandbox test covers this case")
    python, setpriv = _system_python(), shutil.which("setpriv")
    if python is None or setpriv is None:
        pytest.skip("needs setpriv and a system Python with PyYAML that uid 65534 can run")
    site = Path(tempfile.mkdtemp(prefix="rexmle-unpriv-site-"))
    try:
        shutil.copytree(REPO / "pytest_rexmle", site / "pytest_rexmle", ignore=shutil.ignore_patterns("__pycache__", "_images"))
        import landlockpy

        shutil.copytree(Path(landlockpy.__file__).parent, site / "landlockpy", ignore=shutil.ignore_patterns("__pycache__"))
        (site / "harness.py").write_text(HARNESS)
        (site / "agent_code.py").write_text(PROBE)
        (site / "poison.py").write_text(POISON)
        for path in [site, *site.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield python, setpriv, site
    finally:
        shutil.rmtree(site, ignore_errors=True)


def run_as_nobody(unprivileged_site, mechanism: str, code_file: str, network: str = "bridge",
                  same_uid: bool | None = None) -> dict:
    """The harness run by uid 65534 on the agent code in ``site/code_file``: its outcome as JSON. Landlock
    runs as the harness's own uid only with ``--rexmle-unsafe-same-uid`` (``same_uid``, by default on for it)."""
    same_uid = mechanism == "landlock" if same_uid is None else same_uid
    python, setpriv, site = unprivileged_site
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "PYTHONPATH": str(site), "LANG": "C.UTF-8"}
    done = subprocess.run([setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", python,
                           str(site / "harness.py"), mechanism, str(site / code_file), network,
                           "unsafe-same-uid" if same_uid else "-"],
                          capture_output=True, text=True, env=env, cwd="/", timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def remove_as_nobody(unprivileged_site, result: dict) -> None:
    _, setpriv, _ = unprivileged_site
    subprocess.run([setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "rm", "-rf",
                    result["root"]], capture_output=True)


@pytest.mark.parametrize("mechanism", ["bwrap", "landlock"])
def test_unprivileged_harness_gives_an_unprivileged_agent(unprivileged_site, mechanism):
    require_mechanism(mechanism)
    result = run_as_nobody(unprivileged_site, mechanism, "agent_code.py")
    try:
        assert result["exit_code"] == 0, result["stderr"]
        assert result["details"]["sandbox"] == mechanism and result["details"]["agent_uid"] == NOBODY
        report = json.loads([line for line in result["stdout"].splitlines() if line.startswith("{")][-1])
        assert report["uid"] == report["euid"] == NOBODY
        assert report["CapEff"] == report["CapPrm"] == report["CapAmb"] == "0000000000000000"
        assert report["NoNewPrivs"] == "1" and report["Seccomp"] == "2"
        for key in ("mount", "umount", "unshare_user", "unshare_mount", "ptrace_parent"):
            assert report[key] == "EPERM", (key, report[key])
        assert report["mknod_char"] == report["chmod_setuid"] == report["mkdir_setgid"] == "EPERM"
        assert report["proc_sys_write"] in ("EROFS", "EACCES", "EPERM")
        assert report["answers_read"] == []
    finally:
        remove_as_nobody(unprivileged_site, result)


def test_landlock_as_the_harness_uid_is_refused_and_says_why(unprivileged_site):
    """Issue 23.3: a Landlock agent of the harness's own uid would read its /proc/PID/environ, venv, cache
    and runs folder; without --rexmle-unsafe-same-uid the run never starts and the message names the fix."""
    require_mechanism("landlock")
    result = run_as_nobody(unprivileged_site, "landlock", "agent_code.py", network="none", same_uid=False)
    try:
        refusal = result.get("refused") or ""
        assert f"your own uid {NOBODY}" in refusal and "/proc/<pid>/environ" in refusal, result
        assert "bubblewrap" in refusal and "--rexmle-unsafe-same-uid" in refusal, refusal
        assert not (Path(result["root"]) / "workspace" / "made").exists()
    finally:
        remove_as_nobody(unprivileged_site, result)


@pytest.mark.parametrize("mechanism", ["bwrap", "landlock"])
def test_data_metadata_changes_never_reach_the_source(unprivileged_site, mechanism):
    """Issue 23.4 with the harness's own uid as the agent (the case where hard links would be the cache's
    inodes the agent owns): bubblewrap binds the data read-only (EROFS), Landlock gets a copy; either way the
    harness's public file keeps its mode, time and owner for the next run."""
    require_mechanism(mechanism)
    result = run_as_nobody(unprivileged_site, mechanism, "poison.py", network="none")
    try:
        assert result["exit_code"] == 0, result["stderr"]
        tried = json.loads([line for line in result["stdout"].splitlines() if line.startswith("{")][-1])
        assert tried, "the agent found no data to poison"
        if mechanism == "bwrap":
            assert set(tried.values()) == {"EROFS"}, tried
        else:
            assert result["details"]["data_view"] == "copy" and result["details"]["unsafe_same_uid"] is True
            assert tried["train.csv:chmod"] == "ok", tried  # its own copy: allowed, and harmless
        assert result["public"]["mode"] == 0o644 and result["public"]["uid"] == NOBODY, result["public"]
        assert result["public"]["mtime"] > 1e9 and result["public"]["text"] == "case,label\n1,0\n"
    finally:
        remove_as_nobody(unprivileged_site, result)
