"""A runtime's side of ``--rexmle-network=gateway``: open the run on the session's gateway, give the agent
its variables, and bring the gateway's record of the run back into ``run.json``.

The runtimes own this (not ``run.py``) because only they know where the gateway's listener can live: in
the sandbox's own network namespace (bubblewrap, Landlock, Docker) or on a Slurm node, where the node's
harness process runs a gateway of its own for the runs it hosts. Whatever the runtime, the agent gets
the run's random token in place of every key it was given (``RunSpec.secret_env``), so the real keys stay
in the harness process (and, on a Slurm node, in the job's environment, never the agent's).
"""

from __future__ import annotations

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
            from ..gateway import session_gateway
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
    from .local import silence_network_warnings

    silence_network_warnings()
    return notices


def open_run(factory: GatewayFactory, spec: RunSpec, policy: SandboxPolicy) -> GatewayRun:
    """The run's handle on the gateway: its token, trajectory file and the policy's budget and egress
    allow-list, keyed by the run folder."""
    run_id = f"{spec.task_id}-{spec.logs.parent.name}"
    extra: dict = {}
    if policy.budget:
        from ..gateway import Budget

        extra["budget"] = Budget.parse(policy.budget)
    if policy.egress_allow:
        extra["egress_allow"] = tuple(policy.egress_allow)
    return factory().open_run(run_id, logs_dir=spec.logs, submission_dir=spec.submission, task_id=spec.task_id,
                              public_dir=spec.data_dir, **extra)


def agent_environment(spec: RunSpec, run: GatewayRun, base_url: str) -> dict[str, str]:
    """The agent's environment under the gateway: every secret it was given becomes the run's token, then
    the gateway's own variables (base URLs, proxies, keys = token) go on top."""
    env = dict(spec.env)
    for name in spec.secret_env:
        if name in env:
            env[name] = run.token
    env.update(run.environment(base_url))
    return env


def close_run(run: GatewayRun, listeners: list) -> dict:
    """End the run on the gateway: its listeners are shut down first, which wakes the gateway's accept
    loop at once (closing alone leaves it to notice on its next poll), then its record."""
    import socket

    for listener in listeners:
        try:
            listener.shutdown(socket.SHUT_RDWR)
        except OSError:  # already closed, or never connected: nothing to wake
            pass
    return run.close()


def record_details(record: dict) -> dict:
    """What ``run.json`` keeps of the gateway's record (``GatewayRun.close()``): the record itself under
    ``gateway`` (``run.finish`` turns it into run.json's fields) and, so that run.json has them whichever
    side is present, its ``usage``, ``egress`` and ``budget_exhausted``."""
    details: dict = {"network": "gateway", "gateway": record}
    for key in ("usage", "egress", "budget_exhausted"):
        if key in record:
            details[key] = record[key]
    if record.get("calls"):
        details["model_calls"] = str(Path(record["calls"]).name)
    return details
