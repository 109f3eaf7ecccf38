"""Runtimes: where an agent process runs (a local sandbox, a Docker container, a Slurm job).

Each runtime is a provider behind :class:`Runtime`; callers build one with :func:`runtime_for`, which
hands the whole :class:`~pytest_rexmle.settings.Settings` to the provider's ``from_settings`` so that
every provider reads its own options and no caller ever branches on a runtime's name.

The names are resolved on first use (PEP 562): every agent's sandbox launcher imports
``runtime.sandbox.launcher``, which executes this file first, and must not pay for the registry and
the runtime interface (typing, dataclasses, inspect) before the agent starts.
"""

from __future__ import annotations

BUILTIN_RUNTIMES = {"local": "pytest_rexmle.runtime.local:LocalRuntime",
                    "docker": "pytest_rexmle.runtime.docker:DockerRuntime",
                    "slurm": "pytest_rexmle.runtime.slurm:SlurmRuntime"}
_INTERFACE = ("Runtime", "RunOutcome", "RunSpec")


def __getattr__(name: str):
    if name == "RUNTIMES":
        from ..providers import Registry

        globals()["RUNTIMES"] = registry = Registry("rexmle.runtimes", BUILTIN_RUNTIMES)
        return registry
    if name in _INTERFACE:
        from . import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_runtime(name: str, **options) -> "Runtime":
    return __getattr__("RUNTIMES").load(name)(**options)


def runtime_for(settings) -> "Runtime":
    """The session's runtime, configured from its settings."""
    return __getattr__("RUNTIMES").load(settings.runtime).from_settings(settings)


__all__ = ["RUNTIMES", "Runtime", "RunOutcome", "RunSpec", "get_runtime", "runtime_for"]
