"""A tiny provider registry: built-ins plus whatever other packages declare as entry points.

Runtimes (``rexmle.runtimes``) and agents (``rexmle.agents``) are both looked up here, so a third-party
package adds an agent by declaring one entry point and never touches this project.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from .errors import RexmleError


@functools.cache
def _entry_points(group: str) -> tuple:
    """A group's entry points, scanned once per process: every scan reads all installed distributions'
    metadata (tens of milliseconds), and agents and runtimes are looked up for every benchmark item."""
    from importlib.metadata import entry_points  # email, zipfile, csv...: only when a provider is looked up

    return tuple(entry_points(group=group))


class Registry:
    """Providers of one entry-point group, plus ``builtins`` (``name: "module:attr"``) that need no
    installed metadata (agents' folders); runtimes have none: their entry points are the only rule."""

    def __init__(self, group: str, builtins: dict[str, str], install_hint: str = "") -> None:
        self.group = group
        self._builtins = dict(builtins)
        self._install_hint = install_hint

    def names(self) -> list[str]:
        found = {ep.name for ep in _entry_points(self.group)}
        return sorted(found | set(self._builtins))

    def load(self, name: str) -> Any:
        for ep in _entry_points(self.group):
            if ep.name == name:
                return ep.load()
        target = self._builtins.get(name)
        if target is None:
            kind = self.group.split('.')[-1][:-1]
            available = self.names()
            if not available and self._install_hint:
                raise RexmleError(f"unknown {kind} {name!r}: none is registered here; {self._install_hint}")
            raise RexmleError(f"unknown {kind} {name!r}; available: {', '.join(available)}")
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)
