"""Which device nodes a run's sandbox may open: the driver's control nodes and the run's own GPUs only.

Why: binding every ``/dev/nvidia*`` gave each run every GPU of the machine, narrowed only by
``CUDA_VISIBLE_DEVICES``, which the agent can unset: it could then use (and take memory from) the GPUs of
concurrent runs while its compute record named one. CUDA enumerates only the GPUs whose device node the
process can open (as in a container, or under Slurm's ``ConstrainDevices``), so a sandbox that shows or
opens only the run's nodes gives the agent exactly its GPUs, numbered from 0 in PCI bus order.

GPU ids are NVML indices (PCI bus order, like ``nvidia-smi``) or ``GPU-…`` UUIDs. The kernel driver lists
each GPU under ``/proc/driver/nvidia/gpus/<PCI bus id>/information`` with its UUID and its device minor
(``/dev/nvidia<minor>``); the folders sorted by bus id are the index order. Where that listing is missing
(a faked ``/dev`` in tests, an unusual driver) an index is taken as the minor. An id that cannot be placed
(a MIG instance's ``MIG-…`` id) gets every GPU node, and :func:`gpu_nodes` says so.

``REXMLE_FAKE_GPU_DEV`` names a folder that stands in for ``/dev`` (its ``nvidia*`` files) and, in its
``driver-gpus/``, for the driver's listing: the stand-in for a multi-GPU machine the tests use, as the
NVML stand-in does for telemetry. The nodes are still shown at ``/dev/<name>`` under bubblewrap.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEV = Path("/dev")
DRIVER_GPUS = Path("/proc/driver/nvidia/gpus")
#: the driver's nodes every CUDA process opens, whatever its GPUs (``nvidia-caps`` holds MIG's capabilities)
CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps")
FAKE_ENV = "REXMLE_FAKE_GPU_DEV"


def device_roots() -> tuple[Path, Path]:
    """Where the GPU nodes and the driver's listing are: the machine's, or the stand-in's (:data:`FAKE_ENV`)."""
    fake = os.environ.get(FAKE_ENV)
    if fake:
        return Path(fake), Path(fake) / "driver-gpus"
    return DEV, DRIVER_GPUS


@dataclass(frozen=True)
class DriverGpu:
    """One GPU as the kernel driver lists it."""

    bus_id: str
    uuid: str
    minor: int


@dataclass(frozen=True)
class GpuNodes:
    """A run's device nodes (where they are on the host; each shows at ``/dev/<name>`` under bubblewrap),
    and the ids that could not be placed (the whole set was given for them)."""

    paths: tuple[str, ...]
    unplaced: tuple[str, ...] = ()

    def binds(self) -> list[tuple[str, str]]:
        """(host path, path inside) for bubblewrap's ``--dev-bind``."""
        return [(path, f"/dev/{Path(path).name}") for path in self.paths]

    @property
    def note(self) -> str | None:
        if not self.unplaced:
            return None
        return (f"GPU id(s) {', '.join(self.unplaced)} could not be matched to a device node: the run was given "
                f"every GPU's node")


def driver_gpus(listing: Path = DRIVER_GPUS) -> list[DriverGpu]:
    """The driver's GPUs in PCI bus order (the NVML and ``nvidia-smi`` index order); [] without a listing."""
    gpus = []
    try:
        folders = sorted(listing.iterdir(), key=lambda p: p.name.lower())
    except OSError:
        return []
    for folder in folders:
        fields: dict[str, str] = {}
        try:
            text = (folder / "information").read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip().lower()] = value.strip()
        minor = fields.get("device minor", "")
        if minor.isdigit():
            gpus.append(DriverGpu(folder.name, fields.get("gpu uuid", ""), int(minor)))
    return gpus


def _minor(gpu_id: str, listed: list[DriverGpu]) -> int | None:
    if gpu_id.isdigit():
        index = int(gpu_id)
        if listed:
            return listed[index].minor if index < len(listed) else None
        return index  # no listing: the index is the best guess of its node
    return next((g.minor for g in listed if g.uuid and g.uuid.lower() == gpu_id.lower()), None)


def gpu_nodes(gpus: tuple[str, ...], dev: Path | None = None, listing: Path | None = None) -> GpuNodes:
    """The device nodes (existing ones, sorted) a run with ``gpus`` may use: none without GPUs."""
    if not gpus:
        return GpuNodes(())
    roots = device_roots()
    dev, listing = dev or roots[0], listing or roots[1]
    listed = driver_gpus(listing)
    minors: set[int] = set()
    unplaced = []
    for gpu_id in gpus:
        minor = _minor(gpu_id.strip(), listed)
        if minor is None:
            unplaced.append(gpu_id)
        else:
            minors.add(minor)
    names = list(CONTROL_NODES)
    if unplaced:
        names += [p.name for p in dev.glob("nvidia*") if p.name[len("nvidia"):].isdigit()]
    names += [f"nvidia{m}" for m in minors]
    paths = sorted({str(dev / name) for name in names if (dev / name).exists()})
    return GpuNodes(tuple(paths), tuple(unplaced))


def visible_inside(gpus: tuple[str, ...], nodes: GpuNodes | None = None) -> str:
    """``CUDA_VISIBLE_DEVICES`` inside a sandbox that shows only the run's GPUs: they are numbered from 0
    (the host's ids where some could not be placed and every node is shown)."""
    nodes = gpu_nodes(gpus) if nodes is None else nodes
    if nodes.unplaced:
        return ",".join(gpus)
    return ",".join(str(i) for i in range(len(gpus)))
