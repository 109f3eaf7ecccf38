"""Keys taken out of an upstream answer on its way to the agent, chunk by chunk.

Why every answer and not only errors: a provider (or a lab's proxy in front of one) that echoes request
headers in a 200 body, a debug field or an SSE event would hand the agent the host's real key. Why a
same-length mask: a non-streamed answer's ``Content-Length`` was already sent, so the body must keep its
size. Why a held tail: a key split across two reads must still be caught, so the few bytes at a read's end
that could begin a key wait for the next read; anything else (an SSE event's closing blank line, text) is
passed on at once, so streams are not delayed.
"""

from __future__ import annotations

from collections.abc import Iterable

MARK = b"[REDACTED]"


def mask(secret: bytes) -> bytes:
    """``[REDACTED]`` padded with ``*`` (or cut) to the secret's own length."""
    return (MARK + b"*" * len(secret))[:len(secret)]


class Scrubber:
    """Feed an answer's chunks in order; get back the same bytes with every secret masked. :meth:`flush`
    at the end returns what was held back."""

    def __init__(self, secrets: Iterable[str]) -> None:
        found = {s.encode() for s in secrets if s}
        # longest first: a key that contains another is masked whole
        self._secrets = tuple(sorted(found, key=len, reverse=True))
        self._masks = tuple(mask(s) for s in self._secrets)
        self._firsts = bytes(sorted({s[0] for s in self._secrets}))
        self._longest = max((len(s) for s in self._secrets), default=0)
        self._held = b""
        self.masked = 0  # how many secrets were taken out (for the record)

    def feed(self, chunk: bytes) -> bytes:
        if not self._secrets:
            return chunk
        data = self._held + chunk if self._held else chunk
        for secret, masked in zip(self._secrets, self._masks):
            if secret in data:
                self.masked += data.count(secret)
                data = data.replace(secret, masked)
        keep = self._pending(data)
        self._held = data[len(data) - keep:] if keep else b""
        return data[:len(data) - keep] if keep else data

    def flush(self) -> bytes:
        """The held tail (never a whole secret: only a proper beginning of one)."""
        held, self._held = self._held, b""
        return held

    def _pending(self, data: bytes) -> int:
        """Length of the longest end of ``data`` that is a proper beginning of a secret."""
        window = min(len(data), self._longest - 1)
        start = len(data) - window
        best = 0
        for first in self._firsts:
            at = data.find(first, start)
            while at >= 0:
                tail = data[at:]
                if len(tail) > best and any(s.startswith(tail) and len(s) > len(tail) for s in self._secrets):
                    best = len(tail)
                    break  # later starts give shorter tails
                at = data.find(first, at + 1)
        return best
