"""OpenAI Chat Completions (and the legacy completions, embeddings and model lists of ``/openai/v1``).

Also the OpenAI family's shared parts, which :mod:`.openai_responses` inherits: the key as a Bearer token,
the error shape the ``openai`` SDKs parse, the host's upstream variables, the provider-side tools and the
output caps (OpenAI-compatible servers accept either API's names, so both are read on both routes).
"""

from __future__ import annotations

import json
import re
from typing import Any

from .base import (
    Counts,
    Protocol,
    Reading,
    Routed,
    ToolCall,
    arguments,
    count,
    matched,
    new_part,
    text_of,
    text_parts,
    whole,
)

_ROUTES = {"POST": re.compile(r"^/(chat/completions|completions|embeddings)$"),
           # a model id may hold slashes on OpenAI-compatible servers (vLLM, LiteLLM: "org/model")
           "GET": re.compile(r"^/models(/[\w.:-]+(/[\w.:-]+)*)?$")}
_TYPES = {400: "invalid_request_error", 401: "invalid_api_key", 404: "not_found_error", 413: "invalid_request_error",
          429: "insufficient_quota", 502: "api_error", 503: "api_error", 504: "timeout"}
#: Responses tool types the provider runs: web search (every dated variant), file search over the
#: organisation's stored files, remote MCP servers and connectors (Google Drive, ...), the code container
_TOOLS = re.compile(r"^(web_search\w*|file_search\w*|mcp|code_interpreter\w*)$")
#: Chat Completions models that search the web whatever the request says
_SEARCH_MODELS = re.compile(r"search-preview|search-api|deep-research", re.IGNORECASE)
#: the names of the output cap, in order of precedence (``max_output_tokens``: the Responses API)
OUTPUT_KEYS = ("max_completion_tokens", "max_output_tokens", "max_tokens")


class OpenAIChat(Protocol):
    name, provider, prefix = "openai_chat", "openai", "/openai"
    forwarded_headers = frozenset({"openai-beta"})
    telemetry = True
    upstream_env = (("OPENAI_BASE_URL", "OPENAI_API_BASE"), ("OPENAI_API_KEY",), "https://api.openai.com/v1")
    account_headers = (("OpenAI-Organization", ("OPENAI_ORG_ID", "OPENAI_ORGANIZATION")),
                       ("OpenAI-Project", ("OPENAI_PROJECT_ID", "OPENAI_PROJECT")))
    routes = _ROUTES

    def rest(self, path: str) -> str:
        return path[3:] if path.startswith("/v1/") else path

    def route(self, method: str, rest: str) -> Routed | None:
        return Routed(billed=method == "POST") if matched(self.routes, method, rest) else None

    def error_body(self, status: int, message: str) -> bytes:
        kind = _TYPES.get(status, "api_error")
        return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": kind}}).encode()

    def requested_output(self, doc: dict) -> tuple[int | None, int]:
        cap = next((whole(doc[k]) for k in OUTPUT_KEYS if k in doc and whole(doc[k]) is not None), None)
        return cap, max(1, whole(doc.get("n")) or 1)

    def provider_tools(self, doc: dict) -> list[str]:
        tools = doc.get("tools")
        names = [tool["type"] for tool in (tools if isinstance(tools, list) else [])
                 if isinstance(tool, dict) and isinstance(tool.get("type"), str) and _TOOLS.match(tool["type"])]
        if doc.get("web_search_options") is not None:
            names.append("web_search_options")
        if isinstance(doc.get("model"), str) and _SEARCH_MODELS.search(doc["model"]):
            names.append(f"web search model {doc['model'][:80]}")
        if isinstance(doc.get("prompt"), dict):
            names.append("stored prompt (its tools are not visible to the gateway)")
        return names

    def counts(self, usage: dict) -> Counts:
        """The Responses API's names, or chat completions', completions' and embeddings' (an
        OpenAI-compatible server may answer either on either route)."""
        details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
        cached = count(details.get("cached_tokens")) if isinstance(details, dict) else 0
        if "input_tokens" in usage or "output_tokens" in usage:
            return Counts(count(usage.get("input_tokens")), count(usage.get("output_tokens")), cached)
        return Counts(count(usage.get("prompt_tokens")), count(usage.get("completion_tokens")), cached)

    # --- the conversation ------------------------------------------------------------------------------

    def recognises(self, body: Any) -> bool:
        if isinstance(body, list):
            return any(isinstance(e, dict) and "choices" in e for e in body)
        return isinstance(body, dict) and ("choices" in body or "messages" in body)

    def read_request(self, doc: dict, into: Reading) -> None:
        messages = doc.get("messages")
        if not isinstance(messages, list):
            return
        into.system = "\n".join(t for t in (text_of(m.get("content")) for m in messages if isinstance(m, dict)
                                            and m.get("role") in ("system", "developer")) if t)
        prompt: list[str] = []
        for message in new_part(messages, lambda m: m.get("role") == "assistant"):
            if message.get("role") in ("system", "developer"):
                continue
            if message.get("role") == "tool":
                into.tool_results.append((str(message.get("tool_call_id") or ""), text_of(message.get("content")),
                                          str(message.get("name") or "")))
                continue
            content = message.get("content")
            prompt += text_parts(content) if isinstance(content, list) else [text_of(content)]
        into.prompt = "\n".join(p for p in prompt if p)

    def read_answer(self, body: dict, into: Reading) -> None:
        answer, reasoning = [], []
        for choice in body.get("choices") or []:
            message = choice.get("message") if isinstance(choice, dict) else None
            if not isinstance(message, dict):
                continue
            answer.append(text_of(message.get("content")))
            reasoning += [message[k] for k in ("reasoning_content", "reasoning") if isinstance(message.get(k), str)]
            for call in message.get("tool_calls") or []:
                if isinstance(call, dict) and isinstance(call.get("function"), dict):
                    into.tool_calls.append(ToolCall(str(call.get("id") or ""), str(call["function"].get("name")),
                                                    arguments(call["function"].get("arguments"))))
        into.answer = "".join(a for a in answer if a)
        into.reasoning = "\n".join(r for r in reasoning if r)

    def read_stream(self, events: list[dict], into: Reading) -> None:
        answer, reasoning = [], []
        calls: dict[int, dict] = {}
        for event in events:
            for choice in event.get("choices") or []:
                delta = choice.get("delta") if isinstance(choice, dict) else None
                if not isinstance(delta, dict):
                    continue
                if isinstance(delta.get("content"), str):
                    answer.append(delta["content"])
                reasoning += [delta[k] for k in ("reasoning_content", "reasoning") if isinstance(delta.get(k), str)]
                for call in delta.get("tool_calls") or []:
                    if not isinstance(call, dict):
                        continue
                    slot = calls.setdefault(call["index"] if isinstance(call.get("index"), int) else 0,
                                            {"id": "", "name": "", "arguments": ""})
                    slot["id"] = call.get("id") or slot["id"]
                    function = call["function"] if isinstance(call.get("function"), dict) else {}
                    slot["name"] = function.get("name") or slot["name"]
                    slot["arguments"] += function.get("arguments") or ""
        into.tool_calls += [ToolCall(s["id"], s["name"], arguments(s["arguments"])) for s in calls.values()]
        into.answer, into.reasoning = "".join(answer), "".join(reasoning)


def first_content(payload: Any) -> Any:
    """The first choice's message content of a chat completion (what the judge asked for), or ``""``."""
    try:
        return payload["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return ""


PROTOCOL = OpenAIChat()
