"""The compute record of a run: on what hardware, for how long, at what price it ran.

Why: a percentile means little without the means that bought it. Two agents compared on different GPUs,
or one with ten times the tokens, are not compared under equal means; MLE-bench's leaderboard paused
over exactly that (mixed hardware). Every run's ``run.json`` carries ``compute``; its fields and where they
are shown (JUnit ``compute.*``, the session and merged reports, which warn when runs ran on different
hardware) are listed in docs/reference/documents.md, "Compute record".

Nothing here is guessed: a value that cannot be read (no NVML, an unpriced model) is ``None`` with a
reason next to it, never a default.
"""

from __future__ import annotations

import os
import platform
from functools import cache
from typing import Any

from .limits import LimitError, parse_size

#: the hardware fields two runs must share to be compared as equals (the merged report checks them)
HARDWARE_KEYS = ("gpu_model", "gpu_count", "cpu_model")
#: the record's fields that become JUnit properties ``compute.<key>``
JUNIT_KEYS = ("gpu_model", "gpu_count", "driver_version", "cuda_version", "cpu_model", "cpu_cores", "memory_bytes",
              "wall_seconds", "gpu_hours", "tokens", "cost_usd", "runtime", "mechanism", "image_digest")


@cache
def cpu_model() -> str | None:
    """The CPU's model name as the kernel reports it (``/proc/cpuinfo``), else the platform's word."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("model name", "Model", "cpu model", "Processor"):
                    return value.strip() or None
    except OSError:
        pass
    return platform.processor() or None


def memory_bytes() -> int | None:
    """The host's physical memory (``MemTotal``)."""
    try:
        with open("/proc/meminfo", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def cpu_cores() -> int:
    """The cores this process may run on (a Slurm job's or a container's share, not the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def size_bytes(value: Any) -> int | None:
    """A size as bytes: a number is taken as it is; text (Docker's limits are recorded as ``"2 GiB"``, and
    older Docker runs wrote such text into run.json's ``memory_bytes``) is parsed; anything else is None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, (float, str)):
        try:
            return parse_size(value)
        except LimitError:
            return None
    return None


def read_record(record: Any) -> dict[str, Any] | None:
    """A ``compute`` record read back from a run.json, with ``memory_bytes`` as bytes whatever wrote it."""
    if not isinstance(record, dict):
        return None
    if "memory_bytes" in record and record["memory_bytes"] is not None:
        return {**record, "memory_bytes": size_bytes(record["memory_bytes"])}
    return record


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def gpu_facts(gpus: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """Model, driver and CUDA version of the run's GPUs through NVML; ``gpu_unavailable`` says why not."""
    facts: dict[str, Any] = {"gpu_model": None, "gpu_count": len(gpus), "driver_version": None, "cuda_version": None}
    if not gpus:
        return facts
    try:
        import pynvml  # start-up: pynvml only where this runs
    except ImportError:
        return {**facts, "gpu_unavailable": "nvidia-ml-py is not installed"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return {**facts, "gpu_unavailable": f"NVML unavailable: {exc}"}
    try:
        names = []
        for gpu in gpus:
            handle = (pynvml.nvmlDeviceGetHandleByIndex(int(gpu)) if str(gpu).isdigit()
                      else pynvml.nvmlDeviceGetHandleByUUID(str(gpu)))
            names.append(_text(pynvml.nvmlDeviceGetName(handle)))
        facts["gpu_model"] = ", ".join(dict.fromkeys(names))
        facts["driver_version"] = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda = int(pynvml.nvmlSystemGetCudaDriverVersion())
        facts["cuda_version"] = f"{cuda // 1000}.{(cuda % 1000) // 10}"
    except (pynvml.NVMLError, ValueError) as exc:
        facts["gpu_unavailable"] = f"NVML could not describe GPU(s) {','.join(map(str, gpus))}: {exc}"
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
    return facts


def machine_facts(gpus: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """The hardware of the machine this process runs on, for a run on ``gpus``: what a scheduler's node
    reports of itself (``run.json`` ``node_hardware``), since the submitting host's GPUs are not the run's."""
    return {**gpu_facts(gpus), "cpu_model": cpu_model(), "cpu_cores": cpu_cores(), "memory_bytes": memory_bytes()}


def compute_record(meta: dict[str, Any]) -> dict[str, Any]:
    """``run.json``'s ``compute`` from the rest of a finished run's record: the hardware facts of the machine
    that ran it (a Slurm node's own ``node_hardware``, else this machine's, where local runs run)."""
    gpus = list(meta.get("gpus") or [])
    wall = meta.get("duration")
    usage = meta["usage"] if isinstance(meta.get("usage"), dict) else {}
    telemetry = meta["gpu_telemetry"] if isinstance(meta.get("gpu_telemetry"), dict) else {}
    limits = meta["limits"] if isinstance(meta.get("limits"), dict) else {}
    node = meta.get("node_hardware")
    machine = node if isinstance(node, dict) else machine_facts(gpus)
    record: dict[str, Any] = {
        **{key: machine.get(key) for key in ("gpu_model", "gpu_count", "driver_version", "cuda_version")},
        **({"gpu_unavailable": machine["gpu_unavailable"]} if machine.get("gpu_unavailable") else {}),
        "cpu_model": machine.get("cpu_model"),
        "cpu_cores": limits.get("cpus") or machine.get("cpu_cores"),
        "memory_bytes": size_bytes(limits.get("memory")) or machine.get("memory_bytes"),
        "wall_seconds": None if wall is None else round(float(wall), 3),
        "gpu_hours": telemetry.get("gpu_hours") if telemetry.get("gpu_hours") is not None else (
            None if wall is None else round(float(wall) * len(gpus) / 3600.0, 6)),
        "tokens": (usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0) if usage else None,
        "cost_usd": usage.get("cost_usd") if usage else None,
        "runtime": meta.get("runtime"),
        "mechanism": meta.get("sandbox") or meta.get("mechanism") or meta.get("runtime"),
        "image_digest": meta.get("image_digest") or meta.get("image_id"),
    }
    if usage and usage.get("cost_usd") is None and usage.get("cost_unknown_reason"):
        record["cost_unknown_reason"] = usage["cost_unknown_reason"]
    return record


def junit_properties(record: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """``compute.gpu_model``, ``compute.wall_seconds``, ... of a run's compute record."""
    if not isinstance(record, dict):
        return []
    return [(f"compute.{key}", record.get(key)) for key in JUNIT_KEYS if record.get(key) is not None]


def hardware(record: dict[str, Any] | None) -> tuple:
    """What two runs must share to be compared as equals."""
    record = record if isinstance(record, dict) else {}
    return tuple(record.get(key) for key in HARDWARE_KEYS)


def hardware_text(key: tuple) -> str:
    gpu_model, gpu_count, cpu = key
    gpu = f"{gpu_count}× {gpu_model}" if gpu_count and gpu_model else ("no GPU" if not gpu_count else f"{gpu_count} GPU(s)")
    return f"{gpu}, CPU {cpu or 'unknown'}"
