"""Runtimes: where an agent process runs (a local bubblewrap sandbox, or a Docker container)."""

from ..registry import Registry
from .base import Runtime, RunOutcome, RunSpec

RUNTIMES = Registry("rexmle.runtimes", {"local": "pytest_rexmle.runtime.local:LocalRuntime",
                                        "docker": "pytest_rexmle.runtime.docker:DockerRuntime"})


def get_runtime(name: str, **options) -> Runtime:
    return RUNTIMES.load(name)(**options)


__all__ = ["RUNTIMES", "Runtime", "RunOutcome", "RunSpec", "get_runtime"]
