"""A loopback server speaking the OpenAI chat-completions protocol with scripted replies.

aideml 0.2.2 asks for a plan and code in plain text (answered with prose and a code block) and for
the review of each run through the ``submit_review`` tool (answered with a tool call); newer aideml
asks for the code through a ``submit_plan_and_code`` tool, answered in kind. Every request body is kept so tests can check what the agent was told.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# AIDE runs this in ./ (with ./input = the data, ./working): a valid ldct-iqa submission
SCRIPT = """\
import os
import shutil

os.makedirs("./working", exist_ok=True)
shutil.copyfile("./input/sample_submission.csv", "./working/submission.csv")
print("Validation metric: 0.5")
"""


class ScriptedLLM:
    def __init__(self, script: str = SCRIPT) -> None:
        self.script = script
        self.requests: list[dict] = []
        self.server = ThreadingHTTPServer(("0.0.0.0", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def __enter__(self) -> "ScriptedLLM":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def reply(self, body: dict) -> dict:
        tools = body.get("tools") or []
        message: dict = {"role": "assistant", "content": None}
        finish = "tool_calls"
        if tools:
            name = tools[0]["function"]["name"]
            if name == "submit_review":
                args = {"is_bug": False, "summary": "Ran fine.", "metric": 0.5, "lower_is_better": False}
            else:
                args = {"plan": "Copy the sample submission as a first valid baseline.",
                        "code": f"```python\n{self.script}```"}
            message["tool_calls"] = [{"id": f"call_{len(self.requests)}", "type": "function",
                                      "function": {"name": name, "arguments": json.dumps(args)}}]
        else:
            message["content"] = f"Copy the sample submission.\n\n```python\n{self.script}```\n"
            finish = "stop"
        return {"id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", "scripted"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}

    def _handler(self):
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server naming)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                body["_path"] = self.path
                body["_auth"] = self.headers.get("Authorization", "")
                owner.requests.append(body)
                data = json.dumps(owner.reply(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        return Handler
