"""Where each protocol's calls go, and with which key: the host's own settings, read by the gateway only.

Why from the harness's environment: a lab already points ``OPENAI_BASE_URL`` at its LiteLLM or vLLM and
exports its keys; the gateway keeps that working upstream while the agent only ever holds its run token.

Compute nodes often reach the internet only through the site's HTTP proxy: the upstream calls honour the
harness's ``HTTPS_PROXY`` / ``HTTP_PROXY`` / ``NO_PROXY`` (lower-case too), or ``--rexmle-upstream-proxy URL``
(``REXMLE_UPSTREAM_PROXY`` on a Slurm node) for every upstream NO_PROXY does not exempt: an https upstream is
reached through a ``CONNECT`` tunnel (TLS still verified against the provider's own name), an http one with
absolute-form request targets.
"""

from __future__ import annotations

import base64
import http.client
import os
import socket
import ssl
import threading
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from ..protocols import PROVIDERS

#: each provider's upstream variables and account headers (:class:`.protocols.base.Protocol`); the account
#: headers come from the harness's environment only, the agent's own are dropped (modelcall.upstream_headers)
SOURCES = {provider: family.upstream_env for provider, family in PROVIDERS.items()}
ACCOUNT_HEADERS = {provider: family.account_headers for provider, family in PROVIDERS.items() if family.account_headers}

#: what carries the proxy override to a Slurm node's gateway (the job's environment)
PROXY_ENV = "REXMLE_UPSTREAM_PROXY"


class UpstreamConfigError(ValueError):
    """A base URL the gateway cannot use (not http/https, no host)."""


@dataclass(frozen=True)
class Proxy:
    """An HTTP proxy in front of the upstreams; its credentials (``http://user:pass@host:port``) are a secret."""

    host: str
    port: int
    authorization: str | None = field(default=None, repr=False)

    @classmethod
    def from_url(cls, url: str) -> Proxy:
        parts = urlsplit(url.strip() if "://" in url else f"http://{url.strip()}")
        if parts.scheme != "http" or not parts.hostname:
            raise UpstreamConfigError(f"proxy {url!r}: expected http://[user:password@]host:port (an HTTP proxy; "
                                      "https upstreams are tunnelled through it with CONNECT)")
        auth = None
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            auth = "Basic " + base64.b64encode(pair).decode()
        return cls(parts.hostname, parts.port or 3128, auth)

    def headers(self) -> dict[str, str]:
        return {"Proxy-Authorization": self.authorization} if self.authorization else {}


def proxy_for(scheme: str, host: str, port: int, env: Mapping[str, str], override: str | None) -> Proxy | None:
    """The proxy for an upstream: none where NO_PROXY exempts the host, else the override or the scheme's variable."""
    no_proxy = env.get("NO_PROXY", env.get("no_proxy", ""))
    # the standard library's own NO_PROXY rules (undocumented, so not in typeshed's stubs)
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    if no_proxy and (bypass(host, {"no": no_proxy}) or bypass(f"{host}:{port}", {"no": no_proxy})):
        return None
    names = ("HTTPS_PROXY", "https_proxy") if scheme == "https" else ("HTTP_PROXY", "http_proxy")
    url = override or next((env[n] for n in names if env.get(n)), None)
    return Proxy.from_url(url) if url else None


@dataclass(frozen=True)
class Upstream:
    """One provider endpoint: scheme, host, port, base path and the real key (never shown anywhere)."""

    protocol: str
    scheme: str
    host: str
    port: int
    base_path: str
    key: str | None = field(default=None, repr=False)
    #: the host's organisation/project headers (ACCOUNT_HEADERS), sent with every call
    account: tuple[tuple[str, str], ...] = ()
    proxy: Proxy | None = None

    @classmethod
    def from_url(cls, protocol: str, url: str, key: str | None, env: Mapping[str, str] | None = None,
                 proxy: str | None = None, account: tuple[tuple[str, str], ...] = ()) -> Upstream:
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UpstreamConfigError(f"{protocol} upstream {url!r}: expected an http:// or https:// URL with a host")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        via = proxy_for(parts.scheme, parts.hostname, port, env or {}, proxy)
        return cls(protocol, parts.scheme, parts.hostname, port, parts.path.rstrip("/"), key or None, account, via)

    @property
    def display(self) -> str:
        via = f" via proxy {self.proxy.host}:{self.proxy.port}" if self.proxy else ""
        return f"{self.scheme}://{self.host}:{self.port}{self.base_path}{via}"

    def target(self, upstream_path: str, query: str) -> str:
        path = self.base_path + upstream_path + (f"?{query}" if query else "")
        if self.proxy is not None and self.scheme == "http":  # a proxy wants the absolute form
            return f"http://{self.host}:{self.port}{path}"
        return path

    def request_headers(self) -> dict[str, str]:
        """What each request adds for the path to the upstream (a plain-http proxy's credentials)."""
        return self.proxy.headers() if self.proxy is not None and self.scheme == "http" else {}

    def connect(self, timeout: float) -> http.client.HTTPConnection:
        """A fresh connection with Nagle off (small SSE chunks must not wait for an ACK); through the proxy
        when there is one (a CONNECT tunnel for https, verified against the upstream's own name)."""
        host, port = (self.proxy.host, self.proxy.port) if self.proxy is not None else (self.host, self.port)
        if self.scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, port, timeout=timeout, context=ssl.create_default_context())
            if self.proxy is not None:
                conn.set_tunnel(self.host, self.port, headers=self.proxy.headers())
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn


def upstreams_from(environ: Mapping[str, str] | None = None,
                   proxy: str | None = None) -> tuple[dict[str, Upstream], dict[str, str]]:
    """Each protocol's upstream from the harness's environment (defaults: the providers' official APIs),
    and why a protocol has none (a base URL, or proxy, that is not one): that protocol's calls then get a
    clear 502 while the others work. ``proxy`` (``--rexmle-upstream-proxy``) overrides the proxy variables."""
    env = os.environ if environ is None else environ
    proxy = proxy or env.get(PROXY_ENV) or None
    out, broken = {}, {}
    for protocol, (url_vars, key_vars, default) in SOURCES.items():
        name = next((v for v in url_vars if env.get(v)), None)
        url = env[name] if name else default
        key = next((env[v] for v in key_vars if env.get(v)), None)
        account = tuple((header, value.strip()) for header, names in ACCOUNT_HEADERS.get(protocol, ())
                        for value in [next((env[v] for v in names if env.get(v, "").strip()), "")] if value)
        try:
            out[protocol] = Upstream.from_url(protocol, url, key, env, proxy, account)
        except UpstreamConfigError as exc:
            broken[protocol] = f"the harness's {name or 'default'} is not usable: {exc}"
    return out, broken


def secrets_of(upstreams: Mapping[str, Upstream]) -> tuple[str, ...]:
    """Every real key, for redaction."""
    found = {u.key for u in upstreams.values() if u.key}
    found |= {u.proxy.authorization for u in upstreams.values() if u.proxy is not None and u.proxy.authorization}
    return tuple(sorted(found, key=len, reverse=True))


class ConnectionPool:
    """Idle keep-alive connections to one upstream, so a call does not pay a TCP and TLS handshake each time
    (a provider's HTTPS endpoint is tens of milliseconds away; the agent's own SDK would keep its
    connection too)."""

    def __init__(self, upstream: Upstream, size: int = 16) -> None:
        self.upstream, self.size = upstream, size
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    @property
    def idle(self) -> int:
        """How many connections wait for reuse."""
        with self._lock:
            return len(self._idle)

    def get(self, connect_timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        """(connection, reused?): an idle one when there is one, else a fresh one."""
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return self.upstream.connect(connect_timeout), False

    def put(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self.size:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
