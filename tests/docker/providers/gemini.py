"""Gemini API (``POST /v1beta/models/<model>:generateContent`` and ``:streamGenerateContent?alt=sse``), as
Gemini CLI speaks it.

The script, for a request offering the ``run_shell_command`` function: a ``functionCall`` of it running
:data:`SUBMIT_COMMAND`; once the request's last turn holds its ``functionResponse``, a closing text.
Gemini CLI also sends side requests without tools (its next-speaker check, model routing, loop
detection) that ask for JSON by a response schema; those get a JSON object built from that schema,
with the answers that let the session end normally (``next_speaker: user``).
"""

from __future__ import annotations

from .base import FINAL_TEXT, SUBMIT_COMMAND, Reply, Request, ScriptedProvider

PROMPT_TOKENS, CANDIDATE_TOKENS = 300, 50
#: what a side request's schema fields get, where the value matters to how the CLI goes on
SCHEMA_ANSWERS = {"next_speaker": "user", "model_choice": "flash", "is_stuck": False, "complexity": "simple"}


def from_schema(schema: dict) -> object:
    """A value of the given (OpenAPI-style or JSON-schema) shape; enum fields take their first value."""
    kind = str(schema.get("type", "object")).lower()
    if schema.get("enum"):
        return schema["enum"][0]
    if kind == "object":
        return {name: SCHEMA_ANSWERS.get(name, from_schema(sub))
                for name, sub in (schema.get("properties") or {}).items()}
    if kind == "array":
        return []
    if kind in ("number", "integer"):
        return 0
    if kind == "boolean":
        return False
    return "ok"


class GeminiScript(ScriptedProvider):
    def __init__(self, function: str = "run_shell_command", command: str = SUBMIT_COMMAND, **kw) -> None:
        super().__init__(**kw)
        self.function, self.command = function, command

    def _offers(self, request: Request) -> bool:
        return any(d.get("name") == self.function
                   for t in request.body.get("tools") or [] for d in t.get("functionDeclarations") or [])

    def agent_requests(self) -> list[Request]:
        return [r for r in self.requests if r.path.endswith("enerateContent") and self._offers(r)]

    @staticmethod
    def function_responses(request: Request) -> list[dict]:
        contents = request.body.get("contents") or []
        last = contents[-1] if contents else {}
        return [p["functionResponse"] for p in last.get("parts") or [] if "functionResponse" in p]

    def answer(self, request: Request) -> Reply:
        path = request.path
        if path.endswith(":countTokens"):
            return Reply({"totalTokens": PROMPT_TOKENS})
        if not path.endswith(("generateContent", "GenerateContent")):
            raise ValueError(f"no script for {request.method} {path}")
        config = request.body.get("generationConfig") or {}
        schema = config.get("responseJsonSchema") or config.get("responseSchema")
        if self._offers(request) and not self.function_responses(request):
            parts = [{"text": "I will copy the sample submission and validate it."},
                     {"functionCall": {"name": self.function,
                                       "args": {"command": self.command,
                                                "description": "Write and validate the submission"}}}]
        elif schema:
            import json

            parts = [{"text": json.dumps(from_schema(schema))}]
        else:
            parts = [{"text": FINAL_TEXT}]
        model = path.rsplit("/", 1)[-1].split(":", 1)[0]
        body = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": PROMPT_TOKENS, "candidatesTokenCount": CANDIDATE_TOKENS,
                                  "totalTokenCount": PROMPT_TOKENS + CANDIDATE_TOKENS},
                "modelVersion": model, "responseId": f"resp-{len(self.requests):04d}"}
        if not path.endswith(":streamGenerateContent"):
            return Reply(body)
        # streamed: the text first, then the function call with the finish reason and usage
        first = {"candidates": [{"content": {"role": "model", "parts": parts[:1]}, "index": 0}],
                 "modelVersion": model, "responseId": body["responseId"]}
        rest = dict(body, candidates=[dict(body["candidates"][0], content={"role": "model", "parts": parts[1:]})])
        chunks = [first, rest] if len(parts) > 1 else [body]
        return Reply(events=[(None, c) for c in chunks])
