"""Google Gemini (``/gemini/v1beta/models/{model}:generateContent`` and its stream, token counts, embeddings,
model lists): the model is named in the path, the key in ``x-goog-api-key``."""

from __future__ import annotations

import json
import re
from typing import Any

from .base import Counts, Protocol, Reading, Routed, ToolCall, count, matched, read_prompt, text_of, whole

_ROUTES = {"POST": re.compile(r"^/(v1|v1beta|v1alpha)/models/(?P<model>[\w.-]+):(?P<verb>generateContent"
                              r"|streamGenerateContent|countTokens|embedContent|batchEmbedContents)$"),
           "GET": re.compile(r"^/(v1|v1beta|v1alpha)/models(/(?P<model>[\w.-]+))?$")}
_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 404: "NOT_FOUND", 413: "INVALID_ARGUMENT",
           429: "RESOURCE_EXHAUSTED", 502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}
#: tool entries the provider runs (keys compared without case and underscores: googleSearch = google_search)
_TOOLS = frozenset({"googlesearch", "googlesearchretrieval", "urlcontext", "codeexecution", "googlemaps",
                    "filesearch", "enterprisewebsearch", "retrieval", "mcpservers"})
#: characters of a function's response kept
_RESPONSE_CHARS = 4000


class Gemini(Protocol):
    name = provider = "gemini"
    prefix = "/gemini"
    forwarded_headers = frozenset({"x-goog-api-client"})
    upstream_env = (("GOOGLE_GEMINI_BASE_URL", "GEMINI_BASE_URL"), ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
                    "https://generativelanguage.googleapis.com")
    price_provider = "google"

    def route(self, method: str, rest: str) -> Routed | None:
        match = matched(_ROUTES, method, rest)
        if not match:
            return None
        return Routed(method == "POST" and match.group("verb") != "countTokens", match.group("model"))

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"x-goog-api-key": key}

    def error_body(self, status: int, message: str) -> bytes:
        return json.dumps({"error": {"code": status, "message": message,
                                     "status": _STATUS.get(status, "INTERNAL")}}).encode()

    def requested_output(self, doc: dict) -> tuple[int | None, int]:
        config = doc.get("generationConfig") or doc.get("generation_config")
        config = config if isinstance(config, dict) else {}
        cap = whole(config.get("maxOutputTokens", config.get("max_output_tokens")))
        return cap, max(1, whole(config.get("candidateCount", config.get("candidate_count"))) or 1)

    def provider_tools(self, doc: dict) -> list[str]:
        tools = doc.get("tools")
        return [key for tool in (tools if isinstance(tools, list) else []) if isinstance(tool, dict)
                for key in tool if key.replace("_", "").lower() in _TOOLS]

    def model(self, obj: dict) -> str | None:
        name = obj.get("modelVersion") or obj.get("model")
        return name if isinstance(name, str) and name else None

    def usage(self, obj: dict) -> Counts | None:
        """Thoughts are billed as output."""
        meta = obj.get("usageMetadata")
        if not isinstance(meta, dict):
            return None
        return Counts(count(meta.get("promptTokenCount")),
                      count(meta.get("candidatesTokenCount")) + count(meta.get("thoughtsTokenCount")),
                      count(meta.get("cachedContentTokenCount")))

    def recognises(self, body: Any) -> bool:
        if isinstance(body, list):
            return any(isinstance(e, dict) and "candidates" in e for e in body)
        return isinstance(body, dict) and ("candidates" in body or "contents" in body or "systemInstruction" in body)

    def read_request(self, doc: dict, into: Reading) -> None:
        contents = doc.get("contents")
        if not isinstance(contents, list):
            return
        system = doc.get("systemInstruction")
        into.system = text_of(system.get("parts") if isinstance(system, dict) else system) if system else ""
        read_prompt(contents, lambda m: m.get("role") == "model", lambda m: m.get("parts"), _function_response, into)

    def read_answer(self, body: dict, into: Reading) -> None:
        answer: list[str] = []
        reasoning: list[str] = []
        for candidate in body.get("candidates") or []:
            content = candidate.get("content") if isinstance(candidate, dict) else None
            for part in (content.get("parts") or []) if isinstance(content, dict) else []:
                if not isinstance(part, dict):
                    continue
                if isinstance(part.get("functionCall"), dict):
                    call = part["functionCall"]
                    into.tool_calls.append(ToolCall(str(call.get("id") or ""), str(call.get("name")), call.get("args")))
                elif isinstance(part.get("text"), str):
                    (reasoning if part.get("thought") else answer).append(part["text"])
        into.answer = "".join(a for a in answer if a)
        into.reasoning = "\n".join(r for r in reasoning if r)

    def read_stream(self, events: list[dict], into: Reading) -> None:
        """Each chunk is a whole answer's shape: read one by one, joined."""
        answer, reasoning = [], []
        for event in events:
            if "candidates" in event:
                chunk = Reading()
                self.read_answer(event, chunk)
                answer.append(chunk.answer)
                reasoning += [chunk.reasoning] if chunk.reasoning else []
                into.tool_calls += chunk.tool_calls
        into.answer, into.reasoning = "".join(answer), "".join(reasoning)


PROTOCOL = Gemini()


def _function_response(part: dict) -> tuple[str, str, str] | None:
    """A ``functionResponse`` part: the call it answers, its response as JSON (bounded) and the function's name."""
    response = part.get("functionResponse")
    if not isinstance(response, dict):
        return None
    return (str(response.get("id") or ""), json.dumps(response.get("response"))[:_RESPONSE_CHARS],
            str(response.get("name") or ""))
