"""Agents: what gets run against a task. Built-ins (``sample``, ``command`` and one folder per image agent)
plus the ``rexmle.agents`` entry-point group, where other packages add theirs.

An image agent's folder holds ``adapter.py`` (its class as ``ADAPTER``, what the registry loads), its image
recipe (a ``Dockerfile``, or an ``image.toml`` naming a shared one of ``common/`` with its pins) and
``start.py``, which runs inside the image beside ``common/``'s helpers and is never imported here.

The names are resolved on first use (PEP 562), so importing one agent does not import them all.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..providers import Registry

if TYPE_CHECKING:
    from .base import Agent

#: the two agents without an image; every image agent is found by its folder (below)
BUILTIN_AGENTS = {
    "sample": "pytest_rexmle.agents.sample:SampleAgent",
    "command": "pytest_rexmle.agents.command:CommandAgent",
}


def folder_agents() -> dict[str, str]:
    """Every ``agents/<agent>/adapter.py`` by its agent's name (the folder's, with ``-`` for ``_``): adding
    an agent is adding its folder, with no list to edit. Its ``ADAPTER`` is imported only when used."""
    here = Path(__file__).resolve().parent
    return {adapter.parent.name.replace("_", "-"): f"{__name__}.{adapter.parent.name}.adapter:ADAPTER"
            for adapter in sorted(here.glob("*/adapter.py"))}


def __getattr__(name: str):
    if name == "AGENTS":
        globals()["AGENTS"] = registry = Registry("rexmle.agents", {**BUILTIN_AGENTS, **folder_agents()})
        return registry
    if name in ("Agent", "AgentContext"):
        from . import base  # agents imports this module at its top

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_agent(name: str, options: dict[str, str] | None = None) -> Agent:
    return __getattr__("AGENTS").load(name)(name=name, options=dict(options or {}))


__all__ = ["AGENTS", "Agent", "AgentContext", "get_agent"]
