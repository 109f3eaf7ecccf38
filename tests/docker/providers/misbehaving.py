"""Anthropic scripts that make a real CLI misbehave the ways item 5 of issue 21 lists, to check that each
ends as a FAIL with its reason and leaves nothing running."""

from __future__ import annotations

from .anthropic import AnthropicScript
from .base import Request
from .gemini import from_schema
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

    The call's arguments are built from the tool's own schema in the request; once its output is back, the
    model closes with a message (and so leaves no submission)."""

    asked: dict | None = None

    def turn(self, request: Request, number: int) -> dict:
        tool = self.tools(request).get("request_user_input")
        if tool is None or self.call_outputs(request):
            return self.message(number, "I will wait for your answer.")
        self.asked = tool
        arguments = from_schema(tool.get("parameters") or {})
        return self.function_call(number, "request_user_input", arguments if isinstance(arguments, dict) else {})
