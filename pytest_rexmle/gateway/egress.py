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
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from urllib.parse import unquote, urlsplit

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
MAX_PATHS = 50
#: distinct (host, port, verdict) entries kept per run; more are counted, not listed
MAX_HOSTS = 1000


def _normal(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def task_source_hosts() -> tuple[str, ...]:
    """Hosts named by every task's ``task.yaml`` (its source URLs and the challenge site)."""
    from ..task import registry

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


@dataclass(frozen=True)
class Rule:
    """An allow-list entry: a host (and its subdomains) and optionally the one port it may be reached on."""

    host: str
    port: int | None = None
    explicit: bool = False  # given by the user: may name a loopback or private address

    @classmethod
    def parse(cls, text: str, explicit: bool) -> "Rule":
        text = text.strip()
        if "://" in text:
            parts = urlsplit(text)
            return cls(_normal(parts.hostname or ""), parts.port, explicit)
        if text.startswith("["):  # [::1]:8080
            host, _, rest = text[1:].partition("]")
            return cls(_normal(host), int(rest[1:]) if rest.startswith(":") else None, explicit)
        host, sep, port = text.rpartition(":")
        if sep and port.isdigit() and host.count(":") == 0:
            return cls(_normal(host), int(port), explicit)
        return cls(_normal(text), None, explicit)


def _covered(host: str, names: Iterable[str]) -> str | None:
    for name in names:
        if host == name or host.endswith("." + name):
            return name
    return None


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str
    check_address: bool = True  # refuse if the name resolves to a host-internal address


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
        host = _normal(host)
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
        return Decision(True, reason, check_address=not rule.explicit)


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


#: the host itself and its local networks: loopback, "this network", RFC 1918, carrier-grade NAT,
#: link-local (cloud metadata services live there), IPv6 unique-local and link-local
_INTERNAL_NETS = tuple(ipaddress.ip_network(n) for n in (
    "127.0.0.0/8", "0.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
    "169.254.0.0/16", "::1/128", "::/128", "fc00::/7", "fe80::/10"))


def internal_address(address: str) -> bool:
    """An address of the host or its local networks, where the host's own services and metadata live;
    a default-allowed name resolving there is refused (public and documentation ranges are not)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return ip.is_multicast or any(ip in net for net in _INTERNAL_NETS if net.version == ip.version)


def resolve(host: str, port: int, check_internal: bool) -> list[tuple]:
    """Addresses to try for a host (the proxy resolves names itself: the sandbox has no DNS)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    if check_internal and any(internal_address(info[4][0]) for info in infos):
        raise PermissionError(f"{host} resolves to a host-internal address")
    return infos


@dataclass
class _Entry:
    host: str
    port: int
    allowed: bool
    reason: str
    count: int = 0
    paths: list[str] = field(default_factory=list)


class EgressLog:
    """Every (host, port) asked for, how often, the verdict and the paths seen (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, int, bool], _Entry] = {}
        self.dropped = 0

    def record(self, host: str, port: int, decision: Decision, path: str | None) -> None:
        from ..hostile import clean_text  # hosts and paths are the agent's text, bound for reports

        key = (clean_text(_normal(host), limit=255), port, decision.allowed)
        path = None if path is None else clean_text(path, limit=500)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                if len(self._entries) >= MAX_HOSTS:
                    self.dropped += 1
                    return
                entry = self._entries[key] = _Entry(key[0], port, decision.allowed, clean_text(decision.reason,
                                                                                              limit=300))
            entry.count += 1
            if path is not None and path not in entry.paths and len(entry.paths) < MAX_PATHS:
                entry.paths.append(path)

    def to_json(self) -> list[dict]:
        with self._lock:
            return [asdict(e) for e in self._entries.values()]
