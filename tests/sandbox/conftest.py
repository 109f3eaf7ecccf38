"""Fixtures for the local sandbox tests: each test runs once per mechanism (bubblewrap, Landlock).

A mechanism that does not work here skips, unless CI requires it: ``REXMLE_REQUIRE_SANDBOX=1`` for
bubblewrap and ``REXMLE_REQUIRE_LANDLOCK=1`` for Landlock turn that skip into a failure.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_rexmle.limits import Limits
from pytest_rexmle.runtime.base import RunOutcome, RunSpec
from pytest_rexmle.runtime.local import LocalRuntime
from pytest_rexmle.runtime.sandbox.probe import probe

from ..conftest import require_service

REQUIRE = {"bwrap": ("REXMLE_REQUIRE_SANDBOX", "bubblewrap (bwrap)"),
           "landlock": ("REXMLE_REQUIRE_LANDLOCK", "Landlock (kernel LSM + landlockpy)")}
SECRET = "rexmle-private-answer-7f3a"


def require_mechanism(mechanism: str) -> None:
    variable, what = REQUIRE[mechanism]
    result = probe(mechanism)
    require_service(result.works, variable, f"{what}: {result.reason}")


@pytest.fixture(params=["bwrap", "landlock"])
def mechanism(request) -> str:
    require_mechanism(request.param)
    return request.param


@dataclass
class AgentRun:
    outcome: RunOutcome
    stdout: str
    stderr: str
    root: Path

    def report(self) -> dict:
        lines = [line for line in self.stdout.splitlines() if line.startswith("{")]
        assert lines, f"the agent printed no report; stderr: {self.stderr[-2000:]}"
        return json.loads(lines[-1])


def run_agent(tmp_path: Path, mechanism: str, code: str, *, limits: Limits | None = None,
              overrides: dict[str, str] | None = None, network: str = "host", time_limit: float = 60,
              files: dict[str, str] | None = None, gpus: tuple[str, ...] = ()) -> AgentRun:
    """Run ``code`` as the agent (Python, in its workspace) through the real local runtime."""
    root = tmp_path / "run"
    public, private = tmp_path / "data" / "public", tmp_path / "data" / "private"
    for folder in (public, private, root / "workspace", root / "submission", root / "logs"):
        folder.mkdir(parents=True)
    (public / "train.csv").write_text("case,label\n1,0\n")
    (private / "answers.csv").write_text(f"case,label\n2,{SECRET}\n")
    (root / "instructions.md").write_text("do the task\n")
    (root / "workspace" / "agent.py").write_text(textwrap.dedent(code))
    for name, text in (files or {}).items():
        (root / "workspace" / name).write_text(text)
    spec = RunSpec("sandbox-test", ["python3", "agent.py"], {"REXMLE_PRIVATE_HINT": "none"}, public,
                   root / "workspace", root / "submission", root / "logs", root / "instructions.md", time_limit,
                   hidden=(private, tmp_path / "data"), network=network, limits=limits or Limits(), gpus=gpus)
    # these tests exercise the sandbox's mechanics: where the harness is not root, Landlock can only run the
    # agent as this user's own uid, which sessions refuse by default (tested in test_unprivileged.py and the
    # security suite); here it is asked for by name
    runtime = LocalRuntime(sandbox=mechanism, limits=overrides, unsafe_same_uid=True)
    outcome = runtime.run(runtime.stage(spec))  # as run.launch does: Landlock's contract names the stage
    return AgentRun(outcome, outcome.stdout.read_text(errors="replace"), outcome.stderr.read_text(errors="replace"), root)
