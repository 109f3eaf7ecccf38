"""What a Slurm job runs on the compute node: rebuild the run's spec and inner runtime, run, write the outcome.

The harness writes ``spec.json`` (the :class:`RunSpec` plus the inner runtime's name and options) into
the run folder's harness-owned ``slurm/`` folder; the job calls :func:`node_main` on it (through
submitit, or by hand: ``python -m pytest_rexmle.runtime.slurm_job <spec.json>``). The inner runtime (the
bubblewrap sandbox or a Docker container) then isolates the agent exactly as it does on one machine,
and the outcome lands in ``outcome.json`` next to the spec, where the submitting host reads it.
Under ``--rexmle-network=gateway`` this process is the node's harness: the inner runtime opens the run on
this process's own gateway (created on first use, with the provider keys of the job's environment), and
its record (usage, egress) travels back in the outcome's details like everything else.

Both files are typed records (:class:`NodeSpec`, :class:`RunOutcome`) written and read as plain JSON: the
node builds only the declared types, whatever the file says.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..documents import parse
from ..jsonfile import write_json_atomic
from . import RUNTIMES
from .base import RunOutcome, RunSpec

SPEC_NAME = "spec.json"
OUTCOME_NAME = "outcome.json"


# -- the files that cross to the node and back ---------------------------------------------------------------
class NodeSpec(BaseModel):
    """``spec.json``: the run's spec and the inner runtime, read as these declared types only (a file cannot
    choose a class), so fields added to :class:`RunSpec` travel without changes here."""

    model_config = ConfigDict(extra="forbid")

    inner: str
    inner_options: dict[str, Any]
    spec: RunSpec


def _untagged(value: Any) -> Any:
    """A spec of a version before typed records (``{"$path": ..}``, ``{"$tuple": ..}``, ``{"$dict": ..}``,
    ``{"$dataclass": <name>, "fields": ..}``) as plain JSON; the class name it gives is ignored, the model's
    field types decide what is built (a job queued before an upgrade still starts)."""
    if isinstance(value, list):
        return [_untagged(v) for v in value]
    if not isinstance(value, dict):
        return value
    for tag in ("$path", "$tuple", "$dict"):
        if tag in value:
            return _untagged(value[tag])
    return _untagged(value["fields"]) if "$dataclass" in value else {k: _untagged(v) for k, v in value.items()}


def write_spec(path: Path, spec: RunSpec, inner: str, inner_options: dict) -> None:
    """The spec without the values of its secret variables (provider keys): the file lies on the shared file
    system in the run folder; the job gets them from its own environment (:func:`with_secrets`)."""
    kept = {k: v for k, v in spec.env.items() if k not in spec.secret_env}
    spec = dataclasses.replace(spec, env=kept)
    write_json_atomic(path, NodeSpec(inner=inner, inner_options=inner_options, spec=spec).model_dump(mode="json"))


def with_secrets(spec: RunSpec, environ: MutableMapping[str, str] | None = None) -> RunSpec:
    """The spec's secret variables back from the job's environment (sbatch passes the submitting shell's)."""
    env: MutableMapping[str, str] = os.environ if environ is None else environ
    found = {k: env[k] for k in spec.secret_env if env.get(k)}
    return dataclasses.replace(spec, env={**spec.env, **found}) if found else spec


def read_spec(path: Path) -> tuple[RunSpec, str, dict]:
    doc = json.loads(path.read_text())
    if isinstance(doc, dict) and isinstance(doc.get("spec"), dict) and "$dataclass" in doc["spec"]:
        doc = {**doc, "spec": _untagged(doc["spec"])}
    node = parse(NodeSpec, doc, path)
    return node.spec, node.inner, node.inner_options


def outcome_to_json(outcome: RunOutcome) -> dict:
    return {f.name: (str(v) if isinstance(v, Path) else v)
            for f in dataclasses.fields(outcome) for v in [getattr(outcome, f.name)]}


def outcome_from_json(doc: dict) -> RunOutcome:
    """Typed: keys of a newer harness are ignored, a wrong type is refused with the field's name."""
    return parse(RunOutcome, doc, "run outcome")


# -- on the node ------------------------------------------------------------------------------------------
#: beside the job's spec: the path of the heartbeat of the session that watches the job (none: detached)
HEARTBEAT_POINTER = "session-heartbeat"
#: how long the session's heartbeat may stand still before the job stops itself (its session is gone)
STALE_ENV, STALE_SECONDS = "REXMLE_SESSION_STALE_SECONDS", 600.0


def watch_session(pointer: Path, stale: float, check: float = 5.0, stop: threading.Event | None = None,
                  on_stale=None) -> threading.Thread:
    """A thread that sends this job SIGTERM when the heartbeat its ``pointer`` names stands still for
    ``stale`` seconds of this node's clock (only the content is compared, so clock skew between the node
    and the submitting host does not matter). Why: no process of the session waits for a queued job, so
    a session killed with SIGKILL cannot cancel its jobs; they stop themselves instead, within ``stale``.
    The pointer is rewritten when another session takes the job over (``--rexmle-resume``) and removed for
    a detached one."""
    def beat() -> str | None:
        try:
            return Path(pointer.read_text().strip()).read_text()
        except (OSError, ValueError):
            return None

    def run() -> None:
        last, since = beat(), time.monotonic()
        while not (stop is not None and stop.is_set()):
            time.sleep(check)
            if not pointer.exists():  # detached (or never watched): the job is on its own
                last, since = None, time.monotonic()
                continue
            current = beat()
            if current != last:
                last, since = current, time.monotonic()
                continue
            if time.monotonic() - since >= stale:
                print(f"rexmle: the session watching this job is gone (its heartbeat stood still for {stale:.0f} s): "
                      "stopping the run", file=sys.stderr, flush=True)
                if on_stale is not None:
                    on_stale()
                else:
                    os.kill(os.getpid(), signal.SIGTERM)  # unwinds the run like scancel (SlurmSignal)
                return

    thread = threading.Thread(target=run, name="rexmle-session-watch", daemon=True)
    thread.start()
    return thread


class SlurmSignal(KeyboardInterrupt):
    """Slurm asked the job to stop (scancel, preemption, the --time backstop): unwind so the inner
    runtime's ``finally`` kills the agent (and removes its container) before Slurm's SIGKILL."""


def _stop(signum, frame) -> None:  # noqa: ARG001
    raise SlurmSignal(signal.Signals(signum).name)


def node_gpus() -> tuple[str, ...]:
    """The GPUs Slurm allocated to this job (it sets CUDA_VISIBLE_DEVICES from the gres allocation)."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return tuple(g for g in value.split(",") if g and g != "NoDevFiles")


#: what the job inherits from its own allocation and any nested step (srun, a job the agent's tools start)
#: would apply again, wrongly: CPU and memory binding of the outer step
BINDING_PREFIXES = ("SLURM_CPU_BIND", "SLURM_MEM_BIND", "SRUN_CPUS_PER_TASK")
#: where a run's uid locks must live: node-local, never a network file system (flock there is unreliable)
NETWORK_FILESYSTEMS = frozenset({"nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "ceph", "fuse.sshfs",
                                 "glusterfs", "fuse.glusterfs", "panfs", "wekafs", "9p"})


def strip_binding(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Remove the inherited CPU/memory-binding variables (from ``os.environ`` by default); returns their names."""
    env: MutableMapping[str, str] = os.environ if environ is None else environ
    names = sorted(k for k in env if k.startswith(BINDING_PREFIXES))
    for name in names:
        del env[name]
    return names


def filesystem_type(path: Path, mounts: str | None = None) -> str:
    """The type of the file system ``path`` (or its nearest existing parent) lies on, from /proc/self/mounts."""
    if mounts is None:
        try:
            mounts = Path("/proc/self/mounts").read_text()
        except OSError:
            return ""
    target, best, kind = str(path.resolve()), -1, ""
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) > best:
            best, kind = len(point), fields[2]
    return kind


def node_local_locks(environ: MutableMapping[str, str] | None = None, mounts: str | None = None) -> str | None:
    """A uid lock folder (``REXMLE_UID_LOCK_DIR``) on a network file system is moved to the node's own default;
    returns what was moved, for the run's details."""
    # start-up: keeps its imports out of the Slurm job
    from .sandbox.uids import DEFAULT_LOCK_DIR, LOCK_DIR_ENV

    env: MutableMapping[str, str] = os.environ if environ is None else environ
    chosen = env.get(LOCK_DIR_ENV)
    if chosen and filesystem_type(Path(chosen), mounts) in NETWORK_FILESYSTEMS:
        env[LOCK_DIR_ENV] = str(DEFAULT_LOCK_DIR)
        return chosen
    return None


def node_main(spec_path: str) -> dict:
    """Run one agent on this node with the inner runtime; returns (and writes) the outcome as JSON."""
    stripped = strip_binding()
    moved_locks = node_local_locks()

    # submitit's own handlers only log SIGTERM; we must stop the agent instead
    for sig in (signal.SIGTERM, signal.SIGUSR2, signal.SIGINT):
        signal.signal(sig, _stop)
    path = Path(spec_path)
    watch_session(path.with_name(HEARTBEAT_POINTER), float(os.environ.get(STALE_ENV) or STALE_SECONDS))
    spec, inner_name, inner_options = read_spec(path)
    spec = with_secrets(spec)
    gpus = node_gpus() if os.environ.get("REXMLE_SLURM_GRES_GPUS", "0") != "0" else ()
    spec = dataclasses.replace(spec, gpus=gpus, env={**spec.env, "CUDA_VISIBLE_DEVICES": ",".join(gpus)})
    inner = RUNTIMES.load(inner_name)(**inner_options)
    inner.check()
    outcome = inner.run(spec)
    from ..compute import machine_facts  # start-up: keeps its imports out of the Slurm job

    outcome.details = {**outcome.details, "node": socket.gethostname(), "gpus": list(gpus),
                       "slurm_job_id": os.environ.get("SLURM_JOB_ID"), "node_hardware": machine_facts(gpus)}
    if stripped:
        outcome.details["slurm_binding_stripped"] = stripped
    if moved_locks:
        outcome.details["uid_locks_moved_from"] = moved_locks
    doc = outcome_to_json(outcome)
    write_json_atomic(path.with_name(OUTCOME_NAME), doc)
    return doc


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m pytest_rexmle.runtime.slurm_job <spec.json>")
    node_main(sys.argv[1])
