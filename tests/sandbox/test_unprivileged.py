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
NOBODY = 65534
HARNESS = r'''
import json, sys, tempfile, textwrap
from pathlib import Path
from pytest_rexmle.runtime.base import RunSpec
from pytest_rexmle.runtime.local import LocalRuntime

mechanism, code = sys.argv[1], open(sys.argv[2]).read()
network = sys.argv[3] if len(sys.argv) > 3 else "bridge"
root = Path(tempfile.mkdtemp(prefix="rexmle-unpriv-run-"))
public, private = root / "data" / "public", root / "data" / "private"
for folder in (public, private, root / "workspace", root / "submission", root / "logs"):
    folder.mkdir(parents=True)
(private / "answers.csv").write_text("case,label\n2,%s\n")
(root / "instructions.md").write_text("do the task\n")
(root / "workspace" / "agent.py").write_text(code)
(root / "workspace" / "target.txt").write_text(str(private / "answers.csv"))
spec = RunSpec("unpriv", [sys.executable, "agent.py"], {}, public, root / "workspace", root / "submission",
               root / "logs", root / "instructions.md", 60, hidden=(private,), network=network)
outcome = LocalRuntime(sandbox=mechanism).run(spec)
print(json.dumps({"details": outcome.details, "exit_code": outcome.exit_code, "stdout": outcome.stdout.read_text(),
                  "stderr": outcome.stderr.read_text()[-3000:], "root": str(root)}))
''' % SECRET


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
        shutil.copytree(REPO / "tasks", site / "tasks")
        import landlockpy

        shutil.copytree(Path(landlockpy.__file__).parent, site / "landlockpy", ignore=shutil.ignore_patterns("__pycache__"))
        (site / "harness.py").write_text(HARNESS)
        (site / "agent_code.py").write_text(PROBE)
        for path in [site, *site.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield python, setpriv, site
    finally:
        shutil.rmtree(site, ignore_errors=True)


def run_as_nobody(unprivileged_site, mechanism: str, code_file: str, network: str = "bridge") -> dict:
    """The harness run by uid 65534 on the agent code in ``site/code_file``: its outcome as JSON."""
    python, setpriv, site = unprivileged_site
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "PYTHONPATH": str(site), "LANG": "C.UTF-8",
           "REXMLE_TASKS_DIR": str(site / "tasks")}
    done = subprocess.run([setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", python,
                           str(site / "harness.py"), mechanism, str(site / code_file), network],
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
        report = json.loads([l for l in result["stdout"].splitlines() if l.startswith("{")][-1])
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
