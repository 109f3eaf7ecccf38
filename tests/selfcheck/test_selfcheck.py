"""``rexmle selfcheck``: the bundled runtimes pass every check, and weakened runtimes fail exactly theirs.

The command runs in a subprocess, as a runtime's author would run it. The weakened runtimes
(``weak.py``) are registered the way a third party registers one: an entry point of the
``rexmle.runtimes`` group, here in a distribution's metadata folder put on ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_rexmle.testing import CHECKS

from ..conftest import REPO, require_service
from ..docker.conftest import docker_client, test_image  # noqa: F401  (fixtures reused here)
from ..security.conftest import landlock_works

WEAK = {"weak-answers": "AnswersBoundRuntime", "weak-network": "HostNetworkRuntime",
        "weak-limits": "UnlimitedRuntime", "weak-nothing": "NoSandboxRuntime",
        "weak-interpreter": "UndroppedImageRuntime", "weak-gpus": "AllGpusRuntime"}


def selfcheck(*args: str, extra_path: Path | None = None, timeout: float = 600) -> tuple[int, dict[str, str], str]:
    """``rexmle selfcheck ARGS``: the exit status, each check's verdict line by name, and the whole output."""
    path = [str(extra_path)] if extra_path else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, str(REPO)]), "REXMLE_SLURM_POLL_SECONDS": "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest_rexmle", "selfcheck", *args], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=timeout)
    lines = {}
    for line in proc.stdout.splitlines():
        verdict, _, rest = line.partition(" ")
        if verdict in ("PASS", "FAIL"):
            lines[rest.split(":", 1)[0]] = line
    return proc.returncode, lines, proc.stdout + proc.stderr


def assert_all_pass(code: int, lines: dict[str, str], output: str) -> None:
    assert list(lines) == list(CHECKS), output
    failed = [line for line in lines.values() if not line.startswith("PASS")]
    assert failed == [] and code == 0, output


@pytest.mark.parametrize("sandbox", ["bwrap", "landlock"])
def test_local_runtime_passes_every_check(sandbox):
    if sandbox == "bwrap":
        require_service(shutil.which("bwrap") is not None, "REXMLE_REQUIRE_SANDBOX", "bubblewrap (bwrap)")
    else:
        require_service(landlock_works(), "REXMLE_REQUIRE_LANDLOCK", "the Landlock binding (landlockpy)")
    code, lines, output = selfcheck("--runtime", "local", "--sandbox", sandbox)
    assert_all_pass(code, lines, output)
    assert "fork refused after" in lines["limits"] and "memory stopped at" in lines["limits"], lines["limits"]


def test_docker_runtime_passes_every_check(docker_client, test_image):  # noqa: F811
    if os.geteuid() != 0:
        pytest.skip("the gateway network on Docker needs a root harness (the runtime says so itself)")
    assert_all_pass(*selfcheck("--runtime", "docker", "--image", test_image))


def test_slurm_runtime_passes_every_check(needs_slurm, needs_bwrap):
    assert_all_pass(*selfcheck("--runtime", "slurm", "--sandbox", "bwrap"))


@pytest.fixture(scope="module")
def weak_registry(tmp_path_factory) -> Path:
    """A folder holding a distribution's metadata whose entry points register the weakened runtimes."""
    folder = tmp_path_factory.mktemp("weak-runtimes")
    info = folder / "rexmle_weak_runtimes-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rexmle-weak-runtimes\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[rexmle.runtimes]\n" + "".join(
        f"{name} = tests.selfcheck.weak:{cls}\n" for name, cls in WEAK.items()))
    return folder


@pytest.mark.parametrize(("runtime", "failing"), [
    ("weak-answers", {"answers"}),
    ("weak-network", {"network", "keys"}),   # no gateway: the key goes in as the harness was given it
    ("weak-limits", {"limits"}),
    ("weak-interpreter", {"interpreter"}),   # an image's python3 ran before the run was dropped
    ("weak-gpus", {"gpus"}),                 # every GPU node shown to a run given one
    ("weak-nothing", set(CHECKS) - {"interpreter"}),  # no sandbox: image agents are refused outright
])
def test_weakened_runtime_fails_exactly_its_checks(weak_registry, needs_bwrap, runtime, failing):
    code, lines, output = selfcheck("--runtime", runtime, "--sandbox", "bwrap", extra_path=weak_registry)
    assert list(lines) == list(CHECKS), output
    assert {name for name, line in lines.items() if line.startswith("FAIL")} == failing, output
    assert code == 1, output


def test_failure_lines_say_why(weak_registry, needs_bwrap):
    """A FAIL names what got through, so the runtime's author knows what to fix."""
    _, lines, output = selfcheck("--runtime", "weak-answers", "--sandbox", "bwrap", extra_path=weak_registry)
    assert "the agent read the private answers" in lines["answers"], output
    _, lines, output = selfcheck("--runtime", "weak-network", "--sandbox", "bwrap", extra_path=weak_registry)
    assert "the host's loopback service answered the agent" in lines["network"], output
    assert "the host's key reached the agent" in lines["keys"], output
    _, lines, output = selfcheck("--runtime", "weak-interpreter", "--sandbox", "bwrap", extra_path=weak_registry)
    if os.geteuid() == 0:
        assert "ran as uid 0 gid 0" in lines["interpreter"] and "held capabilities: CapEff" in lines["interpreter"], output
        assert "setcap /rexmle/workspace succeeded" in lines["interpreter"], output
    else:
        assert "run.json says 321" in lines["interpreter"], output  # the open-file limit was skipped


def test_unknown_runtime_is_a_usage_error_listing_the_registered_ones():
    code, lines, output = selfcheck("--runtime", "no-such-runtime")
    assert code == 2 and lines == {}, output
    assert "unknown runtime 'no-such-runtime'; available: docker, local, slurm" in output, output
