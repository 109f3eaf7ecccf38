"""Which hosts the agent may reach through the gateway's proxy, and the record of every host it asked for.

Why an allow-list and a deny-list: every test split is carved from a public release, so the sites that
publish them (Zenodo, figshare, Google Drive, grand-challenge.org) are refused whatever else is allowed,
while what agents legitimately need — package indexes and model hubs — is served by default. Hubs can
mirror a release too: their dataset paths are refused where the proxy sees the path (plain HTTP), and
every allowed request is logged with its path where visible.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from ..agent_output import clean_text  # hosts and paths are the agent's text, bound for reports
from ..task import registry
from .hostname import InvalidHost, as_authority, normal_host

#: hosts served by default (a name covers its subdomains); the README lists them with the reason
DEFAULT_ALLOW = (
    "pypi.org", "files.pythonhosted.org",                      # PyPI
    "download.pytorch.org",                                    # PyTorch wheels and torchvision weights
    "conda.anaconda.org", "repo.anaconda.com", "conda-forge.org",  # conda channels
    "huggingface.co", "hf.co",                                 # Hugging Face model files (and their CDNs)
)
#: model hubs whose dataset paths are refused by default
HUB_HOSTS = ("huggingface.co", "hf.co")
#: the hubs' download hosts (LFS and Xet storage) whose paths are content hashes, naming no repository: a
#: model and a dataset look alike there, so plain HTTP to them is refused (clients use HTTPS, path unseen)
HUB_CDN = re.compile(r"^(cdn-lfs[\w-]*\.(huggingface\.co|hf\.co)|([\w-]+\.)*xethub\.hf\.co)$")
#: refused whatever the allow-list says: hosts that publish answers besides the tasks' own sources
ALWAYS_DENY = ("datasets-server.huggingface.co", "zenodo.org", "figshare.com", "drive.google.com",
               "drive.usercontent.google.com", "docs.google.com", "grand-challenge.org")
#: ports the proxy connects to: CONNECT only to 443, plain HTTP only to 80 (unless an entry names a port)
CONNECT_PORT, HTTP_PORT = 443, 80
#: distinct paths listed per entry, and path characters listed in the whole log; past either, paths are counted
#: (``more_paths``) so run.json stays far below what its readers accept (leaks.MAX_RUN_JSON, 4 MiB)
MAX_PATHS = 50
MAX_PATH_CHARS = 512 * 1024
#: distinct refused (host, port) entries listed per run; past it refused hosts are aggregated, never dropped
MAX_HOSTS = 1000
#: distinct allowed (host, port) entries listed per run (allowed hosts are few: the allow-list's names)
MAX_ALLOWED_HOSTS = 2000
#: hosts named in an aggregate entry (the latest ones)
AGGREGATE_SAMPLE = 10
#: the host of an aggregate entry
OTHER_HOSTS = "(other hosts)"


def _normal(host: str) -> str:
    """The canonical spelling of a list entry's host (see :func:`.hostname.normal_host`); an entry that is
    not a valid host is kept lower-cased, where no request's (valid) host can ever equal it."""
    host = host.strip()
    try:
        return normal_host(host)
    except InvalidHost:
        return host.strip("[]").rstrip(".").lower()


def task_source_hosts() -> tuple[str, ...]:
    """Hosts named by every task's ``task.yaml`` (its source URLs and the challenge site)."""
    hosts: set[str] = set()

    def walk(value) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
        elif isinstance(value, str) and "://" in value:
            host = urlsplit(value.strip()).hostname
            if host:
                hosts.add(_normal(host))

    for task in registry():
        walk(task.source)
        walk(task.url)
        kind = str(task.source.get("type", ""))
        if "zenodo" in kind:
            hosts.add("zenodo.org")
        if "figshare" in kind:
            hosts.add("figshare.com")
        if "google_drive" in kind:
            hosts.update(("drive.google.com", "drive.usercontent.google.com"))
    # a challenge site <name>.grand-challenge.org: the whole platform serves its data
    if any(h.endswith(".grand-challenge.org") for h in hosts):
        hosts.add("grand-challenge.org")
    return tuple(sorted(hosts))


#: addresses the name ``localhost`` stands for in an explicit allow entry
LOCALHOST = frozenset({"127.0.0.1", "::1"})


@dataclass(frozen=True)
class Rule:
    """An allow-list entry: a host (and its subdomains) and optionally the one port it may be reached on."""

    host: str
    port: int | None = None
    explicit: bool = False  # given by the user
    #: host-internal addresses this entry reaches: only the address an explicit entry names itself
    addresses: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, text: str, explicit: bool) -> Rule:
        text = text.strip()
        if "://" in text:
            parts = urlsplit(text)
            host, port = _normal(parts.hostname or ""), parts.port
        elif text.startswith("["):  # [::1]:8080
            inner, _, rest = text[1:].partition("]")
            host, port = _normal(inner), int(rest[1:]) if rest.startswith(":") else None
        else:
            name, sep, port_text = text.rpartition(":")
            if sep and port_text.isdigit() and name.count(":") == 0:
                host, port = _normal(name), int(port_text)
            else:
                host, port = _normal(text), None
        return cls(host, port, explicit, _named_addresses(host) if explicit else frozenset())


def _named_addresses(host: str) -> frozenset[str]:
    """The addresses an entry names itself: an IP literal, or the loopback addresses for ``localhost``."""
    if host == "localhost":
        return LOCALHOST
    try:
        return frozenset({str(ipaddress.ip_address(host))})
    except ValueError:
        return frozenset()


def _covered(host: str, names: Iterable[str]) -> str | None:
    for name in names:
        if host == name or host.endswith("." + name):
            return name
    return None


@dataclass(frozen=True)
class Decision:
    """A verdict; an allowed one carries the host-internal addresses its rule names (none for a name)."""

    allowed: bool
    reason: str
    addresses: frozenset[str] = frozenset()
    explicit: bool = False  # allowed by an entry the user gave (its refusal says how to name an address)


class EgressPolicy:
    """The verdict for one (host, port, path) asked of the proxy."""

    def __init__(self, allow: Iterable[str] = (), deny: Iterable[str] = (),
                 task_hosts: Iterable[str] | None = None) -> None:
        rules = [Rule.parse(h, explicit=False) for h in DEFAULT_ALLOW]
        rules += [Rule.parse(h, explicit=True) for h in allow if str(h).strip()]
        self.allow = tuple(rules)
        hosts = task_source_hosts() if task_hosts is None else tuple(task_hosts)
        self.deny = tuple(dict.fromkeys(_normal(h) for h in (*ALWAYS_DENY, *hosts, *deny) if str(h).strip()))

    def decide(self, host: str, port: int, path: str | None, tunnel: bool) -> Decision:
        """``host`` in its canonical spelling (:func:`.hostname.normal_host`): the proxy refuses any other."""
        if not host:
            return Decision(False, "no host named")
        denied = _covered(host, self.deny)
        if denied:
            return Decision(False, f"deny-list: {denied} publishes challenge data")
        rule = next((r for r in self.allow if _covered(host, (r.host,)) and r.port in (None, port)), None)
        if rule is None:
            return Decision(False, "not on the allow-list (--rexmle-egress-allow HOST adds one)")
        if rule.port is None:
            wanted = CONNECT_PORT if tunnel else HTTP_PORT
            if port != wanted:
                kind = "CONNECT" if tunnel else "plain HTTP"
                return Decision(False, f"{kind} only to port {wanted} (an allow entry HOST:PORT opens another)")
        if path is not None and _covered(host, HUB_HOSTS) and (hub_dataset_path(path) or HUB_CDN.match(host)):
            return Decision(False, "dataset downloads from model hubs are off by default (plain HTTP to the hub's "
                                   "file CDN too: its paths do not say model or dataset)")
        reason = f"allow-list: {rule.host}" + (f":{rule.port}" if rule.port else "")
        if tunnel:
            reason += " (TLS: path not visible)"
        return Decision(True, reason, rule.addresses, rule.explicit)


def hub_dataset_path(path: str) -> bool:
    """A hub path that names a dataset, read as the hub's server would read it: percent-escapes decoded
    (repeatedly: ``%2564``), ``//`` collapsed, ``.``/``..`` segments resolved, case folded, so ``//datasets``,
    ``/%64atasets``, ``/Datasets`` and ``/x/../datasets`` are all ``/datasets``; ``/api/.../datasets/...``
    (the API's listing, tree, resolve-cache and parquet routes) too."""
    text = path.split("?", 1)[0].split("#", 1)[0]
    for _ in range(4):
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    segments: list[str] = []
    for segment in text.replace("\\", "/").lower().split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if segments:
                segments.pop()
            continue
        segments.append(segment.strip())
    if not segments:
        return False
    return segments[0] == "datasets" or (segments[0] == "api" and "datasets" in segments[1:3])


#: where the host's own services, its local networks and its metadata live, and every range that embeds or
#: reaches such an address: "this network", RFC 1918, carrier-grade NAT, loopback, link-local (cloud metadata),
#: IETF protocol assignments, benchmarking, multicast and reserved; IPv6 unspecified, loopback, IPv4-compatible
#: (``::7f00:1``) and -translated (``::ffff:0:a.b.c.d``), NAT64 (both prefixes), discard, unique-local, link-
#: and site-local and multicast.
#: IPv4-mapped, 6to4 and Teredo addresses are judged by the IPv4 address they carry.
_INTERNAL_NETS = tuple(ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.0.0.0/24",
    "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4",
    "::/96", "::ffff:0:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "fc00::/7", "fe80::/10", "fec0::/10",
    "ff00::/8"))


def internal_address(address: str) -> bool:
    """An address of the host or its local networks, where the host's own services and metadata live
    (public and documentation ranges are not)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is not None:
            return internal_address(str(embedded))
    return any(ip in net for net in _INTERNAL_NETS if net.version == ip.version)


def resolve(host: str, port: int, decision: Decision) -> list[tuple]:
    """Addresses to connect to for a host, resolved once (the sandbox has no DNS): every one is checked and
    only these are connected to. A host-internal address is refused unless the allowing entry names it."""
    flags = 0
    try:
        ipaddress.ip_address(host)
        flags = socket.AI_NUMERICHOST  # an IP literal is never looked up
    except ValueError:
        pass
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=flags)
    for info in infos:
        address = str(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]))
        if internal_address(address) and address not in decision.addresses:
            hint = (f"; to reach it, allow the address itself (--rexmle-egress-allow {as_authority(address, port)})"
                    if decision.explicit else "")
            raise PermissionError(f"{host} resolves to a host-internal address ({address}){hint}")
    return infos


@dataclass
class _Entry:
    host: str
    port: int | None
    allowed: bool
    reason: str
    count: int = 0
    paths: list[str] = field(default_factory=list)
    more_paths: int = 0  # paths seen but not listed (over MAX_PATHS, or the log's MAX_PATH_CHARS spent)
    first: float = 0.0
    last: float = 0.0
    #: an aggregate entry: how many distinct (host, port) it stands for, and the latest of them
    hosts: set[int] | None = None
    sample: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        out = {"host": self.host, "port": self.port, "allowed": self.allowed, "reason": self.reason,
               "count": self.count, "paths": list(self.paths), "first": _stamp(self.first), "last": _stamp(self.last)}
        if self.more_paths:
            out["more_paths"] = self.more_paths
        if self.hosts is not None:
            out.update(flooded=True, distinct_hosts=len(self.hosts), latest_hosts=list(self.sample))
        return out


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


class EgressLog:
    """Every (host, port) asked for with its verdict, count, first and last time and paths seen (thread-safe).

    Why aggregate instead of evicting: an agent that floods the log with refused names must not push a
    later download out of it. Allowed hosts are always listed (up to :data:`MAX_ALLOWED_HOSTS`); past
    :data:`MAX_HOSTS` refused ones, further refused hosts go into one ``(other hosts)`` entry per verdict,
    marked ``flooded`` with the number of distinct hosts it stands for, so the flood itself is on record.
    """

    #: distinct hosts an aggregate entry counts (as 64-bit hashes, a few MiB at most); past it a lower bound
    MAX_COUNTED = 100_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, int, bool], _Entry] = {}
        self._listed = {True: 0, False: 0}
        self._others: dict[bool, _Entry] = {}
        self._path_chars = 0

    def record(self, host: str, port: int, decision: Decision, path: str | None) -> None:
        key = (clean_text(host, limit=255), port, decision.allowed)
        path = None if path is None else clean_text(path, limit=500)
        now = time.time()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                cap = MAX_ALLOWED_HOSTS if decision.allowed else MAX_HOSTS
                if self._listed[decision.allowed] >= cap:
                    self._aggregate(key, decision, now)
                    return
                self._listed[decision.allowed] += 1
                entry = self._entries[key] = _Entry(key[0], port, decision.allowed,
                                                    clean_text(decision.reason, limit=300), first=now)
            entry.count += 1
            entry.last = now
            if path is not None and path not in entry.paths:
                if len(entry.paths) < MAX_PATHS and self._path_chars + len(path) <= MAX_PATH_CHARS:
                    entry.paths.append(path)
                    self._path_chars += len(path)
                else:
                    entry.more_paths += 1

    def _aggregate(self, key: tuple[str, int, bool], decision: Decision, now: float) -> None:
        allowed = decision.allowed
        other = self._others.get(allowed)
        if other is None:
            reason = (f"more than {MAX_ALLOWED_HOSTS if allowed else MAX_HOSTS} distinct "
                      f"{'allowed' if allowed else 'refused'} hosts: the rest are counted here")
            other = self._others[allowed] = _Entry(OTHER_HOSTS, None, allowed, reason, first=now, hosts=set())
        other.count += 1
        other.last = now
        if other.hosts is not None and len(other.hosts) < self.MAX_COUNTED:  # always a set here (made above)
            other.hosts.add(hash(key[:2]))
        label = f"{key[0]}:{key[1]}"
        if label in other.sample:
            other.sample.remove(label)
        other.sample = [*other.sample[-(AGGREGATE_SAMPLE - 1):], label]

    def to_json(self) -> list[dict]:
        """run.json's ``egress``: one dict per (host, port, verdict), then the aggregates (``flooded``)."""
        with self._lock:
            return [e.to_json() for e in (*self._entries.values(), *self._others.values())]
