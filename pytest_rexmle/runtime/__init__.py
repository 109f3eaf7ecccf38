"""Runtimes: where an agent process runs (a local sandbox, a Docker container, a Slurm job).

Each runtime is a provider behind :class:`Runtime`; callers build one with :func:`runtime_for`, which
hands the whole :class:`~pytest_rexmle.settings.Settings` to the provider's ``from_settings`` so that
every provider reads its own options and no caller ever branches on a runtime's name.
"""

from ..registry import Registry
from .base import Runtime, RunOutcome, RunSpec

RUNTIMES = Registry("rexmle.runtimes", {"local": "pytest_rexmle.runtime.local:LocalRuntime",
                                        "docker": "pytest_rexmle.runtime.docker:DockerRuntime",
                                        "slurm": "pytest_rexmle.runtime.slurm:SlurmRuntime"})


def get_runtime(name: str, **options) -> Runtime:
    return RUNTIMES.load(name)(**options)


def runtime_for(settings) -> Runtime:
    """The session's runtime, configured from its settings."""
    return RUNTIMES.load(settings.runtime).from_settings(settings)


__all__ = ["RUNTIMES", "Runtime", "RunOutcome", "RunSpec", "get_runtime", "runtime_for"]
