"""Anthropic Messages (``/anthropic/v1/messages``, token counts, model lists)."""

from __future__ import annotations

import json
import re
from typing import Any

from .base import (
    MODEL_ID,
    Counts,
    Protocol,
    Reading,
    Routed,
    ToolCall,
    arguments,
    count,
    matched,
    read_prompt,
    text_of,
    whole,
)

_ROUTES = {"POST": re.compile(r"^/v1/(messages|messages/count_tokens)$"),
           "GET": re.compile(rf"^/v1/models(/{MODEL_ID})?$")}
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
          413: "request_too_large", 429: "rate_limit_error", 502: "api_error", 503: "overloaded_error",
          504: "api_error"}
#: server tools (dated types: web_search_20250305, web_fetch_20250910, code_execution_20250825, ...)
_TOOLS = re.compile(r"^(web_search|web_fetch|code_execution|mcp_toolset)(_\w+)?$")
_TOOL_USE = ("tool_use", "server_tool_use")


class Anthropic(Protocol):
    name = provider = "anthropic"
    prefix = "/anthropic"
    forwarded_headers = frozenset({"anthropic-version", "anthropic-beta"})
    telemetry = True
    upstream_env = (("ANTHROPIC_BASE_URL",), ("ANTHROPIC_API_KEY",), "https://api.anthropic.com")
    price_provider = "anthropic"
    nested = ("message",)  # message_start carries the message

    def route(self, method: str, rest: str) -> Routed | None:
        if not matched(_ROUTES, method, rest):
            return None
        return Routed(billed=method == "POST" and not rest.endswith("count_tokens"))

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}

    def error_body(self, status: int, message: str) -> bytes:
        return json.dumps({"type": "error", "error": {"type": _TYPES.get(status, "api_error"),
                                                      "message": message}}).encode()

    def requested_output(self, doc: dict) -> tuple[int | None, int]:
        return whole(doc.get("max_tokens")), 1

    def provider_tools(self, doc: dict) -> list[str]:
        tools = doc.get("tools")
        names = [tool["type"] for tool in (tools if isinstance(tools, list) else [])
                 if isinstance(tool, dict) and isinstance(tool.get("type"), str) and _TOOLS.match(tool["type"])]
        if doc.get("mcp_servers"):
            names.append("mcp_servers")
        if doc.get("container") is not None:
            names.append("container")
        return names

    def counts(self, usage: dict) -> Counts:
        """``input_tokens`` is the uncached part here: the cache reads and writes are added to it."""
        read, write = count(usage.get("cache_read_input_tokens")), count(usage.get("cache_creation_input_tokens"))
        fresh = count(usage.get("input_tokens"))
        return Counts(fresh + read + write if "input_tokens" in usage else 0, count(usage.get("output_tokens")),
                      read, write)

    def recognises(self, body: Any) -> bool:
        if isinstance(body, list):
            return any(isinstance(e, dict) and str(e.get("type", "")).startswith(("message_", "content_block_"))
                       for e in body)
        return isinstance(body, dict) and (body.get("type") == "message" or ("content" in body and "role" in body)
                                           or "system" in body)

    def read_request(self, doc: dict, into: Reading) -> None:
        messages = doc.get("messages")
        if not isinstance(messages, list):
            return
        into.system = text_of(doc.get("system")) if doc.get("system") else ""
        read_prompt(messages, lambda m: m.get("role") == "assistant", lambda m: m.get("content"), _tool_result, into)

    def read_answer(self, body: dict, into: Reading) -> None:
        answer, reasoning = [], []
        for block in body.get("content") or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                answer.append(str(block.get("text") or ""))
            elif block.get("type") == "thinking":
                reasoning.append(str(block.get("thinking") or ""))
            elif block.get("type") in _TOOL_USE:
                into.tool_calls.append(ToolCall(str(block.get("id") or ""), str(block.get("name")), block.get("input")))
        into.answer = "".join(a for a in answer if a)
        into.reasoning = "\n".join(r for r in reasoning if r)

    def read_stream(self, events: list[dict], into: Reading) -> None:
        answer, reasoning = [], []
        blocks: dict[Any, dict] = {}
        for event in events:
            kind = event.get("type")
            if kind == "content_block_start" and isinstance(event.get("content_block"), dict):
                blocks[event.get("index", len(blocks))] = {"partial": "", **event["content_block"]}
            elif kind == "content_block_delta" and isinstance(event.get("delta"), dict):
                delta, block = event["delta"], blocks.setdefault(event.get("index", 0), {"type": "text", "partial": ""})
                if delta.get("type") == "text_delta":
                    answer.append(str(delta.get("text") or ""))
                elif delta.get("type") == "thinking_delta":
                    reasoning.append(str(delta.get("thinking") or ""))
                elif delta.get("type") == "input_json_delta":
                    block["partial"] = str(block.get("partial") or "") + str(delta.get("partial_json") or "")
        into.tool_calls += [ToolCall(str(b.get("id") or ""), str(b.get("name")),
                                     arguments(b["partial"]) if b.get("partial") else b.get("input"))
                            for b in blocks.values() if b.get("type") in _TOOL_USE]
        into.answer, into.reasoning = "".join(answer), "".join(reasoning)


PROTOCOL = Anthropic()


def _tool_result(part: dict) -> tuple[str, str, str] | None:
    """A ``tool_result`` part: the call it answers and its text."""
    if part.get("type") != "tool_result":
        return None
    return str(part.get("tool_use_id") or ""), text_of(part.get("content")), ""
