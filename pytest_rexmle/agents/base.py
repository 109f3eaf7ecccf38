"""The agent interface: how to start an agent under the contract, and what to do around the run.

An agent never grades itself and never sees private data: it gets a command line inside the runtime's
environment plus the contract variables (see the README, "Agent contract").
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ..errors import RexmleError
from ..task import Task


@dataclass(frozen=True)
class AgentContext:
    task: Task
    run_dir: Path
    workspace: Path
    submission: Path
    logs: Path
    public: Path
    time_limit: float


class Agent(ABC):
    #: options the agent understands; anything else is a usage error
    known_options: ClassVar[tuple[str, ...]] = ()
    required_options: ClassVar[tuple[str, ...]] = ()
    #: options that must never reach logs or result files (API keys)
    secret_options: ClassVar[tuple[str, ...]] = ()
    #: the isolations (``Runtime.isolation``: ``local``, ``docker``) the agent can run under; None = any.
    #: An image-based agent has nothing to start outside its container, so a wrong runtime would only
    #: show up hours later as an agent FAIL; the plugin turns the mismatch into a usage error instead.
    #: A class's default, which an instance may narrow (a command agent given env= or image=).
    supported_isolation: tuple[str, ...] | None = None
    #: the harness's own code (the ``sample`` agent's baseline copy), never an agent under test: what only
    #: guards against a hostile agent (refusing Landlock as the harness's own uid) need not stop it
    trusted: ClassVar[bool] = False

    def __init__(self, name: str, options: dict[str, str]) -> None:
        self.name = name
        self.options = options
        unknown = sorted(set(options) - set(self.known_options))
        if unknown:
            raise RexmleError(f"agent {name!r} does not understand option(s) {unknown}; known: {list(self.known_options)}")
        missing = [o for o in self.required_options if not options.get(o)]
        if missing:
            raise RexmleError(f"agent {name!r} needs --agent-option {missing[0]}=...")

    def check_isolation(self, isolation: str, runtime: str) -> None:
        """Raise RexmleError when this agent cannot run under ``isolation`` (provided by runtime ``runtime``)."""
        allowed = self.supported_isolation
        if allowed is None or isolation in allowed:
            return
        via = f" (runtime {runtime!r} isolates with {isolation!r})" if runtime != isolation else ""
        raise RexmleError(f"agent {self.name!r} runs only in {' or '.join(repr(a) for a in allowed)} isolation, "
                          f"not {isolation!r}{via}; pass --rexmle-runtime={allowed[0]}")

    @classmethod
    def option_problems(cls, name: str, options: dict[str, str]) -> list[str]:
        """What is wrong with these options on this host, each with its fix, found before any run (a folder that
        is not there would otherwise be a harness ERROR in every item); none by default. A class method, so the
        session lists them even when another option stops the agent from being made."""
        return []

    def model_protocols(self) -> tuple[str, ...]:
        """The model APIs (``openai``, ``anthropic``, ``gemini``) the agent calls, so the session can check the
        host has their keys before a run; an agent that declares none (``sample``, ``command``) gets no check."""
        return ()

    def public_options(self) -> dict[str, str]:
        return {k: ("***" if k in self.secret_options else v) for k, v in sorted(self.options.items())}

    def options_key(self) -> str:
        """A stable fingerprint of the agent and its options, used to match results for resume."""
        blob = json.dumps({"agent": self.name, "options": self.public_options()}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    #: the container image a container runtime starts for this agent (None: the runtime's default image);
    #: a class's default, which the agent's ``image=`` option replaces for its instance
    image: str | None = None

    def secret_environment(self) -> tuple[str, ...]:
        """Names of environment variables (API keys) the runtime passes through but never logs."""
        return ()

    def setup(self, ctx: AgentContext) -> Path | None:
        """Host-side preparation before the run; may return the working directory (inside the workspace)."""
        return None

    @abstractmethod
    def command(self, ctx: AgentContext) -> list[str]:
        """The argv to start inside the runtime."""

    def environment(self, ctx: AgentContext) -> dict[str, str]:
        return {}

    def software(self) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
        """The agent's own host software (read-only roots, PATH entries) the sandbox shows; none by default."""
        return (), ()

    def finish(self, ctx: AgentContext) -> None:  # noqa: B027 (an optional hook: most agents leave nothing behind)
        """Host-side work after the run (e.g. copy the best submission out of the agent's own folders)."""


__all__ = ["Agent", "AgentContext"]
