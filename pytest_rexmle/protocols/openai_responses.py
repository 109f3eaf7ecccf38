"""OpenAI Responses (``POST /openai/v1/responses``, a stored response fetched again): the OpenAI family's
key, errors and tools (:mod:`.openai_chat`), its own items for the conversation and events for streams."""

from __future__ import annotations

import json
import re
from typing import Any

from .base import Reading, ToolCall, arguments, new_part, text_of, text_parts
from .openai_chat import OpenAIChat

#: characters of a tool's output kept when it is not text
_OUTPUT_CHARS = 4000


class OpenAIResponses(OpenAIChat):
    name = "openai_responses"
    routes = {"POST": re.compile(r"^/responses$"), "GET": re.compile(r"^/responses/resp_[\w-]+$")}
    nested = ("response",)  # a stream's events carry the response

    def recognises(self, body: Any) -> bool:
        if isinstance(body, list):
            return any(isinstance(e, dict) and str(e.get("type", "")).startswith("response.") for e in body)
        return isinstance(body, dict) and ("output" in body or "input" in body or "instructions" in body
                                           or isinstance(body.get("response"), dict))

    def read_request(self, doc: dict, into: Reading) -> None:
        messages = doc.get("input")
        if "input" in doc and not isinstance(messages, list):
            messages = [{"role": "user", "content": messages}]
        if not isinstance(messages, list):
            return
        system = [text_of(doc.get("instructions"))] if doc.get("instructions") else []
        system += [text_of(m.get("content")) for m in messages
                   if isinstance(m, dict) and m.get("role") in ("system", "developer")]
        into.system = "\n".join(t for t in system if t)
        prompt: list[str] = []
        for item in new_part(messages, lambda m: m.get("role") == "assistant"
                             or m.get("type") in ("function_call", "reasoning")):
            if item.get("role") in ("system", "developer"):
                continue
            if item.get("type") == "function_call_output":
                output = item.get("output")
                into.tool_results.append((str(item.get("call_id") or ""),
                                          output if isinstance(output, str) else json.dumps(output)[:_OUTPUT_CHARS], ""))
                continue
            content = item.get("content")
            prompt += text_parts(content) if isinstance(content, list) else [text_of(content)]
        into.prompt = "\n".join(p for p in prompt if p)

    def read_answer(self, body: dict, into: Reading) -> None:
        if isinstance(body.get("response"), dict) and "output" not in body:  # a stream's completed event
            body = body["response"]
        answer, reasoning = [], []
        for item in body.get("output") or []:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "message":
                answer.append(text_of(item.get("content")))
            elif item.get("type") == "reasoning":
                reasoning.append(text_of(item.get("summary")))
            elif item.get("type") == "function_call":
                into.tool_calls.append(ToolCall(str(item.get("call_id") or item.get("id") or ""),
                                                str(item.get("name")), arguments(item.get("arguments"))))
        into.answer = "".join(a for a in answer if a)
        into.reasoning = "\n".join(r for r in reasoning if r)

    def read_stream(self, events: list[dict], into: Reading) -> None:
        """The final ``response.completed`` event where given; else the text deltas joined."""
        for event in events:
            if event.get("type") == "response.completed" and isinstance(event.get("response"), dict):
                self.read_answer(event["response"], into)
                return
        into.answer = "".join(e["delta"] for e in events
                              if e.get("type") == "response.output_text.delta" and isinstance(e.get("delta"), str))


PROTOCOL = OpenAIResponses()
