"""Your own agent brings its stack (issue 28): ``--agent=command`` with ``env=`` (a host venv) or ``image=``.

The README's worked example (``examples/my_agent.py``: reads the task, fits a model with numpy, asks a
model through the gateway, validates, submits) runs end to end on the ldct-iqa twin and is graded ``ok``:
with a real venv holding numpy and tifffile under bubblewrap and under Landlock, and in the offline test
image through the docker runtime, which the session chooses itself (no ``--rexmle-runtime``).

The venv is made once per session from the system's ``/usr/bin/python3`` in a folder every user can
enter: a root harness runs the agent as a uid of its own, which under Landlock (no mount namespace)
must reach the venv and the interpreter its ``bin/python`` links to by itself.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from pytest_rexmle.errors import RexmleError

from .conftest import REPO, report_json, require_service, run_folders
from .sandbox.conftest import require_mechanism

EXAMPLE = REPO / "examples"
#: prints where python and numpy come from, then runs the README's example agent
CMD = 'python -c "import sys, numpy; print(\'stack:\', sys.prefix, numpy.__file__)" && python my_agent.py'


@pytest.fixture(scope="session")
def numpy_venv():
    """A real venv with numpy and tifffile (pip, from the configured index or cache), readable by every uid."""
    base = Path("/usr/bin/python3")
    require_service(base.exists(), "REXMLE_REQUIRE_SANDBOX", "a system /usr/bin/python3 to make a venv from")
    folder = Path(tempfile.mkdtemp(prefix="rexmle-own-agent-", dir="/var/tmp"))
    folder.chmod(0o755)
    venv = folder / "venv"
    made = subprocess.run([str(base), "-m", "venv", str(venv)], capture_output=True, text=True)
    if made.returncode == 0:
        made = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "numpy", "tifffile"],
                              capture_output=True, text=True, timeout=600)
    require_service(made.returncode == 0, "REXMLE_REQUIRE_SANDBOX", f"a venv with numpy ({made.stderr[-300:]})")
    yield venv
    shutil.rmtree(folder, ignore_errors=True)


def _graded(bench, task: str = "ldct-iqa") -> tuple[dict, dict, str]:
    record = report_json(bench.path)["tasks"][0]
    run = run_folders(bench.path, task)[-1]
    stdout = (run / "logs" / "agent.stdout.log").read_text()
    return record, json.loads((run / "run.json").read_text()), stdout


@pytest.mark.parametrize("mechanism", ["bwrap", "landlock"])
def test_example_agent_with_its_venv_is_graded_ok(bench, numpy_venv, mechanism):
    require_mechanism(mechanism)
    result = bench("--agent=command", f"--agent-option=cmd={CMD}", f"--agent-option=dir={EXAMPLE}",
                   f"--agent-option=env={numpy_venv}", f"--rexmle-sandbox={mechanism}", "-k", "ldct-iqa")
    result.assert_outcomes(passed=1)
    record, run, stdout = _graded(bench)
    assert record["status"] == "ok", record
    assert run["runtime"] == "local" and "runtime_reason" in run  # the default, chosen and recorded
    # python and numpy are the venv's, inside the sandbox, at the venv's own path
    stack = next(line for line in stdout.splitlines() if line.startswith("stack:")).split()
    assert stack[1] == str(numpy_venv)
    assert stack[2].startswith(str(numpy_venv / "lib"))
    assert "validation: {'ok': True" in stdout
    # the guide's first agent beats every human on the synthetic twin, which says nothing about the humans:
    # no "beats-humans" suspicion (issue #40.4)
    assert record["suspected_leak"] is None and "suspected leak" not in result.stdout.str(), record


def test_env_that_holds_a_hidden_folder_is_refused(tmp_path):
    from pytest_rexmle.limits import Limits
    from pytest_rexmle.runtime.base import RunSpec
    from pytest_rexmle.runtime.policy import PolicyOptions, build_policy

    env, cache = tmp_path / "env", tmp_path / "env" / "cache"
    (env / "bin").mkdir(parents=True)
    cache.mkdir()
    folders = [tmp_path / name for name in ("data", "ws", "sub", "logs")]
    spec = RunSpec("ldct-iqa", ["true"], {}, folders[0], folders[1], folders[2], folders[3], tmp_path / "i.md", 60.0,
                   hidden=(cache,), software=(env,), software_path=(env / "bin",))
    with pytest.raises(RexmleError, match="must never see"):
        build_policy(spec, PolicyOptions(), Limits())
    assert build_policy(dataclasses.replace(spec, hidden=(tmp_path / "elsewhere",)), PolicyOptions(),
                        Limits()).software == (env,)


def test_env_names_the_venv_and_the_interpreter_it_links_to(tmp_path):
    from pytest_rexmle.agents import get_agent

    outside = tmp_path / "pyenv" / "versions" / "3.x"
    (outside / "bin").mkdir(parents=True)
    (outside / "bin" / "python3.x").write_text("")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {outside / 'bin'}\n")
    os.symlink(outside / "bin" / "python3.x", venv / "bin" / "python")
    agent = get_agent("command", {"cmd": "python a.py", "env": str(venv)})
    roots, path = agent.software()
    assert roots == (venv, outside) and path == (venv / "bin",)
    assert agent.supported_isolation == ("local",)
    assert agent.environment(None) == {"VIRTUAL_ENV": str(venv)}
    conda = tmp_path / "conda"
    (conda / "bin").mkdir(parents=True)
    (conda / "conda-meta").mkdir()
    (conda / "bin" / "python").write_text("")
    assert get_agent("command", {"cmd": "x", "env": str(conda)}).environment(None) == {"CONDA_PREFIX": str(conda)}
    with pytest.raises(RexmleError, match="not a virtual environment"):
        get_agent("command", {"cmd": "x", "env": str(tmp_path / "nothing")})
    with pytest.raises(RexmleError, match="give one"):
        get_agent("command", {"cmd": "x", "env": str(venv), "image": "rexmle/base"})


def test_the_tools_give_no_python_stand_in_to_an_agent_with_its_own(tmp_path):
    from pytest_rexmle.runtime import agent_tools

    tools = agent_tools.write_tools(tmp_path / "bin", python=False)
    assert not (tools / "python").exists()
    assert stat.S_IMODE((tools / "rexmle").stat().st_mode) == 0o755


def test_landlock_refuses_an_env_the_agents_uid_cannot_read_and_says_how(bench, tmp_path):
    """A root harness runs the agent as a uid of its own; Landlock has no mount namespace to show it a venv
    under a 0700 folder (pytest's own tmp root here), so the session stops naming the way out."""
    if os.geteuid() != 0:
        pytest.skip("a non-root harness runs Landlock agents as its own uid (refused for other reasons)")
    require_mechanism("landlock")
    hidden_home = tmp_path / "home"
    (hidden_home / "env" / "bin").mkdir(parents=True)
    hidden_home.chmod(0o700)
    os.symlink("/usr/bin/python3", hidden_home / "env" / "bin" / "python")
    result = bench("--agent=command", "--agent-option=cmd=python -c pass", f"--agent-option=env={hidden_home / 'env'}",
                   "--rexmle-sandbox=landlock", "-k", "ldct-iqa")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    out = result.stdout.str() + result.stderr.str()
    assert "the agent's environment cannot be read by its uid" in out and str(hidden_home / "env") in out
    assert "--rexmle-sandbox=bwrap" in out
