"""Token usage of each model call, read from the provider's own answer, and its sum per run and model.

Why from the answer: the provider counts what it bills. Each protocol module says where its bodies and
stream events carry usage (:meth:`.protocols.base.Protocol.usage`). Every count there is cumulative or
given once, so the meter keeps the largest value seen per field.

``input_tokens`` is the whole prompt, cached part included (OpenAI's and Gemini's convention; for
Anthropic the gateway adds ``cache_read_input_tokens`` and ``cache_creation_input_tokens``), and
``cached_tokens`` the part read from a cache.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from .. import protocols
from ..agent_output import clean_text
from .prices import call_cost


def model_name(text: str) -> str:
    """A model name as the record keeps it: it comes from the agent or the provider, and reaches reports."""
    return clean_text(text, limit=200)


@dataclass
class CallUsage:
    """What one call consumed, as far as its answer said. ``protocol`` is the provider (priced under it),
    ``api`` the protocol whose answer is read (the provider's default one when not given)."""

    protocol: str
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    reported: bool = False  # the answer carried usage at all
    answered: bool = False  # the provider answered 2xx: a billed answer without usage leaves tokens unknown
    complete: bool = False  # the answer was read to its end (not cut by the provider, a time-out or the client)
    api: str | None = None

    def observe(self, obj: Any) -> None:
        """Fold one parsed body, stream event or array element into the counts."""
        if not isinstance(obj, dict):
            if isinstance(obj, list):
                for item in obj:
                    self.observe(item)
            return
        reader = protocols.get(self.api or self.protocol)
        name = reader.model(obj)
        if name:
            self.model = model_name(name)
        counts = reader.usage(obj)
        if counts is not None:
            self._take(*counts)

    def _take(self, input_tokens: int, output_tokens: int, cached: int, cache_write: int) -> None:
        self.reported = True
        self.input_tokens = max(self.input_tokens, input_tokens)
        self.output_tokens = max(self.output_tokens, output_tokens)
        self.cached_tokens = max(self.cached_tokens, cached)
        self.cache_write_tokens = max(self.cache_write_tokens, cache_write)

    def metered(self, sent: bool = True) -> bool:
        """Whether these counts are all the provider may bill: nothing was sent, or the whole answer was read
        and either carried usage or was an error. Otherwise the budget charges the call's reservation."""
        return not sent or (self.complete and (self.reported or not self.answered))

    def priced(self) -> tuple[float | None, str | None]:
        if not self.reported:
            if self.answered:  # e.g. a chat-completions stream without stream_options.include_usage
                return None, ("a call was answered without token usage (a stream asked without "
                              "stream_options.include_usage, or a provider that reports none): its tokens and cost "
                              "are not known")
            return 0.0, None
        return call_cost(self.protocol, self.model, self.input_tokens, self.output_tokens, self.cached_tokens,
                         self.cache_write_tokens)


@dataclass
class _Totals:
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    model_seconds: float = 0.0
    cost_usd: float = 0.0
    without_usage: int = 0  # answered calls whose answer carried no token counts
    unknown: list[str] = field(default_factory=list)

    def add(self, usage: CallUsage, seconds: float, cost: float | None, why: str | None) -> None:
        self.requests += 1
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cached_tokens += usage.cached_tokens
        self.model_seconds += seconds
        self.without_usage += usage.answered and not usage.reported
        if cost is not None:
            self.cost_usd += cost
        elif why and why not in self.unknown and len(self.unknown) < 20:
            self.unknown.append(why)

    def to_json(self) -> dict:
        doc: dict[str, Any] = {"requests": self.requests, "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
               "cached_tokens": self.cached_tokens, "model_seconds": round(self.model_seconds, 6),
               "cost_usd": None if self.unknown else round(self.cost_usd, 8)}
        if self.without_usage:
            doc["calls_without_usage"] = self.without_usage
        if self.unknown:
            doc["cost_unknown_reason"] = "; ".join(self.unknown)
            doc["cost_usd_known_part"] = round(self.cost_usd, 8)
        return doc


class RunMeter:
    """A run's totals and per-model totals; thread-safe (calls of one run may overlap)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._total = _Totals()
        self._by_model: dict[str, _Totals] = {}

    def add(self, usage: CallUsage, seconds: float) -> tuple[float | None, str | None]:
        """Record a finished call; returns its (cost, why unknown)."""
        cost, why = usage.priced()
        with self._lock:
            self._total.add(usage, seconds, cost, why)
            model = usage.model or "(unnamed)"
            self._by_model.setdefault(model, _Totals()).add(usage, seconds, cost, why)
        return cost, why

    def spent(self) -> tuple[int, int, float]:
        """(requests, input + output tokens, known USD) so far, for the budget."""
        with self._lock:
            t = self._total
            return t.requests, t.input_tokens + t.output_tokens, t.cost_usd

    def to_json(self) -> dict:
        """run.json's ``usage``."""
        with self._lock:
            doc = self._total.to_json()
            doc["by_model"] = {m: t.to_json() for m, t in sorted(self._by_model.items())}
        doc["source"] = "gateway"
        return doc
