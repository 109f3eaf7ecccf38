"""The environment interface every runtime implements.

A runtime gets a :class:`RunSpec` (what to run, which folders to expose and how, the contract
environment, the wall-clock limit) and returns a :class:`RunOutcome`. It owns isolation and killing;
it knows nothing about grading, so an agent can never reach the grader's inputs through it.
"""

from __future__ import annotations

import os
import signal
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ..limits import Limits
from .policy import PolicyOptions, SandboxPolicy, build_policy

#: where the contract folders appear inside an isolated environment
SANDBOX_ROOT = Path("/rexmle")
#: the agent's user name ($USER, $LOGNAME). Its uid is allocated per run and has no passwd entry, so
#: ``getpass.getuser()`` (PyTorch's compile cache, which ``torch.optim.Adam`` imports, pip, git) finds
#: the name here instead of failing with "uid not found".
AGENT_USER = "agent"


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
    network: str = "bridge"        # "gateway" (only the session's gateway; the session default), "bridge"
    #                                (internet, not the host's loopback; see each runtime), "host" or "none"
    secret_env: tuple[str, ...] = ()  # names in ``env`` whose values must never be logged
    limits: Limits | None = None      # resource limits of the run (None: the runtime's defaults)
    stage: Path | None = None         # the neutral folder the run's folders move to while it runs (runtime/staging.py)
    trusted: bool = False             # the harness's own agent (sample), not one under test (see Agent.trusted)
    #: host folders of the agent's own software stack (``--agent-option env=``: a venv or conda prefix and the
    #: interpreter it links to), shown read-only at their own paths; ``software_path`` joins PATH after the tools
    software: tuple[Path, ...] = ()
    software_path: tuple[Path, ...] = ()


@dataclass
class RunOutcome:
    exit_code: int | None
    timed_out: bool
    duration: float
    stdout: Path
    stderr: Path
    note: str | None = None
    details: dict = field(default_factory=dict)
    #: set when something outside the agent ended the run (e.g. "Slurm job 12 ended CANCELLED"): a FAIL
    killed: str | None = None


class RunHandle:
    """A launched run. ``wait()`` blocks until it has ended and returns its outcome.

    The default handle of a synchronous runtime does the whole run inside ``wait()``; a batch runtime
    (``Runtime.batches``) returns one as soon as the run is queued, so a session can launch every run
    first and wait afterwards. A runtime's own handle class may narrow ``runtime`` to its own class (the
    Slurm handle polls through its runtime's job table): callers outside the runtime use only ``record``
    and ``wait``.
    """

    runtime: Runtime
    spec: RunSpec

    def __init__(self, runtime: Runtime, spec: RunSpec) -> None:
        self.runtime, self.spec = runtime, spec

    def record(self) -> dict:
        """What to keep in ``run.json`` to find this run again (e.g. a job id); empty when nothing is."""
        return {}

    def wait(self) -> RunOutcome:
        """Block until the run has ended; nothing of it may outlive this call (see :meth:`Runtime.run`)."""
        return self.runtime.run(self.spec)


def is_under(path: Path, parent: Path) -> bool:
    """Whether ``path`` lies inside ``parent`` once links are resolved (a hidden folder under a bound one)."""
    try:
        path.resolve().relative_to(parent.resolve())
        return True
    except ValueError:
        return False


def folder_owner(path: Path) -> tuple[int, int]:
    """Who owns the folder holding ``path`` (the harness's user, before the agent gets the run's folders)."""
    st = os.lstat(path.parent)
    return st.st_uid, st.st_gid


def agent_logs(spec: RunSpec) -> tuple[Path, Path]:
    """The agent's stdout and stderr files of the run (its logs folder is created)."""
    spec.logs.mkdir(parents=True, exist_ok=True)
    return spec.logs / "agent.stdout.log", spec.logs / "agent.stderr.log"


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived during a run: unwind like Ctrl-C so every ``finally`` (removing containers,
    cancelling jobs) runs."""


def _raise_terminated(signum, frame) -> None:  # noqa: ARG001
    raise Terminated(f"received signal {signum}")


def trap_sigterm() -> Callable[[], None] | None:
    """Make SIGTERM raise :class:`Terminated`; returns what restores the previous handler, or None off
    the main thread (where no handler can be set)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.signal(signal.SIGTERM, _raise_terminated)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)

    return restore


class RuntimeUnavailable(Exception):
    """The runtime cannot isolate the agent here; the message says what to install or which flag to pass."""


class Runtime(ABC):
    """The contract between the harness and a place agents run (see ``pytest_rexmle.testing`` for the
    conformance suite every runtime should pass: ``rexmle selfcheck --runtime NAME``).

    What callers use, and nothing else: the class attributes below; ``from_settings`` and
    ``settings_options`` (building it); ``check``, ``network_notices``, ``facts`` and ``isolation`` (session
    start and report); ``stage``, ``contract_paths`` and ``launch`` or ``run`` (one run), ``attach`` (resume),
    ``close`` (session end), ``live_states`` (``rexmle status``) and ``sweep_orphans`` (session start). Only
    ``run`` is abstract: every other member has the default of a synchronous runtime whose agent sees the
    contract folders under :data:`SANDBOX_ROOT`. A runtime registers itself as an entry point of the
    ``rexmle.runtimes`` group (``name = "package.module:Class"``); the built-in ones are registered the same
    way, in this project's ``pyproject.toml``.
    """

    #: the name it is registered and recorded under (``--rexmle-runtime``, ``run.json``'s ``runtime``)
    name: ClassVar[str]
    #: True when ``launch`` returns before the run ends (a scheduler): the session's executor then starts
    #: all its runs at once (the scheduler owns the queue and the GPUs) and each waits for its own
    batches: ClassVar[bool] = False
    #: set by the session when every agent of it is the harness's own (``Agent.trusted``): a provider may then
    #: skip a refusal that only guards against a hostile agent
    trusted_agents: bool = False
    #: the limits of a run whose spec names none (a task always does: task.yaml over :class:`Limits`)
    default_limits: ClassVar[Limits] = Limits()
    #: the session's part of each run's policy (``--rexmle-limit``, uids, egress, budget)
    policy_options: PolicyOptions = PolicyOptions()

    @classmethod
    def from_settings(cls, settings) -> Runtime:
        """Build the runtime from the session's settings; each provider picks the options it knows."""
        return cls(**cls.settings_options(settings))

    def policy(self, spec: RunSpec) -> SandboxPolicy:
        """The run's sandbox policy, decided here for every mechanism; each runtime renders it once."""
        return build_policy(spec, self.policy_options, self.default_limits)

    @classmethod
    def settings_options(cls, settings) -> dict:
        """The constructor options this provider takes from the session's settings, as plain JSON data:
        a scheduler that runs the provider on another machine (Slurm) sends them along with the run."""
        return {}

    @property
    def isolation(self) -> str:
        """What actually isolates the agent (``local`` or ``docker``); a scheduler runtime that wraps
        another provider answers with the inner one's, so agents can declare what they need."""
        return self.name

    def check(self) -> None:
        """Raise RuntimeUnavailable when this runtime cannot run agents on this machine (default: it can)."""
        return None

    def check_image(self, image: str) -> None:
        """Session start, for each agent with an image: raise RuntimeUnavailable when this runtime cannot run
        that image here (the message says what to do); an engine runtime finds out when it starts it."""
        return None

    def network_notices(self, network: str) -> list[str]:
        """Session start: raise :class:`RuntimeUnavailable` when ``network`` cannot be given to agents here,
        else return warnings to print once per session (e.g. a fallback to another network)."""
        return []

    def facts(self) -> dict:
        """How agents actually run, for the session report (e.g. ``{"sandbox": "landlock"}``)."""
        return {}

    def stage(self, spec: RunSpec) -> RunSpec:
        """Called before the contract is written: a runtime whose agent sees host paths (Landlock) stages
        the run now, so that the contract (instructions, environment) names the neutral stage; the others
        stage inside ``run`` (see :mod:`.staging`)."""
        return spec

    def contract_paths(self, spec: RunSpec) -> dict[str, str]:
        """The paths the agent sees for data, workspace, submission and instructions (by default those
        under :data:`SANDBOX_ROOT`, where a mount namespace shows the run's folders)."""
        return {"data": str(SANDBOX_ROOT / "data"), "workspace": str(SANDBOX_ROOT / "workspace"),
                "submission": str(SANDBOX_ROOT / "submission"), "instructions": str(SANDBOX_ROOT / "instructions.md")}

    def agent_environment(self, spec: RunSpec, path: str, tmp: str = "/tmp") -> dict[str, str]:
        """The agent's variables: ``path`` (its tools, then the system's or the image's folders, never the
        harness's Python), its workspace as HOME, its user name (:data:`AGENT_USER`), then the run's own."""
        if spec.software_path:  # the agent's own stack: after its tools, before the system's folders
            tools, _, rest = path.partition(":")
            path = ":".join([tools, *map(str, spec.software_path), *([rest] if rest else [])])
        return {"PATH": path, "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1",
                "HOME": self.contract_paths(spec)["workspace"], "TMPDIR": tmp,
                "USER": AGENT_USER, "LOGNAME": AGENT_USER, **spec.env}

    def workdir(self, spec: RunSpec) -> Path:
        """The agent's working directory as it sees it: ``spec.cwd`` inside its workspace, else the workspace."""
        inside = Path(self.contract_paths(spec)["workspace"])
        return inside / spec.cwd.relative_to(spec.workspace) if spec.cwd is not None else inside

    @abstractmethod
    def run(self, spec: RunSpec) -> RunOutcome:
        """Run to completion or until ``spec.time_limit``; nothing of the run may outlive this call."""

    def launch(self, spec: RunSpec) -> RunHandle:
        """Start a run; the default defers the whole (synchronous) run to ``wait()``."""
        return RunHandle(self, spec)

    def attach(self, record: dict, run_dir: Path) -> RunHandle | None:
        """A handle on a run an earlier session launched (``record`` is its ``run.json``), or None when
        nothing of it survives; only batch runtimes have runs that outlive the session."""
        return None

    def close(self) -> None:
        """End of session (also on Ctrl-C): stop what this session still has in flight, unless asked not to
        (default: nothing is, a synchronous run ends inside ``run``)."""
        return None

    @classmethod
    def live_states(cls, records: list[dict]) -> dict[str, dict]:
        """For ``rexmle status``: the scheduler's view of unfinished runs, by run folder (default none)."""
        return {}

    # -- a batch runtime's jobs, watched by the session instead of one process per run -------------------------
    def hand_off(self, handle: RunHandle, heartbeat: Path | None = None) -> str | None:
        """Stop tracking a queued run so that this process may exit with it still queued or running, and
        return the scheduler's id of it; None where the run cannot outlive this process (the default: a
        synchronous runtime's run is its process's child). ``heartbeat``: the session's heartbeat file; the
        job stops itself when it stays still (the session is gone), None for a job that outlives its session
        (``--rexmle-slurm-detach``)."""
        return None

    @classmethod
    def job_states(cls, job_ids: list[str]) -> dict[str, dict[str, str]]:
        """The scheduler's record of each job (one query for all): ``state`` upper case (``PENDING``,
        ``RUNNING``, ``COMPLETED``) and whatever else it says; a job the scheduler does not know yet is left out."""
        return {}

    def known_ended(self, job_id: str, record: dict[str, str]) -> None:
        """The session's watcher saw job ``job_id`` end with ``record`` (:meth:`job_states`): a harness that
        attaches to it takes that as the scheduler's answer instead of asking again."""
        return None

    #: the states after which a job will not run again (:meth:`job_states`)
    final_states: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def cancel_jobs(cls, job_ids: list[str]) -> None:
        """Cancel these jobs (one call for all): the session stops while they are queued or running."""
        return None

    def sweep_orphans(self) -> int:
        """Remove leftovers of dead sessions; returns how many were removed."""
        return 0


__all__ = ["Runtime", "RunSpec", "RunOutcome", "RunHandle", "RuntimeUnavailable", "Terminated", "SANDBOX_ROOT",
           "AGENT_USER", "agent_logs", "folder_owner", "is_under", "trap_sigterm"]
