"""Per-run spending limits (``--rexmle-budget usd=...,tokens=...,requests=...``).

Why per run: a benchmark compares agents under equal means; a run that has spent its budget gets the
provider's own "quota exceeded" error from the gateway, so the agent sees what a real account would show.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

#: the dimensions a budget may bound, with the unit used in messages
DIMENSIONS = {"usd": "USD", "tokens": "tokens", "requests": "requests"}


class BudgetError(ValueError):
    """A ``--rexmle-budget`` value that cannot be read; the message names the bad part."""


@dataclass(frozen=True)
class Budget:
    """Upper bounds for one run; ``None`` leaves a dimension unbounded.

    ``tokens`` counts input plus output tokens (cached input included, as providers bill it);
    ``usd`` counts only calls whose price is known (an unpriced model is bounded by ``tokens``).
    """

    usd: float | None = None
    tokens: int | None = None
    requests: int | None = None

    @classmethod
    def parse(cls, text: str | None) -> "Budget | None":
        """``"usd=5,tokens=2e6,requests=500"`` → Budget; empty or ``none`` → None."""
        if text is None or not str(text).strip() or str(text).strip().lower() == "none":
            return None
        values: dict[str, float] = {}
        for part in str(text).split(","):
            if not part.strip():
                continue
            name, sep, raw = part.partition("=")
            name = name.strip().lower()
            if not sep or name not in DIMENSIONS:
                raise BudgetError(f"expected NAME=VALUE with NAME in {', '.join(DIMENSIONS)}, got {part.strip()!r}")
            try:
                value = float(raw.strip())
            except ValueError:
                raise BudgetError(f"{name}: expected a number, got {raw.strip()!r}") from None
            if not math.isfinite(value) or value < 0:
                raise BudgetError(f"{name}: expected a non-negative finite number, got {raw.strip()!r}")
            if name in values:
                raise BudgetError(f"{name} is given twice")
            values[name] = value
        if not values:
            return None
        return cls(usd=values.get("usd"),
                   tokens=None if "tokens" not in values else int(values["tokens"]),
                   requests=None if "requests" not in values else int(values["requests"]))

    def to_json(self) -> dict:
        return asdict(self)

    def exhausted(self, *, requests: int, tokens: int, usd: float) -> str | None:
        """Why no further call may start (a limit reached), or None while every bound still has room."""
        if self.requests is not None and requests >= self.requests:
            return f"requests budget of {self.requests} reached ({requests} used)"
        if self.tokens is not None and tokens >= self.tokens:
            return f"tokens budget of {self.tokens} reached ({tokens} used)"
        if self.usd is not None and usd >= self.usd:
            return f"usd budget of {self.usd:g} reached ({usd:.6f} used)"
        return None
