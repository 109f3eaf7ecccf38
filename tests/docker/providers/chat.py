"""OpenAI chat completions (``POST /v1/chat/completions``), as mini-swe-agent speaks it through LiteLLM.

The script, for a request offering the ``bash`` tool: a ``bash`` call running :data:`SUBMIT_COMMAND`;
once the conversation holds that call's ``tool`` message, a ``bash`` call echoing mini-swe-agent's
finishing line (it ends only on a command whose output starts with it). A streamed request is answered
with ``chat.completion.chunk`` deltas and ``data: [DONE]``.
"""

from __future__ import annotations

import json
import time

from .base import SUBMIT_COMMAND, Reply, Request, ScriptedProvider

FINISH_COMMAND = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
PROMPT_TOKENS, COMPLETION_TOKENS = 150, 25


class ChatScript(ScriptedProvider):
    def __init__(self, tool: str = "bash", **kw) -> None:
        super().__init__(**kw)
        self.tool = tool

    def agent_requests(self) -> list[Request]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    @staticmethod
    def tool_messages(request: Request) -> list[dict]:
        return [m for m in request.body.get("messages") or [] if m.get("role") == "tool"]

    def answer(self, request: Request) -> Reply:
        if not request.path.endswith("/chat/completions"):
            raise ValueError(f"no script for {request.method} {request.path}")
        tools = [t.get("function", {}).get("name") for t in request.body.get("tools") or []]
        if self.tool not in tools:
            raise ValueError(f"the {self.tool} tool is not offered (tools: {tools})")
        number = len(self.requests)
        done = self.tool_messages(request)
        command = FINISH_COMMAND if done else SUBMIT_COMMAND
        text = "The submission is in place; finishing." if done else "Copy the sample submission, then validate."
        call = {"id": f"call_{number:04d}", "type": "function",
                "function": {"name": self.tool, "arguments": json.dumps({"command": command})}}
        body = {"id": f"chatcmpl-{number:04d}", "object": "chat.completion", "created": int(time.time()),
                "model": request.body.get("model", "scripted"),
                "choices": [{"index": 0, "finish_reason": "tool_calls",
                             "message": {"role": "assistant", "content": text, "tool_calls": [call]}}],
                "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                          "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS}}
        return Reply(events=self._chunks(body)) if request.streaming else Reply(body)

    @staticmethod
    def _chunks(body: dict) -> list[tuple[None, dict | str]]:
        choice = body["choices"][0]
        head = {k: body[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
        calls = [dict(c, index=i) for i, c in enumerate(choice["message"]["tool_calls"])]
        deltas = [{"role": "assistant", "content": choice["message"]["content"]}, {"tool_calls": calls}]
        events: list[tuple[None, dict | str]] = [
            (None, head | {"choices": [{"index": 0, "delta": d, "finish_reason": None}]}) for d in deltas]
        events.append((None, head | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}],
                                     "usage": body["usage"]}))
        events.append((None, "[DONE]"))
        return events
