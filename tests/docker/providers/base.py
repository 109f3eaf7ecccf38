"""The part every scripted provider shares: an HTTP server on the host that records each request and
answers it from a script, as one JSON body or as server-sent events.

Why a server and not a mock: the CLIs under test are the real ones from their registries, running in
their images; only the model behind them is scripted. Each request is kept whole (path, query, the
headers that matter, body) so a test can check what the CLI really sent, and a request the script
cannot answer is kept in ``errors`` and answered 500, so the test names the gap instead of hanging.

``max_requests`` bounds the conversation: a CLI that keeps asking past it gets a 429 it cannot get
past, so a looping CLI ends instead of running the test into its timeout.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

from ...loopback import LoopbackServer, send_json

#: the shell command every script has the CLI run through its own tool: a valid ldct-iqa submission, checked
SUBMIT_COMMAND = ('cp "$REXMLE_DATA_DIR/sample_submission.csv" "$REXMLE_SUBMISSION_DIR/submission.csv" && '
                  'rexmle validate --submission "$REXMLE_SUBMISSION_DIR"')
FINAL_TEXT = "The submission is in place and validates."
KEPT_HEADERS = ("authorization", "x-api-key", "x-goog-api-key", "content-type", "accept", "user-agent",
                "anthropic-version", "openai-beta")


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: dict = field(default_factory=dict)

    @property
    def streaming(self) -> bool:
        return bool(self.body.get("stream")) or self.query.get("alt") == ["sse"]


@dataclass
class Reply:
    """A JSON body, or ``events`` as server-sent events (``(event name or None, payload)`` pairs)."""
    body: dict | None = None
    events: list[tuple[str | None, dict | str]] | None = None
    status: int = 200


class ScriptedProvider(LoopbackServer):
    """Subclasses implement :meth:`answer`; the base serves, records and streams."""

    def __init__(self, max_requests: int = 60) -> None:
        self.requests: list[Request] = []
        self.errors: list[str] = []
        self.max_requests = max_requests
        self.lock = threading.Lock()
        # every interface: containers reach the host through the bridge's gateway address
        super().__init__(self._handler(), "0.0.0.0")

    def answer(self, request: Request) -> Reply:
        raise NotImplementedError

    def dump(self) -> str:
        """The recorded conversation, for a failing assertion's message."""
        return json.dumps([{"path": r.path, "body": r.body} for r in self.requests], default=str)[-6000:]

    def _handler(self):
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802
                self._serve(b"")

            def do_POST(self):  # noqa: N802
                self._serve(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

            def _serve(self, raw: bytes) -> None:
                url = urlsplit(self.path)
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    body = {"_raw": raw[:2000].decode(errors="replace")}
                request = Request(self.command, url.path, parse_qs(url.query),
                                  {k.lower(): v for k, v in self.headers.items() if k.lower() in KEPT_HEADERS},
                                  body if isinstance(body, dict) else {"_json": body})
                with owner.lock:
                    owner.requests.append(request)
                    if len(owner.requests) > owner.max_requests:
                        reply = Reply({"error": {"message": "scripted provider: request budget spent"}}, status=429)
                    else:
                        try:
                            reply = owner.answer(request)
                        except Exception as exc:  # a scripting gap: visible to the test, not a hang
                            owner.errors.append(f"{request.path}: {exc.__class__.__name__}: {exc}")
                            reply = Reply({"error": {"message": f"scripted provider: {exc}"}}, status=500)
                if reply.events is not None:
                    self._stream(reply)
                else:
                    send_json(self, reply.body, reply.status)


            def _stream(self, reply: Reply) -> None:
                self.send_response(reply.status)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for name, payload in reply.events:
                    data = payload if isinstance(payload, str) else json.dumps(payload)
                    chunk = (f"event: {name}\n" if name else "") + f"data: {data}\n\n"
                    self.wfile.write(chunk.encode())
                    self.wfile.flush()
                self.close_connection = True

            def log_message(self, *args) -> None:
                pass

        return Handler
