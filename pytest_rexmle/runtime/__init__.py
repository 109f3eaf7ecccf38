"""Runtimes: where an agent process runs (local sandbox now; Docker and Slurm plug in the same way)."""

from ..registry import Registry
from .base import Runtime, RunOutcome, RunSpec

RUNTIMES = Registry("rexmle.runtimes", {"local": "pytest_rexmle.runtime.local:LocalRuntime"})


def get_runtime(name: str, **options) -> Runtime:
    return RUNTIMES.load(name)(**options)


__all__ = ["RUNTIMES", "Runtime", "RunOutcome", "RunSpec", "get_runtime"]
