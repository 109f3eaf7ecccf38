"""Fixtures: a stand-in provider on loopback, a gateway whose upstreams are that stand-in (with made-up
real keys), and runs served on loopback listeners as a runtime would serve them inside a sandbox."""

from __future__ import annotations

import http.client
import json
import socket
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_rexmle.gateway import Gateway, Limits

from .standin import start_standin

REAL_KEYS = {"OPENAI_API_KEY": "sk-real-openai-0123456789abcdef", "ANTHROPIC_API_KEY": "sk-ant-real-0123456789",
             "GEMINI_API_KEY": "AIza-real-gemini-0123456789"}
#: the tasks' data hosts, fixed here so the egress tests do not depend on the task folders' content
TASK_HOSTS = ("zenodo.org", "figshare.com", "drive.google.com", "isles22.grand-challenge.org", "grand-challenge.org")


@pytest.fixture
def standin():
    state, server = start_standin()
    yield state
    server.shutdown()
    server.server_close()


def make_gateway(standin, **limits) -> Gateway:
    environ = {"OPENAI_BASE_URL": standin.url + "/v1", "ANTHROPIC_BASE_URL": standin.url,
               "GEMINI_BASE_URL": standin.url, **REAL_KEYS}
    defaults = dict(client_timeout=5.0, connect_timeout=2.0, upstream_timeout=1.5, validate_timeout=60.0,
                    max_body=1024 * 1024)
    return Gateway(None, environ=environ, limits=Limits(**{**defaults, **limits}), task_hosts=TASK_HOSTS)


@pytest.fixture
def gateway(standin):
    gw = make_gateway(standin)
    yield gw
    gw.close()


@dataclass
class Served:
    """A run and the address of the listener it serves (as a sandbox's runtime would give it)."""

    run: object
    host: str
    port: int

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    def request(self, method: str, path: str, body=None, headers: dict | None = None, token: str | None = "run",
                timeout: float = 10.0):
        """(status, headers, body bytes) of one request; ``token="run"`` sends the run's token as Bearer."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        hdrs = dict(headers or {})
        if token == "run":
            hdrs.setdefault("Authorization", f"Bearer {self.run.token}")
        elif token:
            hdrs.setdefault("Authorization", f"Bearer {token}")
        raw = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        if raw is not None:
            hdrs.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=raw, headers=hdrs)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data


def open_served(gateway: Gateway, root: Path, name: str = "run1", **kw) -> Served:
    logs, submission = root / name / "logs", root / name / "submission"
    submission.mkdir(parents=True, exist_ok=True)
    run = gateway.open_run(name, logs_dir=logs, submission_dir=submission, task_id=kw.pop("task_id", "ldct-iqa"), **kw)
    listener = socket.create_server(("127.0.0.1", 0))
    run.serve(listener)
    host, port = listener.getsockname()[:2]
    return Served(run, host, port)


@pytest.fixture
def served(gateway, tmp_path) -> Served:
    s = open_served(gateway, tmp_path)
    yield s
    s.run.close()


def lines(served: Served) -> list[dict]:
    """The run's record as written: a request line and a response line per call, one line per refusal."""
    path = Path(served.run.trajectory.path)
    return [json.loads(line) for line in path.read_text().splitlines()]


def calls(served: Served) -> list[dict]:
    """One record per call (its request and response lines merged by call number) or refusal, in order."""
    out: list[dict] = []
    by_number: dict[int, dict] = {}
    for line in lines(served):
        number = line.pop("call", None)
        phase = line.pop("phase", None)
        if number is None:
            out.append(line)
        elif phase == "request":
            by_number[number] = line
            out.append(line)
        else:
            by_number[number].update({k: v for k, v in line.items() if k != "ts"})
    return out
