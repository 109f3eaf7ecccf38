"""Anthropic Messages (``POST /v1/messages``), as Claude Code speaks it: streamed by default.

The script, for a request that offers the ``Bash`` tool (Claude Code's agent loop): first a ``tool_use``
of Bash running :data:`SUBMIT_COMMAND`; once the conversation holds its ``tool_result``, a closing text
with ``end_turn``. Any other request (side queries without that tool) gets a short text. Token counts
are fixed per answer and summed in ``served`` so a test can hold the CLI's own usage report against
what was really served.
"""

from __future__ import annotations

import json

from .base import FINAL_TEXT, SUBMIT_COMMAND, Reply, Request, ScriptedProvider

INPUT_TOKENS, OUTPUT_TOKENS = 120, 30


class AnthropicScript(ScriptedProvider):
    def __init__(self, tool: str = "Bash", command: str = SUBMIT_COMMAND, **kw) -> None:
        super().__init__(**kw)
        self.tool, self.command = tool, command
        self.served = {"input_tokens": 0, "output_tokens": 0, "messages": 0}

    def agent_requests(self) -> list[Request]:
        return [r for r in self.requests if r.path.endswith("/messages") and self._offers_tool(r)]

    def _offers_tool(self, request: Request) -> bool:
        return any(t.get("name") == self.tool for t in request.body.get("tools") or [])

    @staticmethod
    def tool_results(request: Request) -> list[dict]:
        """The ``tool_result`` blocks of the request's last user message."""
        messages = request.body.get("messages") or []
        last = messages[-1] if messages else {}
        content = last.get("content") if last.get("role") == "user" else None
        return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"] \
            if isinstance(content, list) else []

    def answer(self, request: Request) -> Reply:
        if request.path.endswith("/count_tokens"):
            return Reply({"input_tokens": INPUT_TOKENS})
        if not request.path.endswith("/messages"):
            raise ValueError(f"no script for {request.method} {request.path}")
        number = len(self.requests)
        blocks, stop = self.turn(request, number) if self._offers_tool(request) else \
            ([{"type": "text", "text": "Submission task"}], "end_turn")
        self.served["input_tokens"] += INPUT_TOKENS
        self.served["output_tokens"] += OUTPUT_TOKENS
        self.served["messages"] += 1
        message = {"id": f"msg_{number:04d}", "type": "message", "role": "assistant",
                   "model": request.body.get("model", "scripted"), "content": blocks, "stop_reason": stop,
                   "stop_sequence": None, "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS}}
        return Reply(events=self._events(message)) if request.streaming else Reply(message)

    def turn(self, request: Request, number: int) -> tuple[list[dict], str]:
        """The agent loop's next answer: run the command once, then close."""
        if not self.tool_results(request):
            return [{"type": "text", "text": "I will copy the sample submission and validate it."},
                    self.tool_use(number, self.command)], "tool_use"
        return [{"type": "text", "text": FINAL_TEXT}], "end_turn"

    def tool_use(self, number: int, command: str) -> dict:
        return {"type": "tool_use", "id": f"toolu_{number:04d}", "name": self.tool,
                "input": {"command": command, "description": "Run a step of the task"}}

    @staticmethod
    def _events(message: dict) -> list[tuple[str, dict]]:
        """The message as Anthropic's stream: start, each block (text deltas, tool input as JSON deltas), end."""
        start = dict(message, content=[], stop_reason=None, usage={"input_tokens": INPUT_TOKENS, "output_tokens": 1})
        events: list[tuple[str, dict]] = [("message_start", {"type": "message_start", "message": start})]
        for index, block in enumerate(message["content"]):
            if block["type"] == "text":
                opening, delta = dict(block, text=""), {"type": "text_delta", "text": block["text"]}
            else:
                opening = dict(block, input={})
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            events += [("content_block_start", {"type": "content_block_start", "index": index,
                                                "content_block": opening}),
                       ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}),
                       ("content_block_stop", {"type": "content_block_stop", "index": index})]
        events += [("message_delta", {"type": "message_delta", "delta": {"stop_reason": message["stop_reason"],
                                                                         "stop_sequence": None},
                                      "usage": {"output_tokens": OUTPUT_TOKENS}}),
                   ("message_stop", {"type": "message_stop"})]
        return events
