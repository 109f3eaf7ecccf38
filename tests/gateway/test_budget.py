"""Budgets per run: past one, the protocol's own quota error (429) and the run's record says so."""

from __future__ import annotations

import time

import json

import pytest

from pytest_rexmle.gateway import Budget, BudgetError

from .conftest import calls, open_served

CHAT = {"model": "gpt-4o-mini", "messages": []}


def test_parse():
    assert Budget.parse("usd=5, tokens=2e6,requests=500") == Budget(usd=5.0, tokens=2_000_000, requests=500)
    assert Budget.parse("") is None and Budget.parse("none") is None
    for bad in ("usd", "dollars=3", "usd=-1", "usd=abc", "usd=1,usd=2", "usd=inf"):
        with pytest.raises(BudgetError):
            Budget.parse(bad)


def test_requests_budget_openai_shape(gateway, tmp_path):
    s = open_served(gateway, tmp_path, budget=Budget(requests=2))
    assert s.request("POST", "/openai/v1/chat/completions", CHAT)[0] == 200
    assert s.request("POST", "/openai/v1/chat/completions", CHAT)[0] == 200
    status, headers, body = s.request("POST", "/openai/v1/chat/completions", CHAT)
    assert status == 429 and headers["x-should-retry"] == "false"
    error = json.loads(body)["error"]
    assert error["type"] == "insufficient_quota" and "budget" in error["message"]
    record = s.run.close()
    assert record["usage"]["requests"] == 2
    assert record["budget_exhausted"].startswith("requests budget of 2 reached")
    assert [c["status"] for c in calls(s)].count(429) == 1


def wait_until_metered(s, index: int) -> None:
    """A call is metered just after its last byte went out: a client that asks again at once may still be
    admitted (the README's in-flight overshoot); these tests ask once the first call is on the meter."""
    deadline = time.monotonic() + 10
    while s.run.meter.spent()[index] <= 0 and time.monotonic() < deadline:
        time.sleep(0.01)


def test_tokens_budget_anthropic_and_gemini_shapes(gateway, tmp_path):
    s = open_served(gateway, tmp_path, budget=Budget(tokens=30))
    doc = {"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": []}
    assert s.request("POST", "/anthropic/v1/messages", doc)[0] == 200  # 25 + 9 = 34 tokens: now past 30
    wait_until_metered(s, 1)
    status, _, body = s.request("POST", "/anthropic/v1/messages", doc)
    assert status == 429
    assert json.loads(body) == {"type": "error", "error": {"type": "rate_limit_error", "message": json.loads(
        body)["error"]["message"]}}
    status, _, body = s.request("POST", "/gemini/v1beta/models/gemini-2.5-flash:generateContent", {})
    assert status == 429 and json.loads(body)["error"]["status"] == "RESOURCE_EXHAUSTED"
    record = s.run.close()
    assert "tokens budget of 30" in record["budget_exhausted"] and record["usage"]["requests"] == 1


def test_usd_budget(gateway, tmp_path):
    s = open_served(gateway, tmp_path, budget=Budget(usd=1e-9))
    assert s.request("POST", "/openai/v1/chat/completions", CHAT)[0] == 200
    wait_until_metered(s, 2)
    assert s.request("POST", "/openai/v1/chat/completions", CHAT)[0] == 429
    assert "usd budget" in s.run.close()["budget_exhausted"]


def test_session_budget_from_settings(standin, tmp_path):
    from types import SimpleNamespace

    from .conftest import make_gateway

    gw = make_gateway(standin)
    gw.settings = SimpleNamespace(budget="requests=1", egress_allow=())
    s = open_served(gw, tmp_path)
    assert s.request("POST", "/openai/v1/chat/completions", CHAT)[0] == 200
    assert s.request("POST", "/openai/v1/chat/completions", CHAT)[0] == 429
    gw.close()
