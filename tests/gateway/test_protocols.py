"""One module per wire protocol: each record line names the one its call used, and a reader of older lines
(without ``api``) reaches the same module from the route, else from the bodies' shape."""

from __future__ import annotations

import json

import pytest

from pytest_rexmle import protocols
from pytest_rexmle.protocols.base import Reading
from pytest_rexmle.report.calls import read_calls

from .conftest import lines

CASES = [("/openai/v1/chat/completions", {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]},
          "openai", "openai_chat"),
         ("/openai/v1/responses", {"model": "gpt-4o-mini", "input": "hi"}, "openai", "openai_responses"),
         ("/anthropic/v1/messages", {"model": "claude-sonnet-4-5", "max_tokens": 64,
                                     "messages": [{"role": "user", "content": "hi"}]}, "anthropic", "anthropic"),
         ("/gemini/v1beta/models/gemini-2.5-flash:generateContent", {"contents": [{"parts": [{"text": "hi"}]}]},
          "gemini", "gemini")]


def test_every_record_line_names_its_protocol(served):
    for path, body, _, _ in CASES:
        served.request("POST", path, body)
    served.request("POST", "/openai/v1/files", {})  # unknown route: its provider only, no protocol
    served.run.close()
    written = lines(served)
    calls = sorted((line for line in written if line.get("phase")), key=lambda c: (c["call"], c["phase"]))
    assert [(c["phase"], c["protocol"], c["api"]) for c in calls] == [
        (phase, provider, api) for _, _, provider, api in CASES for phase in ("request", "response")]
    refused = [line for line in written if line.get("refused")]
    assert [(r["protocol"], r["api"], r["status"]) for r in refused] == [("openai", None, 404)]


@pytest.mark.parametrize(("path", "body", "provider", "api"), CASES)
def test_routes_belong_to_one_module(path, body, provider, api):
    route = protocols.classify(path, {}, "POST")
    assert (route.protocol, route.api, route.billed) == (provider, api, True)


def test_old_lines_are_read_by_route_then_by_shape(tmp_path):
    """A line written before ``api``: the route says which protocol; a foreign line without a route that
    classifies is read by the shape of its bodies; each is summarised the same as with ``api``."""
    answer = {"type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
              "content": [{"type": "text", "text": "done"}, {"type": "tool_use", "id": "t1", "name": "bash",
                                                              "input": {"cmd": "ls"}}]}
    base = {"protocol": "anthropic", "status": 200, "model": "claude-sonnet-4-5",
            "request": {"system": "be brief", "messages": [{"role": "user", "content": "list files"}]},
            "response": answer}
    records = [{**base, "ts": "2026-01-01T00:00:01", "api": "anthropic", "route": "POST /anthropic/v1/messages"},
               {**base, "ts": "2026-01-01T00:00:02", "route": "POST /anthropic/v1/messages"},
               {**base, "ts": "2026-01-01T00:00:03", "route": "<not a route>"}]
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "model-calls.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summaries = read_calls(tmp_path)
    assert [s.api for s in summaries] == ["anthropic"] * 3
    for s in summaries:
        assert (s.system, s.prompt, s.answer) == ("be brief", "list files", "done")
        assert [(t.id, t.name, t.arguments) for t in s.tool_calls] == [("t1", "bash", {"cmd": "ls"})]


def test_a_new_protocol_is_one_module():
    """Everything the gateway and the readers ask a protocol, each module answers itself."""
    for protocol in protocols.PROTOCOLS.values():
        assert protocol.provider in protocols.PROVIDERS and protocol.prefix.startswith("/")
        assert json.loads(protocol.error_body(429, "spent"))  # the provider's own error shape
        assert protocol.auth_headers("k") and protocol.upstream_env[2].startswith("https://")


@pytest.mark.parametrize("api, doc, expected", [
    ("anthropic", {"system": "be brief", "messages": [
        {"role": "user", "content": "old question"},
        {"role": "assistant", "content": [{"type": "text", "text": "old answer"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text",
                                                                                                 "text": "42"}]},
                                     {"type": "text", "text": "thought-free", "thought": False},
                                     {"type": "text", "text": "mine", "thought": True}, "a bare string",
                                     {"type": "text", "text": "go on"}]},
        {"role": "user", "content": "plain"}]},
     ("be brief", "thought-free\ngo on\nplain", [("t1", "42", "")])),
    ("gemini", {"systemInstruction": {"parts": [{"text": "be brief"}]}, "contents": [
        {"role": "user", "parts": [{"text": "old question"}]},
        {"role": "model", "parts": [{"text": "old answer"}]},
        {"role": "user", "parts": [{"functionResponse": {"id": "f1", "name": "ls", "response": {"files": 2}}},
                                   {"text": "mine", "thought": True}, {"text": "go on"}]},
        {"role": "user", "parts": "plain"}]},
     ("be brief", "go on\nplain", [("f1", '{"files": 2}', "ls")])),
])
def test_a_request_of_parts_reads_its_new_prompt_and_tool_results(api, doc, expected):
    """Anthropic and Gemini share one reader of a conversation of parts: only the part after the model's last
    turn, text parts without the model's own thoughts, bare contents as text, tool results by the protocol's
    own shape (and never as prompt text)."""
    reading = Reading()
    protocols.get(api).read_request(doc, reading)
    assert (reading.system, reading.prompt, reading.tool_results) == expected
