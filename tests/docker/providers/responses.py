"""OpenAI Responses (``POST /v1/responses``), as Codex CLI speaks it: always streamed as server-sent events.

The script, for a request offering a shell tool: a ``function_call`` of that tool running
:data:`SUBMIT_COMMAND`; once the request's ``input`` holds the call's ``function_call_output``, a closing
assistant message. Codex's shell tool has had several shapes (``shell`` with an argv array,
``shell_command``/``exec_command`` with a string), so the call is shaped from the tool's own parameter
schema in the request rather than assumed.
"""

from __future__ import annotations

import json

from .base import FINAL_TEXT, SUBMIT_COMMAND, Reply, Request, ScriptedProvider

SHELL_TOOLS = ("shell", "shell_command", "exec_command", "local_shell")
INPUT_TOKENS, OUTPUT_TOKENS = 200, 40


def shell_call_arguments(tool: dict, command: str) -> dict:
    """The arguments a shell tool of this schema takes to run ``command``."""
    properties = (tool.get("parameters") or {}).get("properties") or {}
    for name in ("command", "cmd"):
        if name in properties:
            kind = properties[name].get("type")
            return {name: ["bash", "-lc", command] if kind == "array" else command}
    raise ValueError(f"shell tool {tool.get('name')!r} takes neither command nor cmd: {sorted(properties)}")


class ResponsesScript(ScriptedProvider):
    def __init__(self, command: str = SUBMIT_COMMAND, **kw) -> None:
        super().__init__(**kw)
        self.command = command
        self.tool_used: str | None = None

    def agent_requests(self) -> list[Request]:
        return [r for r in self.requests if r.path.endswith("/responses")]

    @staticmethod
    def call_outputs(request: Request) -> list[dict]:
        items = request.body.get("input") or []
        return [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]

    def answer(self, request: Request) -> Reply:
        if request.method == "GET" and request.path.endswith("/models"):
            return Reply({"object": "list", "data": [], "models": []})
        if not request.path.endswith("/responses"):
            raise ValueError(f"no script for {request.method} {request.path}")
        number = len(self.requests)
        if not request.body.get("input"):
            raise ValueError("a request without input")
        item = self.turn(request, number)
        response = {"id": f"resp_{number:04d}", "object": "response", "status": "completed",
                    "model": request.body.get("model", "scripted"), "output": [item],
                    "usage": {"input_tokens": INPUT_TOKENS, "input_tokens_details": {"cached_tokens": 0},
                              "output_tokens": OUTPUT_TOKENS, "output_tokens_details": {"reasoning_tokens": 0},
                              "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS}}
        if not request.streaming:
            return Reply(response)
        return Reply(events=self._events(response, item))

    @staticmethod
    def tools(request: Request) -> dict[str, dict]:
        return {t.get("name"): t for t in request.body.get("tools") or [] if t.get("type") == "function"}

    def turn(self, request: Request, number: int) -> dict:
        """The next output item: the shell call once, then a closing message."""
        tools = self.tools(request)
        shell = next((tools[n] for n in SHELL_TOOLS if n in tools), None)
        if shell is not None and not self.call_outputs(request):
            self.tool_used = shell["name"]
            return self.function_call(number, shell["name"], shell_call_arguments(shell, self.command))
        return self.message(number, FINAL_TEXT)

    @staticmethod
    def function_call(number: int, name: str, arguments: dict) -> dict:
        return {"type": "function_call", "id": f"fc_{number:04d}", "call_id": f"call_{number:04d}", "name": name,
                "arguments": json.dumps(arguments), "status": "completed"}

    @staticmethod
    def message(number: int, text: str) -> dict:
        return {"type": "message", "id": f"msg_{number:04d}", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}

    @staticmethod
    def _events(response: dict, item: dict) -> list[tuple[str, dict]]:
        started = dict(response, status="in_progress", output=[], usage=None)
        events: list[tuple[str, dict]] = [
            ("response.created", {"type": "response.created", "response": started}),
            ("response.in_progress", {"type": "response.in_progress", "response": started}),
            ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                            "item": dict(item, status="in_progress")})]
        if item["type"] == "message":
            text = item["content"][0]["text"]
            events.append(("response.output_text.delta", {"type": "response.output_text.delta", "item_id": item["id"],
                                                          "output_index": 0, "content_index": 0, "delta": text}))
            events.append(("response.output_text.done", {"type": "response.output_text.done", "item_id": item["id"],
                                                         "output_index": 0, "content_index": 0, "text": text}))
        else:
            events.append(("response.function_call_arguments.delta",
                           {"type": "response.function_call_arguments.delta", "item_id": item["id"],
                            "output_index": 0, "delta": item["arguments"]}))
            events.append(("response.function_call_arguments.done",
                           {"type": "response.function_call_arguments.done", "item_id": item["id"],
                            "output_index": 0, "arguments": item["arguments"]}))
        events.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": 0,
                                                     "item": item}))
        events.append(("response.completed", {"type": "response.completed", "response": response}))
        return events
