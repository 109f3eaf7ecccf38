"""One run's sandbox policy: what the agent may read and write, its limits, its network and its uid.

Why one object: bubblewrap, Landlock and Docker each express the same promise in their own terms
(``--ro-bind`` arguments, Landlock rules, container mounts and ``mem_limit``). The policy is decided
once per run, from the run's spec and the session's options (:class:`PolicyOptions`), by
:meth:`~pytest_rexmle.runtime.base.Runtime.policy`; each mechanism only *renders* it
(``sandbox/bwrap.py``, ``sandbox/landlock.py``, ``docker.py``) and none reads settings or the
environment to change it. A Slurm job ships the options to the node, whose inner runtime builds the
same policy there.

Precedence of the values that end up here (the README's "Configuration" says the same): a
command-line option, then its ini-file twin, then the ``REXMLE_*`` variable where one exists, then the
task's ``task.yaml`` (``limits:``, the time budget), then the built-in default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..limits import Limits

if TYPE_CHECKING:
    from .base import RunSpec


@dataclass(frozen=True)
class Mount:
    """A host path the agent reaches by its contract ``role``; only the run's own folders are writable."""

    role: str  # data, workspace, submission or instructions: the contract names the agent knows it by
    source: Path
    writable: bool = False


@dataclass(frozen=True)
class IdentityPolicy:
    """Which uid the agent may run as: a root harness leases one from ``uid_range`` per run; ``as_root``
    and ``same_uid`` are the explicit, recorded exceptions (``--rexmle-agent-as-root``,
    ``--rexmle-unsafe-same-uid``)."""

    uid_range: str | None = None
    as_root: bool = False
    same_uid: bool = False


@dataclass(frozen=True)
class PolicyOptions:
    """The session's part of every run's policy, as plain data (it travels to a Slurm node as JSON)."""

    limits: Mapping[str, str] = field(default_factory=dict)  # --rexmle-limit NAME=VALUE, checked by settings
    identity: IdentityPolicy = IdentityPolicy()
    egress_allow: tuple[str, ...] = ()
    budget: str | None = None

    @classmethod
    def from_settings(cls, settings: Any) -> PolicyOptions:
        identity = IdentityPolicy(settings.agent_uids, settings.agent_as_root, settings.unsafe_same_uid)
        return cls(limits=dict(settings.limits), identity=identity, egress_allow=tuple(settings.egress_allow),
                   budget=settings.budget)

    def runtime_options(self) -> dict[str, Any]:
        """The constructor keywords of a local or Docker runtime (and of a Slurm job's inner runtime)."""
        return {"limits": dict(self.limits), "agent_uids": self.identity.uid_range,
                "agent_as_root": self.identity.as_root, "unsafe_same_uid": self.identity.same_uid,
                "gateway_budget": self.budget, "egress_allow": list(self.egress_allow)}


@dataclass(frozen=True)
class SandboxPolicy:
    """Everything a mechanism enforces for one run; frozen, so a renderer cannot loosen it on the way."""

    mounts: tuple[Mount, ...]
    hidden: tuple[Path, ...]
    limits: Limits
    time_limit: float
    network: str  # gateway, bridge, host or none (--rexmle-network)
    identity: IdentityPolicy = IdentityPolicy()
    egress_allow: tuple[str, ...] = ()
    budget: str | None = None
    gpus: tuple[str, ...] = ()
    #: the agent's own software (RunSpec.software): readable and executable at its own path, never writable
    software: tuple[Path, ...] = ()

    @property
    def read_only(self) -> tuple[Path, ...]:
        return tuple(m.source for m in self.mounts if not m.writable)

    @property
    def read_write(self) -> tuple[Path, ...]:
        return tuple(m.source for m in self.mounts if m.writable)


def build_policy(spec: RunSpec, options: PolicyOptions, default_limits: Limits) -> SandboxPolicy:
    """The run's policy: the spec's folders and network, its task's limits (else the mechanism's
    defaults) under the session's ``--rexmle-limit`` overrides."""
    _check_software(spec)
    base = spec.limits if spec.limits is not None else default_limits
    if not isinstance(base, Limits):  # a mapping of NAME=VALUE (callers that build a spec by hand)
        base = default_limits.with_overrides(dict(base))
    mounts = (Mount("data", spec.data_dir), Mount("workspace", spec.workspace, writable=True),
              Mount("submission", spec.submission, writable=True), Mount("instructions", spec.instructions))
    return SandboxPolicy(mounts=mounts, hidden=tuple(spec.hidden), limits=base.with_overrides(dict(options.limits)),
                         time_limit=spec.time_limit, network=spec.network, identity=options.identity,
                         egress_allow=tuple(options.egress_allow), budget=options.budget, gpus=tuple(spec.gpus),
                         software=tuple(spec.software))


def _check_software(spec: RunSpec) -> None:
    """The agent's own stack is shown whole (Landlock cannot hide a folder inside an allowed one): it may
    neither hold nor lie inside a hidden folder (the answers, the cache, the runs and reports folders)."""
    from ..errors import RexmleError  # start-up: keeps 35 lines out of the Slurm job
    from .base import is_under  # runtime.base imports this module at its top

    for root in spec.software:
        for hidden in spec.hidden:
            if is_under(hidden, root) or is_under(root, hidden):
                raise RexmleError(f"the agent's software folder {root} overlaps {hidden}, which the agent must "
                                  "never see; give a folder that holds only the environment (a venv or conda prefix)")
