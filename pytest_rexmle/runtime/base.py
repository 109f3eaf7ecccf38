"""The environment interface every runtime implements.

A runtime gets a :class:`RunSpec` (what to run, which folders to expose and how, the contract
environment, the wall-clock limit) and returns a :class:`RunOutcome`. It owns isolation and killing;
it knows nothing about grading, so an agent can never reach the grader's inputs through it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

#: where the contract folders appear inside an isolated environment
SANDBOX_ROOT = Path("/rexmle")


@dataclass(frozen=True)
class RunSpec:
    task_id: str
    argv: list[str]
    env: dict[str, str]
    data_dir: Path            # the task's public folder (read-only)
    workspace: Path           # read-write scratch, also the working directory
    submission: Path          # read-write, graded afterwards
    logs: Path                # harness-owned: agent stdout/stderr land here
    instructions: Path        # read-only instructions file
    time_limit: float         # seconds of wall clock
    cwd: Path | None = None   # inside the workspace; default the workspace itself
    gpus: tuple[str, ...] = ()
    hidden: tuple[Path, ...] = ()  # host paths that must never be visible (private answers, caches)
    image: str | None = None       # container image for container runtimes (the agent's own image)
    network: str = "bridge"        # container runtimes: "bridge" or "none"
    secret_env: tuple[str, ...] = ()  # names in ``env`` whose values must never be logged


@dataclass
class RunOutcome:
    exit_code: int | None
    timed_out: bool
    duration: float
    stdout: Path
    stderr: Path
    note: str | None = None
    details: dict = field(default_factory=dict)


class RuntimeUnavailable(Exception):
    """The runtime cannot isolate the agent here; the message says what to install or which flag to pass."""


class Runtime(ABC):
    name: ClassVar[str]

    @classmethod
    def from_settings(cls, settings) -> "Runtime":
        """Build the runtime from the session's settings; each provider picks the options it knows."""
        return cls()

    @property
    def isolation(self) -> str:
        """What actually isolates the agent (``local`` or ``docker``); a scheduler runtime that wraps
        another provider answers with the inner one's, so agents can declare what they need."""
        return self.name

    def check(self) -> None:
        """Raise RuntimeUnavailable when this runtime cannot run agents on this machine."""

    @abstractmethod
    def contract_paths(self, spec: RunSpec) -> dict[str, str]:
        """The paths the agent sees for data, workspace, submission and instructions."""

    @abstractmethod
    def run(self, spec: RunSpec) -> RunOutcome:
        """Run to completion or until ``spec.time_limit``; nothing of the run may outlive this call."""

    def sweep_orphans(self) -> int:
        """Remove leftovers of dead sessions; returns how many were removed."""
        return 0
