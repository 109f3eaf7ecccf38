"""The 13 winning strategies of the paper's protocol, loaded from the packaged ``strategies.json``.

The file is a verbatim copy of the paper's strategy list: the judge prompt must
use its ``name`` and ``criteria`` strings unchanged, so they are data, never retyped in code.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

STRATEGIES_PATH = Path(__file__).with_name("strategies.json")
N_STRATEGIES = 13


@dataclass(frozen=True)
class Strategy:
    id: int
    key: str
    name: str
    criteria: str


@functools.lru_cache(maxsize=1)
def load_strategies(path: Path = STRATEGIES_PATH) -> tuple[Strategy, ...]:
    """The strategies in id order; fails loudly if the file does not hold ids 1..13 exactly once."""
    data = json.loads(path.read_text(encoding="utf-8"))
    items = [Strategy(int(v["id"]), key, str(v["name"]), str(v["criteria"])) for key, v in data["strategies"].items()]
    items.sort(key=lambda s: s.id)
    if [s.id for s in items] != list(range(1, N_STRATEGIES + 1)):
        raise ValueError(f"{path}: strategy ids must be 1..{N_STRATEGIES}, got {[s.id for s in items]}")
    return tuple(items)
