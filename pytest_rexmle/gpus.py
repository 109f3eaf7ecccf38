"""Which GPUs a session may use (``--rexmle-gpus``); the executor (:mod:`pytest_rexmle.schedule`) hands
them to runs."""

from __future__ import annotations

import os
import shutil
import subprocess


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
        return [str(i) for i, line in enumerate(row for row in out.splitlines() if row.startswith("GPU "))]
    return []


def parse_gpus(value: str | None) -> list[str]:
    """``--rexmle-gpus``: "0,1,2", "none", or unset (auto-detect)."""
    if value is None or value == "auto":
        return detect_gpus()
    if value.strip().lower() in ("", "none"):
        return []
    return [g.strip() for g in value.split(",") if g.strip()]
