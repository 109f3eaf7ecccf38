"""Runtimes: where an agent process runs (a local sandbox, a Docker container, a Slurm job).

Each runtime is a provider behind :class:`Runtime`; callers build one with :func:`runtime_for`, which
hands the whole :class:`~pytest_rexmle.settings.Settings` to the provider's ``from_settings`` so that
every provider reads its own options and no caller ever branches on a runtime's name.

Registration has one rule: a runtime is an entry point of the ``rexmle.runtimes`` group. The built-in
ones (local, docker, slurm) are declared in this project's ``pyproject.toml`` like any third party's, so
an installed package (``pip install -e .`` or the wheel) finds them and a bare source tree on
``PYTHONPATH`` finds none (the error then says to install it).

The names are resolved on first use (PEP 562): every agent's sandbox launcher imports
``runtime.sandbox.launcher``, which executes this file first, and must not pay for the registry and
the runtime interface (typing, dataclasses, inspect) before the agent starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import Runtime

#: the entry-point group runtimes register under (pyproject.toml: ``[project.entry-points."rexmle.runtimes"]``)
GROUP = "rexmle.runtimes"
_INTERFACE = ("Runtime", "RunOutcome", "RunSpec")


def __getattr__(name: str):
    if name == "RUNTIMES":
        from ..providers import Registry  # start-up: keeps importlib out of the sandbox launcher

        globals()["RUNTIMES"] = registry = Registry(GROUP, {}, install_hint=INSTALL_HINT)
        return registry
    if name in _INTERFACE:
        from . import base  # runtime imports this module at its top

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: why no runtime is found: the package's own entry points are missing (a source tree, not installed)
INSTALL_HINT = ("runtimes are registered as entry points of the rexmle.runtimes group; install pytest-rexmle "
                "(`pip install -e .` in a checkout, or the wheel) so that its built-in ones are found")


def get_runtime(name: str, **options) -> Runtime:
    return __getattr__("RUNTIMES").load(name)(**options)


def runtime_for(settings) -> Runtime:
    """The session's runtime, configured from its settings."""
    return __getattr__("RUNTIMES").load(settings.runtime).from_settings(settings)


__all__ = ["GROUP", "RUNTIMES", "Runtime", "RunOutcome", "RunSpec", "get_runtime", "runtime_for"]
