"""Which GPUs a session may use, and how xdist workers get theirs.

The controller owns the list and hands each worker its own slice before any test runs (through
``workerinput``), so two workers never share a GPU by accident and every result records the id it used.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from .errors import RexmleError


def detect_gpus() -> list[str]:
    """The outer CUDA_VISIBLE_DEVICES, else every GPU ``nvidia-smi -L`` lists, else none."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            return []
        return [str(i) for i, line in enumerate(l for l in out.splitlines() if l.startswith("GPU "))]
    return []


def parse_gpus(value: str | None) -> list[str]:
    """``--rexmle-gpus``: "0,1,2", "none", or unset (auto-detect)."""
    if value is None or value == "auto":
        return detect_gpus()
    if value.strip().lower() in ("", "none"):
        return []
    return [g.strip() for g in value.split(",") if g.strip()]


def share_for_worker(gpus: list[str], worker_index: int, n_workers: int) -> list[str]:
    """Worker i gets GPUs i, i+n, i+2n, ... ; with more workers than GPUs, workers share round-robin."""
    if not gpus:
        return []
    if n_workers >= len(gpus):
        return [gpus[worker_index % len(gpus)]]
    return gpus[worker_index::n_workers]


def worker_index(worker_id: str) -> int:
    return int(worker_id.removeprefix("gw")) if worker_id.startswith("gw") else 0


class GpuPool:
    """Session-wide GPU locks shared by all xdist workers (one lock file per GPU).

    A run first takes the GPUs its worker was given; a task that needs more borrows free ones from the
    other workers' GPUs. Borrowing is all-or-nothing in a fixed order, so two multi-GPU runs never hold
    half of what each needs (no deadlock); a run waits until enough GPUs are free.
    """

    def __init__(self, lock_dir: Path, all_gpus: list[str], poll_seconds: float = 1.0) -> None:
        self.lock_dir = lock_dir
        self.all_gpus = list(all_gpus)
        self.poll_seconds = poll_seconds
        lock_dir.mkdir(parents=True, exist_ok=True)

    def _lock(self, gpu: str) -> FileLock:
        return FileLock(str(self.lock_dir / f"gpu-{gpu}.lock"))

    @contextmanager
    def hold(self, own: list[str], needed: int, timeout: float | None = None):
        """Yield ``needed`` GPU ids (``own`` first), locked for the duration of the block."""
        if needed <= 0 or not self.all_gpus:
            yield list(own[:max(needed, 0)])
            return
        if needed > len(self.all_gpus):
            raise RexmleError(f"a run needs {needed} GPU(s) but the session has {len(self.all_gpus)}")
        order = own + [g for g in self.all_gpus if g not in own]
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            held = self._try_take(order, needed)
            if held is not None:
                break
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"no {needed} free GPU(s) within {timeout} s")
            time.sleep(self.poll_seconds)
        try:
            yield [gpu for gpu, _ in held]
        finally:
            for _, lock in held:
                lock.release()

    def _try_take(self, order: list[str], needed: int) -> list[tuple[str, FileLock]] | None:
        held: list[tuple[str, FileLock]] = []
        for gpu in order:
            lock = self._lock(gpu)
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue
            held.append((gpu, lock))
            if len(held) == needed:
                return held
        for _, lock in held:
            lock.release()
        return None
