"""A runtime's side of ``--rexmle-network=gateway``: open the run on the session's gateway, give the agent
its variables, and bring the gateway's record of the run back into ``run.json``.

The runtimes own this (not ``run/launch.py``) because only they know where the gateway's listener can live: in
the sandbox's own network namespace (bubblewrap, Landlock, Docker) or on a Slurm node, where the node's
harness process runs a gateway of its own for the runs it hosts. Whatever the runtime, the agent gets
the run's random token in place of every key it was given (``RunSpec.secret_env``), so the real keys stay
in the harness process (and, on a Slurm node, in the job's environment, never the agent's).
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from .base import RunSpec, RuntimeUnavailable
from .policy import SandboxPolicy

#: the networks every runtime knows; ``gateway`` is the session default
NETWORKS = ("gateway", "bridge", "host", "none")
DEFAULT_NETWORK = "gateway"


class GatewayRun(Protocol):
    """What a runtime needs of the gateway's per-run handle (``pytest_rexmle.gateway``)."""
    token: str

    def environment(self, base_url: str) -> dict[str, str]: ...
    def serve(self, listener: Any) -> None: ...
    def host_address(self) -> tuple[str, int]: ...
    def close(self) -> dict: ...


GatewayFactory = Callable[[], Any]  # returns an object with ``open_run`` (the session's gateway)


def session_gateway_factory(settings=None) -> GatewayFactory:
    """The session's gateway, created on first use (the harness process's one, also on a Slurm node)."""
    def make():
        try:
            from ..gateway import session_gateway  # start-up: keeps 31 lines out of the node probe
        except ImportError as exc:
            raise RuntimeUnavailable(f"--rexmle-network=gateway needs the gateway (pytest_rexmle.gateway): {exc}; "
                                     "--rexmle-network=none runs without any network") from None
        return session_gateway(settings)

    return make


BRIDGE_WARNING = ("rexmle: --rexmle-network=bridge gives agents the internet, where every task's public release, "
                  "test labels included, is downloadable; these results are recorded with network=bridge and are "
                  "not comparable with gateway runs (the default)")


def network_notices(runtime, network: str) -> list[str]:
    """The session's network warnings, said once by the controller: ``bridge`` leaves the answers
    downloadable, plus what the runtime says (a fallback to the host's network). Raises
    ``RuntimeUnavailable`` when the runtime cannot give ``network`` safely. Silences the runtimes'
    own per-run warnings in this process."""
    notices = [BRIDGE_WARNING] if network == "bridge" else []
    notices += runtime.network_notices(network)
    from .local import silence_network_warnings  # runtime.local imports this module at its top

    silence_network_warnings()
    return notices


#: the run's model-call record may take at most 1/this of the run's disk limit (and the gateway's own budget)
RECORD_SHARE_OF_DISK = 4


class RunGateway:
    """One run on the session's gateway, from the runtime's side: opened with the policy's budget and
    egress allow-list, keyed by the run folder; it serves the listeners the runtime places where the agent
    can reach them, and brings the gateway's record of the run back for ``run.json``."""

    def __init__(self, factory: GatewayFactory, spec: RunSpec, policy: SandboxPolicy) -> None:
        extra: dict = {}
        if policy.budget:
            from ..gateway import Budget  # start-up: keeps 31 lines out of the node probe

            extra["budget"] = Budget.parse(policy.budget)
        if policy.egress_allow:
            extra["egress_allow"] = tuple(policy.egress_allow)
        disk = getattr(spec.limits, "disk", None)
        if disk:  # the record of the run's calls takes at most a quarter of what the run may write
            extra["record_bytes"] = max(1, disk // RECORD_SHARE_OF_DISK)
        self.run: GatewayRun = factory().open_run(f"{spec.task_id}-{spec.logs.parent.name}", logs_dir=spec.logs,
                                                  submission_dir=spec.submission, task_id=spec.task_id,
                                                  public_dir=spec.data_dir, **extra)
        self.listeners: list = []

    def agent_spec(self, spec: RunSpec, base_url: str) -> RunSpec:
        """The spec with the agent's environment under the gateway: every secret it was given becomes the
        run's token, then the gateway's own variables (base URLs, proxies, keys = token) go on top."""
        env = {**spec.env, **{name: self.run.token for name in spec.secret_env if name in spec.env}}
        return dataclasses.replace(spec, env={**env, **self.run.environment(base_url)})

    def serve(self, listener: Any) -> None:
        self.listeners.append(listener)
        self.run.serve(listener)

    def close(self) -> dict:
        """End the run on the gateway and return what ``run.json`` keeps of its record.

        The listeners are shut down first, which wakes the gateway's accept loop at once (closing alone
        leaves it to notice on its next poll). The record goes under ``gateway`` (``run.finish`` turns it
        into run.json's fields) and, so that run.json has them whichever side is present, its ``usage``,
        ``egress`` and ``budget_exhausted`` are copied out."""
        for listener in self.listeners:
            try:
                listener.shutdown(socket.SHUT_RDWR)
            except OSError:  # already closed, or never connected: nothing to wake
                pass
        record = self.run.close()
        details: dict = {"network": "gateway", "gateway": record}
        details.update({key: record[key] for key in ("usage", "egress", "budget_exhausted") if key in record})
        if record.get("calls"):
            details["model_calls"] = str(Path(record["calls"]).name)
        return details
