"""Run folders for judge tests and a loopback chat-completions server (no network, no real model)."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from pytest_rexmle.capability.strategies import load_strategies

from ..loopback import LoopbackServer, send_json

#: the scaffold's own instructions in every recorded call: never evidence (observed.py skips them)
SCAFFOLD = ("You are an ML agent. Strategies to consider: test-time augmentation (TTA), Optuna hyper-parameter "
            "search, 5-fold cross-validation ensembles, connected components post-processing, HU windowing.")


def model_call(text: str, *, reply: str = "", stream: bool = False) -> dict:
    """One record of the gateway's ``logs/model-calls.jsonl``: ``text`` is what the model was shown (a tool
    output in the last user message), ``reply`` what it answered (streamed as SSE events if ``stream``)."""
    request = {"model": "agent-model", "messages": [{"role": "system", "content": SCAFFOLD},
                                                    {"role": "user", "content": text}],
               "tools": [{"type": "function", "function": {"name": "bash", "description": SCAFFOLD}}]}
    if stream:
        response = [{"id": "c1", "object": "chat.completion.chunk", "model": "agent-model",
                     "choices": [{"index": 0, "delta": {"role": "assistant", "content": reply[i:i + 7]}}]}
                    for i in range(0, len(reply), 7)] + ["[DONE]"]
    else:
        response = {"id": "c1", "object": "chat.completion", "model": "agent-model",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": reply},
                                 "finish_reason": "stop"}]}
    return {"ts": "2026-11-25T05:00:00Z", "duration_s": 0.4, "protocol": "openai", "route": "/v1/chat/completions",
            "model": "agent-model", "status": 200, "stream": stream, "request": request, "response": response,
            "usage": {"input_tokens": 10, "output_tokens": 5}, "truncated": False}


def write_model_calls(run: Path, calls: list[dict]) -> None:
    (run / "logs").mkdir(parents=True, exist_ok=True)
    with (run / "logs" / "model-calls.jsonl").open("a", encoding="utf-8") as fh:
        for call in calls:
            fh.write(json.dumps(call) + "\n")


def make_run(root: Path, trace: str | list[str] = "", *, stdout: str = "", stderr: str = "",
             files: dict[str, str] | None = None, agent: str = "toy", extra: dict | None = None) -> Path:
    """A run folder in the harness layout (logs/, workspace/, submission/, run.json).

    ``trace`` is what the gateway observed: each text one recorded model call (none when empty);
    ``stdout``/``stderr`` are the agent's own logs, which no judge believes.
    """
    run = root
    for sub in ("logs", "workspace", "submission"):
        (run / sub).mkdir(parents=True, exist_ok=True)
    (run / "logs" / "agent.stdout.log").write_text(stdout, encoding="utf-8")
    (run / "logs" / "agent.stderr.log").write_text(stderr, encoding="utf-8")
    texts = [trace] if isinstance(trace, str) else list(trace)
    if any(texts):
        write_model_calls(run, [model_call(t) for t in texts])
    for rel, text in (files or {}).items():
        path = run / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (run / "run.json").write_text(json.dumps({"agent": agent, "duration": 42.5, **(extra or {})}), encoding="utf-8")
    return run


_LABEL = re.compile(r"^Log section \(([^)]*)\):$", re.MULTILINE)


def fake_model(body: dict) -> str:
    """A deterministic stand-in for the judge model.

    Capability prompt: strategy k scores 1 iff the section contains the token ``EVIDENCE-k``.
    Stage prompt: S1/S2/S3 score 1 iff the section contains ``PLAN-DONE``/``SETUP-DONE``/``VALID-DONE``.
    """
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    match = _LABEL.search(user)
    section = user[match.end():] if match else ""
    if "workflow stage" in system:
        tokens = {"S1": "PLAN-DONE", "S2": "SETUP-DONE", "S3": "VALID-DONE"}
        return json.dumps({"stages": [{"id": sid, "score": 1 if tok in section else 0, "evidence": tok}
                                      for sid, tok in tokens.items()]})
    results = [{"id": s.id, "strategy": s.name, "score": 1 if re.search(rf"\bEVIDENCE-{s.id}\b", section) else 0,
                "evidence": f"saw EVIDENCE-{s.id}" if re.search(rf"\bEVIDENCE-{s.id}\b", section) else ""}
               for s in load_strategies()]
    return json.dumps({"results": results})


class ChatServer(LoopbackServer):
    """``POST /v1/chat/completions`` on 127.0.0.1:<free port>; records every request.

    ``script`` is a list of replies used first, in order (a str = message content, an int = HTTP status);
    afterwards ``responder(body)`` answers.
    """

    def __init__(self, responder: Callable[[dict], str] = fake_model) -> None:
        self.responder = responder
        self.script: list[str | int] = []
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                with server.lock:
                    server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                    step = server.script.pop(0) if server.script else None
                if self.path != "/v1/chat/completions":
                    self.send_response(404)
                    self.end_headers()
                    return
                if isinstance(step, int):
                    self.send_response(step)
                    self.end_headers()
                    return
                content = step if isinstance(step, str) else server.responder(body)
                send_json(self, {"id": "x", "object": "chat.completion", "model": body.get("model"),
                                 "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                              "finish_reason": "stop"}],
                                 "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}})

        super().__init__(Handler, poll_interval=0.05)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"
