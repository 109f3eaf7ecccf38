"""Anthropic scripts that make a real CLI misbehave the ways item 5 of issue 21 lists, to check that each
ends as a FAIL with its reason and leaves nothing running."""

from __future__ import annotations

import json

from .anthropic import AnthropicScript
from .base import Reply, Request
from .responses import ResponsesScript


class AsksAndStops(AnthropicScript):
    """The model asks the user a question and ends its turn: headless, nobody answers, no submission."""

    QUESTION = "Which architecture should I train? Please reply before I continue."

    def turn(self, request: Request, number: int) -> tuple[list[dict], str]:
        return [{"type": "text", "text": self.QUESTION}], "end_turn"


class Loops(AnthropicScript):
    """The model runs the same harmless command forever (the CLI's turn limit has to stop it)."""

    def turn(self, request: Request, number: int) -> tuple[list[dict], str]:
        return [self.tool_use(number, "echo still working")], "tool_use"


class OverBudget(AnthropicScript):
    """The model starts a command that outlives the run's budget (the start script's deadline must end it).

    A Python sleep: Claude Code 2.1.331 was seen to return at once from a bare ``sleep 3600`` in its Bash tool."""

    def turn(self, request: Request, number: int) -> tuple[list[dict], str]:
        if self.tool_results(request):
            return [{"type": "text", "text": "Waiting."}], "end_turn"
        return [self.tool_use(number, "python3 -c 'import time; time.sleep(3600)'")], "tool_use"


class AsksThroughItsTool(ResponsesScript):
    """Codex's model calls Codex's own ``request_user_input`` tool: in ``codex exec`` nobody can answer.

    The tool's arguments come from its own schema in the request; every later request gets a closing message."""

    asked: dict | None = None

    def answer(self, request: Request) -> Reply:
        tools = {t.get("name"): t for t in request.body.get("tools") or [] if t.get("type") == "function"}
        if "request_user_input" not in tools or self.call_outputs(request) or not request.path.endswith("/responses"):
            return super().answer(request) if not request.path.endswith("/responses") else self._close(request)
        self.asked = tools["request_user_input"]
        item = {"type": "function_call", "id": "fc_ask", "call_id": "call_ask", "name": "request_user_input",
                "arguments": json.dumps(self._question(tools["request_user_input"])), "status": "completed"}
        return Reply(events=self._events(self._response(request, item), item))

    def _close(self, request: Request) -> Reply:
        item = {"type": "message", "id": "msg_end", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": "I will wait for your answer.", "annotations": []}]}
        return Reply(events=self._events(self._response(request, item), item))

    @staticmethod
    def _question(tool: dict) -> dict:
        from .gemini import from_schema

        args = from_schema(tool.get("parameters") or {})
        return args if isinstance(args, dict) else {}

    @staticmethod
    def _response(request: Request, item: dict) -> dict:
        return {"id": "resp_ask", "object": "response", "status": "completed", "model": request.body.get("model"),
                "output": [item], "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}
