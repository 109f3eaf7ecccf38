"""Host names and authorities the proxy can read exactly, or refuses.

Why normalise before anything is compared: the allow-list, the deny-list, the resolver and the egress log
must all see the same host. A name the resolver would read differently from the policy (a NUL byte that
ends the name early, a dotted number that ``inet_aton`` takes for an address, an upper-case or trailing-dot
spelling, a Unicode name) is either brought to one canonical spelling here or refused as a 400.
"""

from __future__ import annotations

import ipaddress
import re

#: one RFC 1123 label in A-label form, after lower-casing
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
#: a final label the C resolver would read as a number (``127.1``, ``0x7f000001``, ``2130706433``)
_NUMERIC = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)")
_PORT = re.compile(r"[0-9]{1,5}")


class InvalidHost(ValueError):
    """A host or authority that is neither a valid host name nor an IP literal."""


def normal_host(text: str) -> str:
    """The canonical spelling of a host: an IP literal as :mod:`ipaddress` writes it (IPv6 without
    brackets), or a name as lower-case A-labels without the trailing dot. :class:`InvalidHost` otherwise."""
    if not text:
        raise InvalidHost("no host named")
    if text.startswith("[") or ":" in text:
        inner = text[1:-1] if text.startswith("[") and text.endswith("]") else text
        if "%" in inner:
            raise InvalidHost(f"IPv6 zone identifiers are not accepted: {text[:100]!r}")
        try:
            return str(ipaddress.IPv6Address(inner))
        except ValueError:
            raise InvalidHost(f"not an IPv6 address: {text[:100]!r}") from None
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        pass
    name = text[:-1] if text.endswith(".") else text
    if not name.isascii():
        try:
            name = name.encode("idna").decode("ascii")
        except UnicodeError:
            raise InvalidHost(f"not a valid international host name: {text[:100]!r}") from None
    name = name.lower()
    labels = name.split(".")
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise InvalidHost(f"not a valid host name (RFC 1123 labels): {text[:100]!r}")
    if _NUMERIC.fullmatch(labels[-1]):
        raise InvalidHost(f"a numeric name that is not a dotted-quad address: {text[:100]!r}")
    return name


def split_authority(text: str, default_port: int | None = None) -> tuple[str, int]:
    """(normal host, port) of ``host:port``, ``[v6]:port`` or, with ``default_port``, a bare host.
    User information (``user@host``) and anything else ambiguous is refused."""
    if "@" in text:
        raise InvalidHost("user information in the authority is not accepted")
    if text.startswith("["):
        host, _, rest = text.partition("]")
        host += "]"
        if rest and not rest.startswith(":"):
            raise InvalidHost(f"malformed authority {text[:100]!r}")
        port_text = rest[1:] if rest else None
    elif text.count(":") > 1:
        raise InvalidHost(f"an IPv6 address must be in brackets: {text[:100]!r}")
    else:
        host, sep, port_text = text.partition(":")
        port_text = port_text if sep else None
    if port_text is None:
        if default_port is None:
            raise InvalidHost(f"host:port needed, got {text[:100]!r}")
        port = default_port
    elif _PORT.fullmatch(port_text) and 0 < int(port_text) < 65536:
        port = int(port_text)
    else:
        raise InvalidHost(f"invalid port in {text[:100]!r}")
    return normal_host(host), port


def as_authority(host: str, port: int) -> str:
    """``host:port`` with an IPv6 literal in brackets (the Host header of a forwarded request)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
