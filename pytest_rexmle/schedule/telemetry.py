"""GPU telemetry of one run: NVML samples of its GPUs while it is alive.

Why: a 24-hour run on a GPU says little about whether it used the GPU. What is sampled and how often,
what ``run.json``'s ``gpu_telemetry`` holds, and what it says where NVML cannot be read (no number is
guessed) is described once, in docs/clusters.md, "GPU telemetry".
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class GpuSeries:
    """The samples of one GPU."""

    gpu: str
    utilisation: list[float] = field(default_factory=list)   # percent
    memory: list[int] = field(default_factory=list)          # bytes used
    power: list[float] = field(default_factory=list)         # watts
    errors: int = 0


class Sampler:
    """``with Sampler(gpus): handle.wait()`` samples the GPUs for the duration of the block."""

    def __init__(self, gpus: tuple[str, ...], unavailable: str | None = None) -> None:
        self.gpus = tuple(gpus)
        self.interval = float(os.environ.get("REXMLE_GPU_SAMPLE_SECONDS") or 5.0)
        self.reason = unavailable or (None if self.gpus else "the run had no GPU")
        self.series = [GpuSeries(g) for g in self.gpus]
        self.started = self.ended = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Any = None  # the pynvml module once NVML initialised (it ships no types)
        self._handles: list = []

    def __enter__(self) -> Sampler:
        self.started = time.monotonic()
        if self.reason is None:
            self._open()
        if self.reason is None:
            self._sample()  # one sample at once: a run shorter than the interval still has one
            self._thread = threading.Thread(target=self._loop, name="rexmle-gpu-telemetry", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.ended = time.monotonic()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass

    def _open(self) -> None:
        try:
            import pynvml  # start-up: pynvml only where this runs
        except ImportError:
            self.reason = "nvidia-ml-py is not installed"
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            self.reason = f"NVML unavailable: {exc}"
            return
        self._nvml = pynvml
        try:
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(int(g)) if g.isdigit()
                             else pynvml.nvmlDeviceGetHandleByUUID(g) for g in self.gpus]
        except pynvml.NVMLError as exc:
            self.reason = f"NVML does not know GPU(s) {','.join(self.gpus)}: {exc}"

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        nvml = self._nvml
        for series, handle in zip(self.series, self._handles, strict=False):
            try:
                util = nvml.nvmlDeviceGetUtilizationRates(handle).gpu
                used = nvml.nvmlDeviceGetMemoryInfo(handle).used
                power = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0  # milliwatts
            except nvml.NVMLError:
                series.errors += 1
                continue
            series.utilisation.append(float(util))
            series.memory.append(int(used))
            series.power.append(power)

    def summary(self) -> dict:
        """What ``run.json`` and the report keep (``available: false`` plus the reason without NVML)."""
        seconds = max(0.0, (self.ended or time.monotonic()) - self.started)
        doc: dict = {"gpus": list(self.gpus), "seconds": round(seconds, 3),
                     "gpu_hours": round(seconds * len(self.gpus) / 3600.0, 6)}
        samples = [s for s in self.series if s.utilisation]
        if self.reason is not None or not samples:
            errors = sum(s.errors for s in self.series)
            doc.update(available=False, reason=self.reason or f"NVML answered no sample ({errors} error(s))")
            return doc
        utils = [u for s in samples for u in s.utilisation]
        doc.update(available=True, source="nvml", samples=sum(len(s.utilisation) for s in samples),
                   interval_seconds=self.interval,
                   utilisation_mean=round(sum(utils) / len(utils), 3), utilisation_peak=max(utils),
                   memory_peak_bytes=max(m for s in samples for m in s.memory),
                   power_mean_watts=round(sum(p for s in samples for p in s.power)
                                          / sum(len(s.power) for s in samples), 3),
                   per_gpu=[{"gpu": s.gpu, "utilisation_mean": round(sum(s.utilisation) / len(s.utilisation), 3),
                             "utilisation_peak": max(s.utilisation), "memory_peak_bytes": max(s.memory),
                             "power_peak_watts": max(s.power), "samples": len(s.utilisation),
                             "errors": s.errors} for s in samples],
                   timeline=[{"gpu": s.gpu, "utilisation": _thin(s.utilisation), "memory": _thin(s.memory)}
                             for s in samples])
        return doc


#: points kept per GPU for the run page's plot: a day sampled every 5 s is 17,280 samples
TIMELINE_POINTS = 120


def _thin(values: list, points: int = TIMELINE_POINTS) -> list:
    """At most ``points`` values, each the mean of its stretch of samples, in order (for a small plot)."""
    if len(values) <= points:
        return list(values)
    step = len(values) / points
    out = []
    for i in range(points):
        part = values[int(i * step):max(int((i + 1) * step), int(i * step) + 1)]
        mean = sum(part) / len(part)
        out.append(round(mean, 3) if isinstance(values[0], float) else int(mean))
    return out
