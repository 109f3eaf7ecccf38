"""The session's gateway and its runs: tokens, listeners, budgets, the run's record.

Why one gateway per harness process with one token per run: concurrent runs (xdist workers, several GPUs,
a Slurm node's runs) share the process but nothing else. Every listener belongs to exactly one run, so
a request on it can only open, spend and record for that run; its token is checked on every model call
and validation, and a token of another run is refused like any wrong key.
"""

from __future__ import annotations

import atexit
import hmac
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..agent_output import clean_text
from ..protocols import error_body

# every module a request passes through is loaded with the server, not at a request's first use: a copy
# imported later (pytester's sys.modules snapshot removes what a test imported) would raise a BadRequest
# that the first copy of the connection handler does not catch
from . import modelcall as _modelcall  # noqa: F401
from . import proxy as _proxy  # noqa: F401
from . import router as _router  # noqa: F401
from .budget import Budget, Ledger, Reservation
from .connection import Connection
from .egress import EgressLog, EgressPolicy, task_source_hosts
from .metering import CallUsage, RunMeter
from .provider_tools import ToolUse
from .trajectory import MAX_FILE_BYTES, Trajectory
from .upstream import ConnectionPool, Upstream, secrets_of, upstreams_from
from .validation import validate_submission

#: validation calls kept per run for its page (more are counted)
MAX_VALIDATIONS = 200


@dataclass(frozen=True)
class Limits:
    """Time-outs and sizes; environment variables ``REXMLE_GATEWAY_*`` override the defaults. The sizes keep
    what one run can make the harness hold (bodies, heads, connections) far below an agent's own memory."""

    max_body: int = 32 * 1024 * 1024       # request body cap (413 beyond)
    max_held_body: int = 64 * 1024 * 1024  # request bodies one run's connections hold at once (503 beyond)
    max_header_bytes: int = 64 * 1024      # request line and header fields of one request (431 beyond)
    max_header_fields: int = 100           # header fields of one request (431 beyond)
    max_chunks: int = 16384                # chunks of one chunked request body (413 beyond)
    max_connections: int = 256             # connections one run holds open at once (503 beyond)
    client_timeout: float = 60.0           # a client silent this long mid-request is dropped
    request_timeout: float = 300.0         # one request's head and body must arrive within this
    connect_timeout: float = 20.0          # reaching the provider or a proxied host
    upstream_timeout: float = 600.0        # the provider silent this long (first byte or mid-stream): 504
    validate_timeout: float = 600.0        # one /rexmle/validate
    record_bytes: int = MAX_FILE_BYTES     # a run's model-call record on disk; past it calls are refused

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Limits:
        env = os.environ if environ is None else environ
        values = {}
        for f in fields(cls):
            raw = env.get(f"REXMLE_GATEWAY_{f.name.upper()}")
            if raw:
                default: Any = f.default  # every limit has one
                values[f.name] = type(default)(raw)  # int for sizes, float for seconds
        return cls(**values)


class Gateway:
    """Holds the upstreams (with the real keys) and the open runs; serves each run's listeners in threads."""

    def __init__(self, settings: Any = None, *, environ: Mapping[str, str] | None = None,
                 limits: Limits | None = None, task_hosts: Iterable[str] | None = None,
                 allow_provider_tools: bool | None = None) -> None:
        self.settings = settings
        #: --rexmle-allow-provider-tools: provider-side web search, URL fetch, remote MCP, code containers
        self.allow_provider_tools = bool(getattr(settings, "allow_provider_tools", False)
                                         if allow_provider_tools is None else allow_provider_tools)
        self.upstreams, self.upstream_errors = upstreams_from(environ, getattr(settings, "upstream_proxy", None))
        self.secrets = secrets_of(self.upstreams)
        self.limits = limits or Limits.from_env(environ)
        self._task_hosts = None if task_hosts is None else tuple(task_hosts)
        self._lock = threading.Lock()
        self._runs: dict[str, GatewayRun] = {}
        self._pools: dict[Upstream, ConnectionPool] = {}
        self.closed = False

    def pool(self, upstream: Upstream) -> ConnectionPool:
        """The keep-alive pool of an upstream (shared by runs: a connection carries no run's identity)."""
        with self._lock:
            if upstream not in self._pools:
                self._pools[upstream] = ConnectionPool(upstream)
            return self._pools[upstream]

    def open_run(self, run_id: str, *, logs_dir: Path, submission_dir: Path, task_id: str,
                 budget: Budget | None = None, egress_allow: Iterable[str] = (), egress_deny: Iterable[str] = (),
                 public_dir: Path | None = None, record_bytes: int | None = None) -> GatewayRun:
        """A run with a fresh token; ``budget`` and ``egress_allow`` add to the session's settings;
        ``record_bytes`` lowers the disk budget of the run's record (a runtime with a disk limit may pass
        its share of it), never above ``Limits.record_bytes``."""
        if budget is None:
            budget = Budget.parse(getattr(self.settings, "budget", None) or None)
        allow = (*tuple(getattr(self.settings, "egress_allow", ()) or ()), *egress_allow)
        if self._task_hosts is None:
            self._task_hosts = task_source_hosts()
        policy = EgressPolicy(allow=allow, deny=egress_deny, task_hosts=self._task_hosts)
        record_limit = min(b for b in (record_bytes, self.limits.record_bytes) if b is not None)
        run = GatewayRun(self, run_id, Path(logs_dir), Path(submission_dir), task_id, budget, policy,
                         None if public_dir is None else Path(public_dir), record_limit)
        with self._lock:
            if self.closed:
                raise RuntimeError("the gateway is closed")
            self._runs[run.token] = run
        return run

    def forget(self, run: GatewayRun) -> None:
        with self._lock:
            self._runs.pop(run.token, None)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            runs = list(self._runs.values())
        for run in runs:
            run.close()
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()


class GatewayRun:
    """One run's view of the gateway: its token, variables, listeners, meter, budget, egress and calls."""

    def __init__(self, gateway: Gateway, run_id: str, logs_dir: Path, submission_dir: Path, task_id: str,
                 budget: Budget | None, policy: EgressPolicy, public_dir: Path | None,
                 record_bytes: int = MAX_FILE_BYTES) -> None:
        self.gateway, self.run_id, self.task_id = gateway, run_id, task_id
        self.logs_dir, self.submission_dir, self.public_dir = logs_dir, submission_dir, public_dir
        self.budget, self.policy = budget, policy
        self.token = "rexmle-" + secrets.token_urlsafe(32)
        self.meter, self.egress, self.ledger = RunMeter(), EgressLog(), Ledger(budget)
        self.trajectory = Trajectory(logs_dir, (self.token, *gateway.secrets), record_bytes)
        self.provider_tools = ToolUse(gateway.allow_provider_tools)
        self.budget_exhausted: str | None = None
        self.errors: dict[str, int] = {}
        self._lock = threading.Lock()
        self._held_body = 0  # request-body bytes this run's connections hold now (Limits.max_held_body)
        self.validations: dict = {"count": 0, "calls": []}
        self._validating = threading.Lock()
        self._listeners: list[socket.socket] = []
        self._connections: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._workers: set[threading.Thread] = set()
        self._stop = threading.Event()
        self._record: dict | None = None

    # --- what the agent gets ---------------------------------------------------------------------------

    def environment(self, base_url: str) -> dict[str, str]:
        """The agent's variables for a gateway reached at ``base_url`` (e.g. ``http://10.0.2.2:8484``)."""
        base = base_url.rstrip("/")
        parts = urlsplit(base)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"gateway base URL must be http://HOST:PORT, got {base_url!r}")
        netloc = parts.netloc.rpartition("@")[2]
        proxy = f"http://rexmle:{self.token}@{netloc}"
        no_proxy = ",".join(dict.fromkeys((parts.hostname, "localhost", "127.0.0.1", "::1")))
        env = {
            "OPENAI_BASE_URL": f"{base}/openai/v1", "OPENAI_API_BASE": f"{base}/openai/v1",
            "ANTHROPIC_BASE_URL": f"{base}/anthropic", "ANTHROPIC_API_BASE": f"{base}/anthropic",  # LiteLLM's name
            "GOOGLE_GEMINI_BASE_URL": f"{base}/gemini", "GEMINI_BASE_URL": f"{base}/gemini",
            "GEMINI_API_BASE": f"{base}/gemini",  # LiteLLM's name
            "REXMLE_GATEWAY": base, "REXMLE_VALIDATE_URL": f"{base}/rexmle/validate",
            "REXMLE_GATEWAY_TOKEN": self.token,
            "NO_PROXY": no_proxy, "no_proxy": no_proxy,
        }
        for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
            env[name] = self.token
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
            env[name] = proxy
        return env

    # --- listeners --------------------------------------------------------------------------------------

    def serve(self, listener: socket.socket, *, token_required: bool = False) -> None:
        """Serve connections accepted on an already-listening socket (it may live in the sandbox's network
        namespace); every request on it belongs to this run. The run closes it at :meth:`close`."""
        if self._stop.is_set():
            raise RuntimeError(f"gateway run {self.run_id} is closed")
        listener.settimeout(0.25)
        with self._lock:
            self._listeners.append(listener)
        thread = threading.Thread(target=self._accept, args=(listener, token_required), daemon=True,
                                  name=f"rexmle-gateway-{self.run_id}")
        thread.start()
        self._threads.append(thread)

    def host_address(self) -> tuple[str, int]:
        """A new listener on the host's loopback for a runtime that cannot place one inside the sandbox;
        there every request, proxy ones included, must carry the run's token."""
        listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.serve(listener, token_required=True)
        return listener.getsockname()

    def _accept(self, listener: socket.socket, token_required: bool) -> None:
        while not self._stop.is_set():
            try:
                sock, address = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                crowded = len(self._connections) >= self.gateway.limits.max_connections
                if not crowded:
                    self._connections.add(sock)
            if crowded:
                self._turn_away(sock)
                continue
            worker = threading.Thread(target=self._handle, args=(sock, address, token_required), daemon=True)
            with self._lock:
                self._workers = {w for w in self._workers if w.is_alive()} | {worker}
            worker.start()

    def _turn_away(self, sock: socket.socket) -> None:
        self.note_error("too_many_connections", f"more than {self.gateway.limits.max_connections} connections at once")
        body = error_body("openai", 503, "rexmle gateway: too many connections from this run")
        with suppress(OSError):
            sock.settimeout(1.0)
            sock.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                         b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        sock.close()

    def _handle(self, sock: socket.socket, address, token_required: bool) -> None:
        try:
            Connection(sock, address, self, token_required)
        except Exception as exc:  # never let a connection's failure reach the session
            self.note_error("internal", f"{type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self._connections.discard(sock)
            with suppress(OSError):
                sock.close()

    # --- requests (called by the router and the model-call forwarder) -----------------------------------

    def owns(self, presented: str) -> bool:
        return hmac.compare_digest(presented.encode("utf-8", "replace"), self.token.encode())

    def hold_body(self, size: int) -> bool:
        """Reserve ``size`` bytes of request body against the run's cap; False (nothing reserved) past it."""
        with self._lock:
            if self._held_body + size > self.gateway.limits.max_held_body:
                return False
            self._held_body += size
            return True

    def release_body(self, size: int) -> None:
        if size:
            with self._lock:
                self._held_body -= size

    def admit(self, reservation: Reservation) -> str | None:
        """Hold a call's worst case against the budget (see :class:`Budget`); the reason when it does not fit."""
        reason = self.ledger.admit(reservation)
        if reason:
            with self._lock:
                self.budget_exhausted = self.budget_exhausted or reason
        return reason

    def settle(self, usage: CallUsage, seconds: float, reservation: Reservation, *, metered: bool,
               billed: bool = True) -> tuple[float | None, str | None, tuple[int, float | None]]:
        """A call that was admitted has ended: meter it, charge the budget (what was metered, or at least its
        reservation when ``metered`` is False) and note a bound it has just reached. Returns (cost, why the
        cost is unknown, (tokens, usd) charged to the budget)."""
        if not billed:
            usage = CallUsage(usage.protocol, usage.model)  # model lists and token counts cost nothing
        cost, why = self.meter.add(usage, seconds)
        charged = self.ledger.settle(reservation, usage.input_tokens + usage.output_tokens, cost, metered=metered)
        if self.budget is not None and self.budget_exhausted is None:
            reached = self.ledger.exhausted()
            with self._lock:
                self.budget_exhausted = self.budget_exhausted or reached
        return cost, why, charged

    #: the kind a refusal is counted (and aggregated in the record) under, by status
    REFUSAL_KINDS = {401: "unauthorized", 404: "unknown_route", 429: "budget", 502: "no_upstream", 507: "record"}

    def refuse(self, conn, protocol: str, status: int, message: str, *, route: str, model: str | None = None,
               request_bytes: int | None = None, close: bool = False, api: str | None = None) -> None:
        """A clear error for the agent in its protocol's shape, and a ``refused`` line in the run's trajectory.

        The refused request's body is not kept (only ``request_bytes``): it never reached a provider, is no
        evidence of what the run did, and a refusal loop must not fill the disk."""
        kind = self.REFUSAL_KINDS.get(status, str(status))
        self.note_error(kind, message)
        record = _refusal(protocol, route, status, message, model=model, api=api)
        if request_bytes is not None:
            record["request_bytes"] = request_bytes
        self.trajectory.refused(record, kind)  # recorded before the agent hears of it, as answers are
        headers = [("x-should-retry", "false")] if status in (401, 404, 413, 429, 507) else []
        conn.respond(status, error_body(protocol, status, message), headers=headers, close=close)

    def note_bad_request(self, conn, status: int, message: str) -> None:
        """A request the gateway could not read: counted, and a ``refused`` line in the trajectory."""
        self.note_error("bad_request", message)
        route = f"{getattr(conn, 'command', None) or '?'} {(getattr(conn, 'path', None) or '').split('?', 1)[0]}"
        self.trajectory.refused(_refusal(None, clean_text(route, limit=300), status, clean_text(message, limit=500)),
                                "bad_request")

    def note_error(self, kind: str, message: str) -> None:
        with self._lock:
            self.errors[kind] = self.errors.get(kind, 0) + 1

    def validate(self) -> tuple[dict, int]:
        """The verdict of the run's own submission (one validation at a time per run)."""
        if not self._validating.acquire(blocking=False):
            return {"ok": False, "problems": ["a validation of this run is already running"]}, 429
        try:
            # the public folder the runtime handed over (the run's data), never derived here from the session
            verdict = validate_submission(self.task_id, self.public_dir, self._submission(),
                                          self.gateway.limits.validate_timeout)
        finally:
            self._validating.release()
        verdict["problems"] = [self.redact(str(p)) for p in verdict.get("problems", [])]
        verdict["warnings"] = [self.redact(str(w)) for w in verdict.get("warnings", [])]
        self._note_validation(verdict)
        return verdict, 200

    def _note_validation(self, verdict: dict) -> None:
        """The run's validation calls for its page's timeline: the first ``MAX_VALIDATIONS`` kept, the rest
        counted (an agent that validates in a loop costs a counter, not the harness's memory)."""
        with self._lock:
            self.validations["count"] += 1
            if len(self.validations["calls"]) < MAX_VALIDATIONS:
                self.validations["calls"].append({
                    "ts": datetime.now(UTC).isoformat(), "ok": bool(verdict.get("ok")),
                    "problems": [clean_text(str(p), limit=300) for p in verdict.get("problems", [])[:5]]})

    def _submission(self) -> Path:
        """The submission folder now: while the run is staged it lives in the stage (see runtime/staging)."""
        if self.submission_dir.is_dir():
            return self.submission_dir
        try:
            stage = json.loads((self.logs_dir.parent / "stage.json").read_text())["stage"]
            return Path(stage) / "submission"
        except (OSError, ValueError, KeyError, TypeError):
            return self.submission_dir

    # --- redaction --------------------------------------------------------------------------------------

    def redact(self, text: str) -> str:
        return self.trajectory.redact(text)

    # --- the end ----------------------------------------------------------------------------------------

    def close(self) -> dict:
        """Stop this run's listeners and connections; the run's record (the same on every later call)."""
        with self._lock:
            if self._record is not None:
                return self._record
            self._stop.set()
            listeners, connections = list(self._listeners), list(self._connections)
        for sock in listeners:
            with suppress(OSError):
                sock.close()
        for sock in connections:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + 5.0  # let calls cut short write their trajectory line
        with self._lock:
            threads = [*self._threads, *self._workers]
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self.gateway.forget(self)
        self.trajectory.close()
        record = {"usage": self.meter.to_json(), "egress": self.egress.to_json(), "validations": self.validations,
                  "budget_exhausted": self.budget_exhausted, "calls": str(self.trajectory.path),
                  "budget": None if self.budget is None else self.budget.to_json(), "errors": dict(self.errors),
                  "provider_tools": self.provider_tools.to_json()}
        if self.budget is not None:
            record["budget_spent"] = self.ledger.to_json()
        with self._lock:
            self._record = record
        return record


def _refusal(protocol: str | None, route: str, status: int, reason: str, *, model: str | None = None,
             **api: str | None) -> dict:
    """A refusal's trajectory line: no bodies, no usage, the reason as its error (``api`` where known)."""
    return {"protocol": protocol, **api, "route": route, "model": model, "status": status,
            "stream": False, "request": None, "response": None, "usage": None, "truncated": False,
            "error": reason, "reason": reason, "duration_s": 0.0}


_session: Gateway | None = None
_session_lock = threading.Lock()


def session_gateway(settings: Any = None) -> Gateway:
    """The harness process's one gateway, created on first use and closed at exit."""
    global _session
    with _session_lock:
        if _session is None or _session.closed:
            _session = Gateway(settings)
            atexit.register(_session.close)
        return _session


