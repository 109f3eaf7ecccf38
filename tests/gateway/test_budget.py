"""Budgets per run: past one, the protocol's own quota error (429) and the run's record says so."""

from __future__ import annotations

import http.client
import json
import threading
import time

import pytest

from pytest_rexmle.gateway import Budget, BudgetError
from pytest_rexmle.gateway.prices import call_cost

from .conftest import calls, open_served

CHAT = {"model": "gpt-4o-mini", "messages": []}


def test_parse():
    assert Budget.parse("usd=5, tokens=2e6,requests=500") == Budget(usd=5.0, tokens=2_000_000, requests=500)
    assert Budget.parse("") is None and Budget.parse("none") is None
    for bad in ("usd", "dollars=3", "usd=-1", "usd=abc", "usd=1,usd=2", "usd=inf"):
        with pytest.raises(BudgetError):
            Budget.parse(bad)


def reserved(protocol: str, doc) -> int:
    """The tokens a call with body ``doc`` (sent as ``json.dumps(doc)``, as Served.request does) reserves: the
    README's rule, its output cap plus one token per 2 bytes of request."""
    return doc["max_tokens"] + -(-len(json.dumps(doc)) // 2)


def test_requested_output_per_protocol():
    from pytest_rexmle.gateway.budget import DEFAULT_OUTPUT_CEILING, Reservation, requested_output

    assert requested_output("openai", {"max_tokens": 7}) == (7, 1)
    assert requested_output("openai", {"max_completion_tokens": 9, "max_tokens": 7, "n": 3}) == (9, 3)
    assert requested_output("openai", {"max_output_tokens": 11}) == (11, 1)  # the Responses API
    assert requested_output("anthropic", {"max_tokens": 5, "n": 4}) == (5, 1)
    assert requested_output("gemini", {"generationConfig": {"maxOutputTokens": 64, "candidateCount": 2}}) == (64, 2)
    assert requested_output("openai", {"max_tokens": "lots"}) == (None, 1)
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 1000}]}
    r = Reservation.of("openai", "m", body, len(json.dumps(body)), billed=True, priced=False)
    assert r.tokens == DEFAULT_OUTPUT_CEILING + -(-len(json.dumps(body)) // 2) and "no output cap" in r.rule
    assert Reservation.of("openai", "m", body, 10**6, billed=False).tokens == 0  # model lists, token counts


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
    """A call is metered just after its last byte went out and holds its reservation until then: these
    tests ask again once the first call is on the meter."""
    deadline = time.monotonic() + 10
    while s.run.meter.spent()[index] <= 0 and time.monotonic() < deadline:
        time.sleep(0.01)


def test_tokens_budget_anthropic_and_gemini_shapes(gateway, tmp_path):
    s = open_served(gateway, tmp_path, budget=Budget(tokens=60))
    doc = {"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": []}
    worst = reserved("anthropic", doc)
    assert worst <= 60 < 25 + 9 + worst  # the first call fits; once it is charged (34 metered) the next does not
    assert s.request("POST", "/anthropic/v1/messages", doc)[0] == 200
    wait_until_metered(s, 1)
    status, _, body = s.request("POST", "/anthropic/v1/messages", doc)
    assert status == 429
    assert json.loads(body) == {"type": "error", "error": {"type": "rate_limit_error", "message": json.loads(
        body)["error"]["message"]}}
    status, _, body = s.request("POST", "/gemini/v1beta/models/gemini-2.5-flash:generateContent", {})
    assert status == 429 and json.loads(body)["error"]["status"] == "RESOURCE_EXHAUSTED"
    record = s.run.close()
    assert "tokens budget of 60" in record["budget_exhausted"] and record["usage"]["requests"] == 1
    spent = record["budget_spent"]
    assert (spent["requests"], spent["tokens"], spent["charged_at_reservation"]) == (1, 34, 0)


def test_usd_budget(gateway, tmp_path):
    doc = {**CHAT, "max_tokens": 10}
    worst = call_cost("openai", "gpt-4o-mini", reserved("openai", doc) - 10, 10, 0)[0]
    metered = call_cost("openai", "gpt-4o-mini", 11, 7, 3)[0]
    s = open_served(gateway, tmp_path, budget=Budget(usd=worst + metered / 2))
    assert s.request("POST", "/openai/v1/chat/completions", doc)[0] == 200
    wait_until_metered(s, 2)
    assert s.request("POST", "/openai/v1/chat/completions", doc)[0] == 429
    record = s.run.close()
    assert "usd budget" in record["budget_exhausted"] and record["budget_spent"]["usd"] == round(metered, 8)


def test_session_budget_from_settings(standin, tmp_path):
    from types import SimpleNamespace

    from .conftest import make_gateway

    gw = make_gateway(standin)
    gw.settings = SimpleNamespace(budget="requests=1", egress_allow=())
    s = open_served(gw, tmp_path)
    assert s.request("POST", "/openai/v1/chat/completions", CHAT)[0] == 200
    assert s.request("POST", "/openai/v1/chat/completions", CHAT)[0] == 429
    gw.close()


# --- issue 32.4: budgets by reservation (each of these let calls through before) --------------------------------

def _stream(s, doc: dict, path: str = "/openai/v1/chat/completions", on_head=None) -> tuple[int, bytes]:
    """A streamed call: (status, body); ``on_head(status)`` runs once the status line has arrived."""
    conn = http.client.HTTPConnection(s.host, s.port, timeout=20)
    conn.request("POST", path, body=json.dumps(doc).encode(),
                 headers={"Authorization": f"Bearer {s.run.token}", "Content-Type": "application/json"})
    resp = conn.getresponse()
    if on_head:
        on_head(resp.status)
    try:
        body = resp.read()
    except http.client.HTTPException:  # a stream the provider cut: the client sees it end early
        body = b""
    conn.close()
    return resp.status, body


def test_concurrent_calls_are_admitted_only_as_far_as_their_worst_case_fits(gateway, standin, tmp_path):
    """30 calls at once against tokens=3000: all were admitted, since admission looked at finished calls."""
    doc = {"model": "gated", "stream": True, "max_tokens": 100, "messages": [{"role": "user", "content": "go"}]}
    fits = 3000 // reserved("openai", doc)
    s = open_served(gateway, tmp_path, budget=Budget(tokens=3000))
    heads: list[int] = []
    threads = [threading.Thread(target=_stream, args=(s, doc), kwargs={"on_head": heads.append}) for _ in range(30)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 15
    while len(heads) < 30 and time.monotonic() < deadline:  # the admitted ones hang in their first event
        time.sleep(0.01)
    standin.release.set()
    for t in threads:
        t.join(20)
    assert 0 < fits < 30 and sorted(heads) == [200] * fits + [429] * (30 - fits)
    assert len(standin.seen) == fits
    record = s.run.close()
    assert record["budget_spent"]["tokens"] <= 3000  # the streams had no usage: charged their reservations


def test_streams_without_usage_are_charged_their_reservation(gateway, standin, tmp_path):
    """A chat stream without stream_options.include_usage used to count 0 tokens, whatever its length."""
    doc = {"model": "gpt-4o-mini", "stream": True, "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
    worst = reserved("openai", doc)
    s = open_served(gateway, tmp_path, budget=Budget(tokens=3 * worst + worst // 2))
    assert [_stream(s, doc)[0] for _ in range(3)] == [200] * 3
    wait_until_charged(s, 3)
    status, body = _stream(s, doc)
    assert status == 429 and "tokens budget" in json.loads(body)["error"]["message"]
    assert len(standin.seen) == 3
    record = s.run.close()
    assert record["budget_spent"] == {"requests": 3, "tokens": 3 * worst, "usd": 0.0, "charged_at_reservation": 3}
    answered = [c for c in calls(s) if c.get("status") == 200]
    assert [c["budget_charge"] for c in answered] == [{"tokens": worst, "usd": None, "at_reservation": True}] * 3


def test_a_stream_cut_before_its_usage_is_charged_its_reservation(gateway, standin, tmp_path):
    """A stream the provider drops before its usage chunk used to be charged nothing."""
    doc = {"model": "cut", "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 40,
           "messages": [{"role": "user", "content": "hi"}]}
    worst = reserved("openai", doc)
    s = open_served(gateway, tmp_path, budget=Budget(tokens=2 * worst + worst // 2))
    assert [_stream(s, doc)[0] for _ in range(2)] == [200, 200]
    wait_until_charged(s, 2)
    assert _stream(s, doc)[0] == 429 and len(standin.seen) == 2
    spent = s.run.close()["budget_spent"]
    assert spent["tokens"] == 2 * worst and spent["charged_at_reservation"] == 2


def test_an_unpriced_model_under_a_usd_budget_is_refused_with_the_reason(gateway, standin, tmp_path):
    """An unknown price was ignored by the usd bound: the call went through and cost "unknown"."""
    s = open_served(gateway, tmp_path, budget=Budget(usd=0.01))
    doc = {"model": "lab-finetune-7b", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    status, headers, body = s.request("POST", "/openai/v1/chat/completions", doc)
    message = json.loads(body)["error"]["message"]
    assert status == 429 and headers["x-should-retry"] == "false"
    assert "cannot be bounded in USD" in message and "'lab-finetune-7b' is not in the genai-prices table" in message
    assert standin.seen == []
    (line,) = calls(s)
    assert line["refused"] is True and line["reason"] == message


def test_the_fifty_six_calls_of_the_adversarial_pass(gateway, standin, tmp_path):
    """tokens=3000,usd=0.01 let 56 calls and ~371k prompt tokens through: streams without usage, a model
    without a price and large prompts. Now the budget is charged at most 3000 tokens and 0.01 USD."""
    s = open_served(gateway, tmp_path, budget=Budget(tokens=3000, usd=0.01))
    history = [{"role": "user", "content": "recap of every previous step " * 900}]  # ~27 kB: ~6.6k tokens
    kinds = [{"model": "gpt-4o-mini", "stream": True, "messages": history},
             {"model": "lab-finetune-7b", "messages": history},
             {"model": "gpt-4o-mini", "stream": True, "max_tokens": 16, "messages": [{"role": "user", "content": "x"}]}]
    statuses = [(_stream(s, kinds[i % 3]) if kinds[i % 3].get("stream") else
                 s.request("POST", "/openai/v1/chat/completions", kinds[i % 3]))[0] for i in range(56)]
    record = s.run.close()
    forwarded_prompt_tokens = sum(len(seen.body) for seen in standin.seen) // 4
    assert statuses.count(200) == len(standin.seen) <= 3000 // reserved("openai", kinds[2])
    assert forwarded_prompt_tokens < 3000 and record["budget_spent"]["tokens"] <= 3000
    assert record["budget_spent"]["usd"] <= 0.01
    assert all(seen.body.count(b"recap") == 0 for seen in standin.seen)  # no large prompt went upstream


def wait_until_charged(s, requests: int) -> None:
    """Until ``requests`` calls were charged to the budget (metered, before the ledger existed)."""
    def charged() -> int:
        ledger = getattr(s.run, "ledger", None)
        return ledger.requests if ledger is not None else s.run.meter.spent()[0]

    deadline = time.monotonic() + 10
    while charged() < requests and time.monotonic() < deadline:
        time.sleep(0.01)


def test_what_counts_as_metered():
    """The budget charges metered usage only for an answer read to its end that carried usage (or was an
    error); a call cut anywhere, by the provider, a time-out or the client leaving, is charged its
    reservation; one that never left is charged nothing."""
    from pytest_rexmle.gateway.metering import CallUsage

    def usage(**state) -> CallUsage:
        u = CallUsage("openai")
        for name, value in state.items():
            setattr(u, name, value)
        return u

    assert usage(complete=True, answered=True, reported=True).metered()
    assert usage(complete=True, answered=False, reported=False).metered()  # a provider's error: not billed
    assert not usage(complete=True, answered=True, reported=False).metered()  # a stream without usage
    assert not usage(complete=False, answered=True, reported=True).metered()  # cut after message_start
    assert usage(complete=False).metered(sent=False)  # never reached the provider
