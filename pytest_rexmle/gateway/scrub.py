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
#: a held tail is found by the secret's first bytes; shorter tails are compared directly
_HEAD = 4
#: up to this size a read is first scanned for the heads alone (cheaper than a search for a whole key there)
_SMALL = 4096


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
        self._heads = tuple(s[:_HEAD] for s in self._secrets)
        #: beginnings shorter than a head, longest first (``bytes.endswith`` takes them all at once)
        self._shorts = tuple(sorted({s[:n] for s in self._secrets for n in range(1, min(_HEAD, len(s)))},
                                    key=len, reverse=True))
        self._held = b""
        self.masked = 0  # how many secrets were taken out (for the record)

    def feed(self, chunk: bytes) -> bytes:
        if not self._secrets:
            return chunk
        data = self._held + chunk if self._held else chunk
        size, keep = len(data), 0
        for secret, head, masked in zip(self._secrets, self._heads, self._masks, strict=True):
            if size <= _SMALL and head not in data:  # an SSE event: one short scan rules the secret out
                continue
            if secret in data:  # a long needle: the search skips ahead by up to its length
                self.masked += data.count(secret)
                data = data.replace(secret, masked)
            at = data.find(head, max(0, size - len(secret) + 1))  # a held beginning: only the last bytes
            while at >= 0:
                if size - at > keep and secret.startswith(data[at:]):
                    keep = size - at
                    break  # later starts give shorter tails
                at = data.find(head, at + 1)
        if not keep and data.endswith(self._shorts):  # a beginning shorter than a head
            keep = next(len(short) for short in self._shorts if data.endswith(short))
        self._held = data[size - keep:] if keep else b""
        return data[:size - keep] if keep else data

    def flush(self) -> bytes:
        """The held tail (never a whole secret: only a proper beginning of one)."""
        held, self._held = self._held, b""
        return held
