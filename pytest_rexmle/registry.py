"""A tiny provider registry: built-ins plus whatever other packages declare as entry points.

Runtimes (``rexmle.runtimes``) and agents (``rexmle.agents``) are both looked up here, so a third-party
package adds an agent by declaring one entry point and never touches this project.
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import RexmleError


class Registry:
    def __init__(self, group: str, builtins: dict[str, str]) -> None:
        self.group = group
        self._builtins = dict(builtins)

    def names(self) -> list[str]:
        from importlib.metadata import entry_points  # email, zipfile, csv...: only when a provider is looked up

        found = {ep.name for ep in entry_points(group=self.group)}
        return sorted(found | set(self._builtins))

    def load(self, name: str) -> Any:
        from importlib.metadata import entry_points

        for ep in entry_points(group=self.group):
            if ep.name == name:
                return ep.load()
        target = self._builtins.get(name)
        if target is None:
            raise RexmleError(f"unknown {self.group.split('.')[-1][:-1]} {name!r}; available: {', '.join(self.names())}")
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)
