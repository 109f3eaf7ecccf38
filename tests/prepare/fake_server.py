"""A loopback HTTP server speaking the two APIs ``rexmle prepare`` uses, with fault injection.

* Zenodo records API: ``GET /api/records/<id>`` → ``{"files": [{key, size, checksum: "md5:…",
  links: {self}}]}``; ``GET /api/records/<id>/files/<key>/content`` serves the bytes, honouring
  ``Range: bytes=N-`` with 206 and ``Content-Range``.
* figshare API v2: ``GET /v2/articles/<id>/versions/<v>`` → ``{"files": [{name, size, computed_md5,
  download_url}]}``; downloads under ``/ndownloader/files/<id>/<name>``.

Faults: ``drop_once`` (file names whose first download sends half the body and closes the
connection), ``wrong_md5`` (file names published with a wrong checksum).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, unquote


@dataclass
class FakeServer:
    zenodo: dict[str, dict[str, bytes]] = field(default_factory=dict)
    figshare: dict[tuple[str, int], dict[str, bytes]] = field(default_factory=dict)
    drop_once: set[str] = field(default_factory=set)
    wrong_md5: set[str] = field(default_factory=set)
    log: list[tuple[str, str | None]] = field(default_factory=list)   # (path, Range header)
    url: str = ""

    def downloads(self, name: str) -> list[str | None]:
        """Range headers of every content request for ``name`` (None = no Range)."""
        return [rng for path, rng in self.log if path.endswith("/" + quote(name) + "/content")
                or path.endswith("/" + quote(name)) and "/ndownloader/" in path]

    def _md5(self, name: str, data: bytes) -> str:
        return "0" * 32 if name in self.wrong_md5 else hashlib.md5(data).hexdigest()

    def record_json(self, record: str) -> dict:
        files = self.zenodo[record]
        return {"id": record, "files": [
            {"key": name, "size": len(data), "checksum": f"md5:{self._md5(name, data)}",
             "links": {"self": f"{self.url}/api/records/{record}/files/{quote(name)}/content"}}
            for name, data in files.items()]}

    def article_json(self, article: str, version: int) -> dict:
        files = self.figshare[(article, version)]
        return {"id": int(article), "files": [
            {"id": i, "name": name, "size": len(data), "computed_md5": self._md5(name, data), "is_link_only": False,
             "download_url": f"{self.url}/ndownloader/files/{i}/{quote(name)}"}
            for i, (name, data) in enumerate(files.items())]}

    def lookup(self, path: str) -> tuple[str, bytes] | None:
        parts = [unquote(p) for p in path.split("/") if p]
        if len(parts) == 6 and parts[:2] == ["api", "records"] and parts[3] == "files" and parts[5] == "content":
            data = self.zenodo.get(parts[2], {}).get(parts[4])
            return (parts[4], data) if data is not None else None
        if len(parts) == 4 and parts[:2] == ["ndownloader", "files"]:
            for files in self.figshare.values():
                if parts[3] in files:
                    return parts[3], files[parts[3]]
        return None


def _handler(server: FakeServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # keep test output clean
            pass

        def _json(self, payload: dict) -> None:
            body = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802 - http.server API
            path = self.path.split("?")[0]
            server.log.append((path, self.headers.get("Range")))
            parts = [p for p in path.split("/") if p]
            if len(parts) == 3 and parts[:2] == ["api", "records"] and parts[2] in server.zenodo:
                return self._json(server.record_json(parts[2]))
            if len(parts) == 5 and parts[:2] == ["v2", "articles"] and parts[3] == "versions" \
                    and (parts[2], int(parts[4])) in server.figshare:
                return self._json(server.article_json(parts[2], int(parts[4])))
            found = server.lookup(path)
            if found is None:
                self.send_error(404)
                return
            name, data = found
            start = 0
            rng = self.headers.get("Range")
            if rng and rng.startswith("bytes=") and rng.endswith("-"):
                start = int(rng[6:-1])
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            body = data[start:]
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            if name in server.drop_once:
                server.drop_once.discard(name)
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(body)

    return Handler


class RunningServer:
    def __init__(self, state: FakeServer) -> None:
        self.state = state
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
        self.httpd.daemon_threads = True
        state.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
