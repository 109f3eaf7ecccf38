"""``rexmle prepare`` without network or with a flaky one: fail fast with a hint when the host cannot be
reached at all; retry, one announced line per retry, only what can pass (timeouts, 5xx, resets)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pytest_rexmle.data.prepare.download import RemoteFile, download, zenodo_files
from pytest_rexmle.data.prepare.errors import PrepareError


class Script:
    """A loopback server that answers each request with the next scripted step for its path."""

    def __init__(self, steps: dict[str, list]) -> None:
        self.steps = steps
        self.hits: dict[str, int] = {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802
                n = outer.hits.get(self.path, 0)
                outer.hits[self.path] = n + 1
                plan = outer.steps.get(self.path, [404])
                step = plan[min(n, len(plan) - 1)]
                if step == "reset":  # accept, then drop the connection without an answer
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                status, body = (step, b"") if isinstance(step, int) else (200, step)
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def script(monkeypatch):
    servers = []

    def start(steps):
        server = Script(steps)
        servers.append(server)
        monkeypatch.setenv("REXMLE_ZENODO_URL", server.url)
        return server

    monkeypatch.setenv("REXMLE_DOWNLOAD_BACKOFF", "0")
    yield start
    for server in servers:
        server.close()


def _record(url: str) -> bytes:
    return json.dumps({"files": [{"key": "a.zip", "size": 3, "checksum": "md5:900150983cd24fb0d6963f7d28e17f72",
                                  "links": {"self": f"{url}/files/a.zip"}}]}).encode()


def test_unresolvable_host_fails_within_seconds_with_the_manual_route(tmp_path):
    """Before: silent for about two minutes of back-off, then a bare ``urlopen error``."""
    env = {**os.environ, "REXMLE_ZENODO_URL": "https://nonexistent.invalid", "REXMLE_DOWNLOAD_BACKOFF": "2"}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest_rexmle", "prepare", "isles22", "--data-dir", str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=120)
    elapsed = time.monotonic() - start
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert elapsed < 20, f"took {elapsed:.1f} s"
    err = proc.stderr
    assert "cannot reach nonexistent.invalid (the host name does not resolve" in err
    assert "https://zenodo.org/records/7960856" in err  # where to fetch the files by hand
    assert "--raw-archive PATH" in err
    assert "retry" not in err and "Traceback" not in err


def test_5xx_answers_are_retried_with_a_line_each(script, capsys):
    server = script({})
    server.steps["/api/records/42"] = [503, 502, _record(server.url)]
    files = zenodo_files("42")
    assert [(f.name, f.size, f.md5) for f in files] == [("a.zip", 3, "900150983cd24fb0d6963f7d28e17f72")]
    assert server.hits["/api/records/42"] == 3
    lines = [line for line in capsys.readouterr().err.splitlines() if "retry" in line]
    assert len(lines) == 2
    assert "HTTP 503" in lines[0] and "retry 1 of 6" in lines[0]
    assert "HTTP 502" in lines[1] and "retry 2 of 6" in lines[1]


def test_a_404_is_not_retried(script, capsys):
    server = script({"/api/records/7": [404]})
    with pytest.raises(PrepareError, match="HTTP 404"):
        zenodo_files("7")
    assert server.hits["/api/records/7"] == 1
    assert "retry" not in capsys.readouterr().err


def test_a_reset_connection_is_retried_and_the_file_arrives(script, tmp_path, capsys):
    server = script({"/files/a.zip": ["reset", b"abc"]})
    remote = RemoteFile("a.zip", f"{server.url}/files/a.zip", 3, "900150983cd24fb0d6963f7d28e17f72")
    path = download(remote, tmp_path / "a.zip", progress=False)
    assert path.read_bytes() == b"abc" and server.hits["/files/a.zip"] == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "retry" in line]
    assert "downloading a.zip" in line and "retry 1 of 6" in line


def test_a_refused_connection_fails_at_once_with_the_hint(script, tmp_path, capsys):
    server = script({})
    url = server.url
    server.close()  # nothing listens on that port any more
    remote = RemoteFile("a.zip", f"{url}/files/a.zip", 3, None)
    start = time.monotonic()
    with pytest.raises(PrepareError, match=r"host is unreachable.*'a.zip'.*--raw-archive"):
        download(remote, tmp_path / "a.zip", progress=False)
    assert time.monotonic() - start < 5
    assert "retry" not in capsys.readouterr().err


def test_prepare_all_without_network_says_each_download_once(tmp_path):
    """Before: 20 messages of about 400 characters, the same TopCoW download six times, the same unreachable
    host in each. Now: the host once, then one line per distinct download naming every challenge it serves
    and one command for them all; the two Google Drive files keep their own lines."""
    env = {**os.environ, "REXMLE_ZENODO_URL": "https://nonexistent.invalid",
           "REXMLE_FIGSHARE_URL": "https://nonexistent.invalid", "REXMLE_DOWNLOAD_BACKOFF": "0"}
    proc = subprocess.run([sys.executable, "-m", "pytest_rexmle", "prepare", "all", "--data-dir", str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert sum("cannot reach nonexistent.invalid" in line for line in lines) == 1
    topcow = [line for line in lines if "TopCoW2024_Data_Release.zip" in line]
    ids = "topcow-cta-cls topcow-cta-det topcow-cta-seg topcow-mra-cls topcow-mra-det topcow-mra-seg"
    assert topcow == [f"  {ids} (one download for the 6): TopCoW2024_Data_Release.zip from "
                      f"https://zenodo.org/records/15692630; then run `rexmle prepare {ids} --raw-archive PATH`"]
    assert sum("must be downloaded by hand" in line for line in lines) == 2  # ldct-iqa's and usenhance's
    assert len(lines) == 2 + 1 + 10 + 1, proc.stderr  # Google Drive files, the host, 10 downloads, the sum
    assert lines[-1] == "rexmle prepare: 20 of 20 task(s) not prepared (12 download(s) to fetch by hand, above)"
    assert len(proc.stderr) < 3500 and "Traceback" not in proc.stderr
