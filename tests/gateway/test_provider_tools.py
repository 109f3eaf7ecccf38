"""Provider-side tools (the provider searches, fetches or runs code for the agent, outside the egress policy
and the record) are refused unless the harness allows them; allowed, each run counts them."""

from __future__ import annotations

import json

import pytest

from pytest_rexmle.gateway import Gateway, Limits

from .conftest import REAL_KEYS, TASK_HOSTS, calls, open_served

RESPONSES, CHAT = "/openai/v1/responses", "/openai/v1/chat/completions"
MESSAGES, GEMINI = "/anthropic/v1/messages", "/gemini/v1beta/models/gemini-2.5-flash:generateContent"
_R = {"model": "gpt-4o-mini", "input": "find the TopCoW labels"}
_M = {"model": "claude-sonnet-4-5", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
_G = {"contents": [{"parts": [{"text": "hi"}]}]}

CASES = [
    (RESPONSES, {**_R, "tools": [{"type": "web_search"}]}, "web_search"),
    (RESPONSES, {**_R, "tools": [{"type": "web_search_preview"}]}, "web_search_preview"),
    (RESPONSES, {**_R, "tools": [{"type": "mcp", "server_label": "z", "server_url": "https://zenodo.example/mcp",
                                  "require_approval": "never"}]}, "mcp"),
    (RESPONSES, {**_R, "tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}, "code_interpreter"),
    (RESPONSES, {**_R, "tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]}, "file_search"),
    (CHAT, {"model": "gpt-4o-mini", "messages": [], "web_search_options": {}}, "web_search_options"),
    (CHAT, {"model": "gpt-4o-search-preview", "messages": []}, "web search model gpt-4o-search-preview"),
    (MESSAGES, {**_M, "tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}]}, "web_fetch_20250910"),
    (MESSAGES, {**_M, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "web_search_20250305"),
    (MESSAGES, {**_M, "tools": [{"type": "code_execution_20250825", "name": "code_execution"}]},
     "code_execution_20250825"),
    (MESSAGES, {**_M, "mcp_servers": [{"type": "url", "url": "https://example.com/sse", "name": "x"}]}, "mcp_servers"),
    (GEMINI, {**_G, "tools": [{"googleSearch": {}}]}, "googleSearch"),
    (GEMINI, {**_G, "tools": [{"google_search_retrieval": {}}]}, "google_search_retrieval"),
    (GEMINI, {**_G, "tools": [{"urlContext": {}}]}, "urlContext"),
    (GEMINI, {**_G, "tools": [{"url_context": {}}]}, "url_context"),
    (GEMINI, {**_G, "tools": [{"codeExecution": {}}]}, "codeExecution"),
]
IDS = [f"{path.split('/')[1]}-{tool.replace(' ', '-')}" for path, _, tool in CASES]


def _gateway(standin, allow: bool) -> Gateway:
    environ = {"OPENAI_BASE_URL": standin.url + "/v1", "ANTHROPIC_BASE_URL": standin.url,
               "GEMINI_BASE_URL": standin.url, **REAL_KEYS}
    return Gateway(None, environ=environ, limits=Limits(client_timeout=5.0, upstream_timeout=2.0),
                   task_hosts=TASK_HOSTS, **({"allow_provider_tools": True} if allow else {}))


@pytest.mark.parametrize("path,doc,tool", CASES, ids=IDS)
def test_provider_tool_refused_by_default(standin, tmp_path, path, doc, tool):
    gw = _gateway(standin, allow=False)
    s = open_served(gw, tmp_path)
    status, _, body = s.request("POST", path, doc)
    assert status == 400, body
    error = json.loads(body)["error"]
    assert tool in error["message"] and "--rexmle-allow-provider-tools" in error["message"]
    if path == MESSAGES:
        assert json.loads(body)["type"] == "error" and error["type"] == "invalid_request_error"
    elif path == GEMINI:
        assert error["status"] == "INVALID_ARGUMENT"
    assert standin.seen == []  # the provider was never asked
    record = s.run.close()
    gw.close()
    assert record["provider_tools"] == {"allowed": False, "used": {}, "refused": {tool: 1}}
    (call,) = calls(s)
    assert call["status"] == 400 and tool in call["error"] and call["usage"] is None


@pytest.mark.parametrize("path,doc,tool", CASES, ids=IDS)
def test_provider_tool_allowed_with_the_option_and_counted(standin, tmp_path, path, doc, tool):
    gw = _gateway(standin, allow=True)
    s = open_served(gw, tmp_path)
    for _ in range(2):
        s.request("POST", path, doc)
    assert len(standin.seen) == 2 and json.loads(standin.last().body) == doc
    record = s.run.close()
    gw.close()
    assert record["provider_tools"] == {"allowed": True, "used": {tool: 2}, "refused": {}}


def test_client_side_tools_pass_without_the_option(served, standin):
    tools = [{"type": "function", "name": "run", "parameters": {"type": "object"}},
             {"type": "computer_use_preview", "display_width": 10, "display_height": 10, "environment": "linux"}]
    assert served.request("POST", RESPONSES, {**_R, "tools": tools})[0] == 200
    anthropic = [{"name": "sh", "input_schema": {"type": "object"}}, {"type": "bash_20250124", "name": "bash"},
                 {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}]
    assert served.request("POST", MESSAGES, {**_M, "tools": anthropic})[0] == 200
    assert served.request("POST", GEMINI, {**_G, "tools": [{"functionDeclarations": [{"name": "f"}]}]})[0] == 200
    assert len(standin.seen) == 3
    assert served.run.close()["provider_tools"] == {"allowed": False, "used": {}, "refused": {}}


@pytest.mark.parametrize("raw", [
    b'{"model": "gpt-4o-mini", "input": "x", "tools": [], "tools": [{"type": "web_search"}]}',  # read last or first?
    b'{"model": "gpt-4o-mini", "input": "x", "tools": [{"type": "function", "type": "web_search"}]}',
    b'{"model": "gpt-4o-mini", "input": "x", "\\u0074ools": [{"type": "web_search"}]}',  # an escaped key
    b'{"model": "gpt-4o-mini", "input": "\xff", "tools": [{"type": "web_search"}]}',  # invalid UTF-8
    b'{"model": "gpt-4o-mini", "input": "x", "tools": [{"type": "web_search"}], "x": ' + b"[" * 5000
    + b"]" * 5000 + b"}",  # nested past the gateway's parser
])
def test_tools_hidden_from_a_lax_reading_refused(served, standin, raw):
    status, _, body = served.request("POST", RESPONSES, raw)
    assert status == 400, body
    message = json.loads(body)["error"]["message"]
    assert "web_search" in message or "twice" in message or "gateway can read" in message or "deeply" in message
    assert standin.seen == []


def test_find_names_each_tool_once():
    from pytest_rexmle.gateway.provider_tools import find

    doc = {"tools": [{"type": "web_search"}, {"type": "web_search"}, {"type": "function"}], "model": "gpt-4o"}
    assert find("openai", doc) == ["web_search"]
    assert find("gemini", {"tools": [{"googleSearch": {}, "codeExecution": {}}]}) == ["googleSearch", "codeExecution"]
    assert find("anthropic", {"tools": "not a list"}) == []


def test_option_in_the_settings_table_run_json_and_the_report():
    from pytest_rexmle.gateway.record import run_json_fields
    from pytest_rexmle.report.html import render_html
    from pytest_rexmle.report.model import build_report
    from pytest_rexmle.report.render import markdown, terminal_lines
    from pytest_rexmle.settings import OPTIONS, Settings

    from ..report.helpers import graded

    assert any(flag == "--rexmle-allow-provider-tools" and kind == "bool" and default is False
               for flag, _, _, kind, default in OPTIONS)
    assert Settings.__dataclass_fields__["allow_provider_tools"].default is False
    use = {"allowed": True, "used": {"web_search": 3}, "refused": {}}
    assert run_json_fields({"usage": {}, "provider_tools": use})["provider_tools"] == use
    allowed, plain = ({"data": "prepared", **extra} for extra in ({"allow_provider_tools": True}, {}))
    docs = [build_report([graded("isles22", 0.3, "a")], agent="a", agent_options={}, settings=settings, run_id="r")
            for settings in (allowed, plain)]
    assert any(line.startswith("provider tools: ALLOWED (--rexmle-allow-provider-tools)")
               for line in terminal_lines(docs[0]))
    assert "**Provider tools allowed**" in markdown(docs[0]) and "Provider tools allowed</b> for a" in render_html(
        [docs[0]])
    assert not any("provider tools" in line for line in terminal_lines(docs[1]))
    assert "Provider tools" not in markdown(docs[1]) + render_html([docs[1]])
