"""A stand-in HTTP service on this host for the tests (a scripted model provider, a chat endpoint):
started and stopped with ``with``, on a free port, served by a daemon thread."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LoopbackServer:
    """``handler`` served on ``host``:<free port> between ``__enter__`` and ``__exit__``. ``host`` is
    ``0.0.0.0`` where containers must reach it through the bridge's gateway address."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1",
                 poll_interval: float = 0.5) -> None:
        self.server = ThreadingHTTPServer((host, 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": poll_interval},
                                       daemon=True)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def send_json(handler: BaseHTTPRequestHandler, payload: object, status: int = 200) -> None:
    """``payload`` as the whole JSON reply to the request ``handler`` is answering."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
