"""What reaches the provider with the host's key is an allow-list: (method, path) per protocol and the
request headers; the organisation and project a call bills come from the host, never from the agent."""

from __future__ import annotations

import json

import pytest

from pytest_rexmle.gateway import Gateway, Limits

from .conftest import REAL_KEYS, TASK_HOSTS, calls, open_served

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("method,path,protocol", [
    ("DELETE", "/openai/v1/models/ft:gpt-4o-mini:acme:labels:abc123", "openai"),  # deletes a fine-tuned model
    ("GET", "/openai/v1/chat/completions", "openai"),       # lists the organisation's stored completions
    ("GET", "/openai/v1/chat/completions/chatcmpl-1", "openai"),
    ("POST", "/openai/v1/models", "openai"),
    ("DELETE", "/openai/v1/responses/resp_1", "openai"),
    ("GET", "/openai/v1/responses", "openai"),
    ("GET", "/anthropic/v1/messages", "anthropic"),
    ("DELETE", "/anthropic/v1/models/claude-sonnet-4-5", "anthropic"),
    ("GET", "/gemini/v1beta/models/gemini-2.5-flash:generateContent", "gemini"),
    ("DELETE", "/gemini/v1beta/models/gemini-2.5-flash", "gemini"),
])
def test_unlisted_method_and_path_refused_and_never_sent(served, standin, method, path, protocol):
    status, headers, body = served.request(method, path, CHAT if method == "POST" else None)
    assert status == 404, body
    error = json.loads(body)["error"]
    assert f"unknown route '{method} {path}'" in error["message"]
    assert headers.get("x-should-retry") == "false"
    assert standin.seen == []  # the real key never left the host
    served.run.close()
    (call,) = calls(served)
    assert call["status"] == 404 and call["route"] == f"{method} {path}" and call["protocol"] == protocol
    assert served.run.errors == {"unknown_route": 1}


@pytest.mark.parametrize("method,path", [
    ("POST", "/openai/v1/chat/completions"), ("POST", "/openai/v1/responses"), ("POST", "/openai/v1/embeddings"),
    ("GET", "/openai/v1/models"), ("GET", "/openai/v1/models/gpt-4o-mini"), ("GET", "/openai/v1/responses/resp_1"),
    ("POST", "/anthropic/v1/messages"), ("POST", "/anthropic/v1/messages/count_tokens"),
    ("GET", "/anthropic/v1/models"), ("POST", "/gemini/v1beta/models/gemini-2.5-flash:generateContent"),
    ("POST", "/gemini/v1beta/models/gemini-2.5-flash:countTokens"), ("GET", "/gemini/v1beta/models"),
])
def test_listed_routes_reach_the_provider(served, standin, method, path):
    body = {"model": "gpt-4o-mini", "input": "x", "messages": [], "max_tokens": 5} if method == "POST" else None
    served.request(method, path, body)
    assert [(s.method, s.path.split("?")[0]) for s in standin.seen] == [
        (method, path.removeprefix("/openai").removeprefix("/anthropic").removeprefix("/gemini"))]


def _gateway(standin, **env) -> Gateway:
    environ = {"OPENAI_BASE_URL": standin.url + "/v1", "ANTHROPIC_BASE_URL": standin.url,
               "GEMINI_BASE_URL": standin.url, **REAL_KEYS, **env}
    return Gateway(None, environ=environ, limits=Limits(client_timeout=5.0, upstream_timeout=2.0),
                   task_hosts=TASK_HOSTS)


def test_agent_organisation_and_project_replaced_by_the_hosts(standin, tmp_path):
    gw = _gateway(standin, OPENAI_ORG_ID="org-host", OPENAI_PROJECT_ID="proj_host")
    s = open_served(gw, tmp_path)
    status, _, body = s.request("POST", "/openai/v1/chat/completions", CHAT,
                                {"OpenAI-Organization": "org-victim", "OpenAI-Project": "proj_victim"})
    assert status == 200, body
    seen = standin.last().headers
    assert seen["openai-organization"] == "org-host" and seen["openai-project"] == "proj_host"
    assert "org-victim" not in json.dumps(seen) and "proj_victim" not in json.dumps(seen)
    s.run.close()
    gw.close()


def test_agent_organisation_dropped_when_the_host_sets_none(served, standin):
    status, _, body = served.request("POST", "/openai/v1/chat/completions", CHAT,
                                     {"OpenAI-Organization": "org-victim", "OpenAI-Project": "proj_victim"})
    assert status == 200, body
    assert "openai-organization" not in standin.last().headers and "openai-project" not in standin.last().headers


def test_only_listed_headers_go_upstream(served, standin):
    doc = {"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": []}
    sent = {"anthropic-version": "2023-06-01", "anthropic-beta": "prompt-caching-2024-07-31",
            "X-Stainless-Retry-Count": "0", "User-Agent": "Anthropic/Python 0.40.0", "Accept": "application/json",
            "X-Forwarded-For": "10.0.0.1", "Anthropic-Admin-Key": "x", "Cookie": "session=1",
            "X-Goog-User-Project": "victim", "Forwarded": "for=1.2.3.4", "X-Request-Target": "/v1/admin"}
    status, _, body = served.request("POST", "/anthropic/v1/messages", doc, sent)
    assert status == 200, body
    seen = standin.last().headers
    assert seen["anthropic-version"] == "2023-06-01" and seen["anthropic-beta"] == "prompt-caching-2024-07-31"
    assert seen["x-stainless-retry-count"] == "0" and seen["user-agent"] == "Anthropic/Python 0.40.0"
    assert seen["x-api-key"] == REAL_KEYS["ANTHROPIC_API_KEY"]
    for name in ("x-forwarded-for", "anthropic-admin-key", "cookie", "x-goog-user-project", "forwarded",
                 "x-request-target", "authorization"):
        assert name not in seen, name
