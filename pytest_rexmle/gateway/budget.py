"""Per-run spending limits (``--rexmle-budget usd=...,tokens=...,requests=...``), kept by reservation.

Why per run: a benchmark compares agents under equal means; a run that has spent its budget gets the
provider's own "quota exceeded" error from the gateway, so the agent sees what a real account would show.

Why by reservation: a bound checked against finished calls only is overspent by every call in flight, by
every stream that reports no usage and by every model without a price (one adversarial run spent 100x
``tokens=3000,usd=0.01``). So each call reserves its worst case before it goes upstream, and is admitted
only if that fits beside what was spent and what the calls in flight reserved (see :class:`Budget`).
"""

from __future__ import annotations

import math
import threading
from dataclasses import asdict, dataclass
from typing import Any

from .. import protocols
from .prices import call_cost

#: the dimensions a budget may bound, with the unit used in messages
DIMENSIONS = {"usd": "USD", "tokens": "tokens", "requests": "requests"}


class BudgetError(ValueError):
    """A ``--rexmle-budget`` value that cannot be read; the message names the bad part."""


@dataclass(frozen=True)
class Budget:
    """Upper bounds for one run; ``None`` leaves a dimension unbounded.

    ``tokens`` counts input plus output tokens (cached input included, as providers bill it); ``usd`` the
    price of those tokens (genai-prices). The rule, kept by :class:`Ledger`:

    * a billed call reserves its worst case: the output it asked for (each protocol's
      :meth:`~.protocols.base.Protocol.requested_output`; ``DEFAULT_OUTPUT_CEILING`` when none is given;
      times the choices asked for) plus its prompt, estimated as one token per ``BYTES_PER_TOKEN`` bytes
      of the request body; and that many tokens' price;
    * it is admitted only if spent + reserved by the calls in flight + its reservation fits every bound
      (and, for ``requests``, one more request); otherwise it gets the protocol's 429 with the reason;
    * a call that ended with usage is charged what the provider reported; usage that cannot be metered (a
      stream without usage, an answer cut before its usage, a provider that reports none) is charged at
      the reservation, never as zero;
    * under a ``usd`` bound a model without a known price is refused before anything goes upstream.

    The prompt estimate is the gateway's, not the provider's: base64 images weigh more in bytes than in
    tokens (reserved too high), a prompt the provider holds (OpenAI ``previous_response_id``, a cached
    context) is not in the body (reserved too low; the metered usage is charged all the same).
    """

    usd: float | None = None
    tokens: int | None = None
    requests: int | None = None

    @classmethod
    def parse(cls, text: str | None) -> Budget | None:
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


#: output tokens reserved for a call that names no maximum (a provider then stops at its model's own limit)
DEFAULT_OUTPUT_CEILING = 32_768
#: request bytes per token of the prompt estimate (tokenisers average 3-4 bytes per token on text and
#: JSON; 2 keeps the estimate above what providers bill for ordinary conversations)
BYTES_PER_TOKEN = 2


def requested_output(protocol: str, doc: Any) -> tuple[int | None, int]:
    """(the output cap the request names or None, number of choices asked for) of a request body
    (``protocol``: a provider or a protocol's name; each protocol module knows its own names)."""
    return protocols.get(protocol).requested_output(doc) if isinstance(doc, dict) else (None, 1)


@dataclass(frozen=True)
class Reservation:
    """A call's worst case, held from admission until it is settled."""

    tokens: int = 0
    usd: float | None = 0.0
    unpriced: str | None = None  # why the worst case has no price
    rule: str = "not a billed call"

    @classmethod
    def of(cls, protocol: str, model: str | None, doc: Any, body_bytes: int, *, billed: bool,
           generates: bool = True, priced: bool = True) -> Reservation:
        """The reservation of a request (``generates``: False for embeddings, which return no tokens;
        ``priced``: look its price up, needed under a ``usd`` bound only)."""
        if not billed:
            return cls()
        prompt = -(-body_bytes // BYTES_PER_TOKEN)
        cap, choices = requested_output(protocol, doc) if generates else (0, 1)
        if cap is None:
            output, said = DEFAULT_OUTPUT_CEILING * choices, f"no output cap requested: {DEFAULT_OUTPUT_CEILING}"
        else:
            output, said = cap * choices, f"output cap {cap}"
        said += f" x {choices} choices" if choices > 1 else ""
        rule = f"{output + prompt} tokens ({said}; prompt ~{prompt}: {body_bytes} request bytes / {BYTES_PER_TOKEN})"
        if not priced:
            return cls(output + prompt, None, "not priced (no usd bound)", rule)

        usd, why = call_cost(protocol, model, prompt, output, 0)
        return cls(output + prompt, usd, why, rule)


class Ledger:
    """One run's spending against its :class:`Budget`: what finished calls were charged and what the calls
    in flight reserved (thread-safe)."""

    def __init__(self, budget: Budget | None) -> None:
        self.budget = budget
        self._lock = threading.Lock()
        self.requests, self.tokens, self.usd = 0, 0, 0.0
        self.at_reservation = 0  # calls charged their reservation (usage not metered)
        self._held = [0, 0, 0.0]  # requests, tokens, usd reserved by calls in flight

    def reserve(self, protocol: str, model: str | None, doc: Any, body_bytes: int, *, billed: bool,
                generates: bool = True) -> Reservation:
        """A call's reservation under this run's budget (nothing to hold without one)."""
        if self.budget is None:
            return Reservation()
        return Reservation.of(protocol, model, doc, body_bytes, billed=billed, generates=generates,
                              priced=self.budget.usd is not None)

    def admit(self, r: Reservation) -> str | None:
        """Hold ``r`` and return None, or why the call does not fit (nothing held then)."""
        b = self.budget
        if b is None:
            return None
        with self._lock:
            requests, tokens, usd = self._held
            if b.requests is not None and self.requests + requests + 1 > b.requests:
                return (f"requests budget of {b.requests} reached ({self.requests} used, {requests} in flight)")
            if b.tokens is not None and self.tokens + tokens + r.tokens > b.tokens:
                return (f"tokens budget of {b.tokens}: {self.tokens} used, {tokens} reserved by {requests} calls in "
                        f"flight, and this call may use {r.rule}; ask for fewer output tokens or a shorter prompt")
            if b.usd is not None and r.tokens and r.usd is None:
                return f"usd budget of {b.usd:g}: this call cannot be bounded in USD ({r.unpriced})"
            if b.usd is not None and self.usd + usd + (r.usd or 0.0) > b.usd:
                return (f"usd budget of {b.usd:g}: {self.usd:.6f} used, {usd:.6f} reserved by {requests} calls in "
                        f"flight, and this call may cost {r.usd or 0.0:.6f} for {r.rule}")
            self._held[0] += 1
            self._held[1] += r.tokens
            self._held[2] += r.usd or 0.0
            return None

    def release(self, r: Reservation) -> None:
        """Give back an admitted call's hold without charging it (it never went upstream)."""
        if self.budget is None:
            return
        with self._lock:
            self._unhold(r)

    def _unhold(self, r: Reservation) -> None:
        self._held[0] = max(0, self._held[0] - 1)
        self._held[1] = max(0, self._held[1] - r.tokens)
        self._held[2] = max(0.0, self._held[2] - (r.usd or 0.0))

    def settle(self, r: Reservation, tokens: int, usd: float | None, *, metered: bool) -> tuple[int, float | None]:
        """Release ``r`` and charge the call: what was metered, or (``metered`` False) at least its
        reservation. Returns the (tokens, usd) charged."""
        if self.budget is None:
            return tokens, usd
        if not metered:
            tokens = max(tokens, r.tokens)
            usd = None if usd is None and r.usd is None else max(usd or 0.0, r.usd or 0.0)
        elif usd is None and r.tokens:  # the answer named a model without a price: its reservation's price
            usd = r.usd
        with self._lock:
            self._unhold(r)
            self.requests += 1
            self.tokens += tokens
            self.usd += usd or 0.0
            self.at_reservation += not metered and r.tokens > 0
        return tokens, usd

    def exhausted(self) -> str | None:
        """A bound reached by what was charged, or None."""
        if self.budget is None:
            return None
        with self._lock:
            return self.budget.exhausted(requests=self.requests, tokens=self.tokens, usd=self.usd)

    def to_json(self) -> dict:
        """run.json's ``budget_spent``: what the budget was charged (metered usage, or reservations)."""
        with self._lock:
            return {"requests": self.requests, "tokens": self.tokens, "usd": round(self.usd, 8),
                    "charged_at_reservation": self.at_reservation}
