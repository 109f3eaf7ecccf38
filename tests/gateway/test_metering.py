"""Usage read from each protocol's answers (streamed and not), summed per run and per model, priced by
genai-prices; an unknown model keeps its tokens and says why its cost is unknown."""

from __future__ import annotations

import math

import genai_prices
import pytest

from pytest_rexmle.gateway.metering import CallUsage

from .conftest import calls


def _price(model, provider, inp, out, cached):
    usage = genai_prices.Usage(input_tokens=inp, output_tokens=out, cache_read_tokens=cached or None)
    return float(genai_prices.calc_price(usage, model, provider_id=provider).total_price)


def test_openai_chat_and_responses_streams_and_bodies(served):
    chat = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]}
    served.request("POST", "/openai/v1/chat/completions", chat)
    served.request("POST", "/openai/v1/chat/completions", {**chat, "stream": True,
                                                          "stream_options": {"include_usage": True}})
    served.request("POST", "/openai/v1/responses", {"model": "gpt-4o-mini", "input": "x", "stream": True})
    usage = served.run.close()["usage"]
    assert usage["source"] == "gateway"
    assert usage["requests"] == 3
    assert usage["input_tokens"] == 11 + 11 + 30
    assert usage["output_tokens"] == 7 + 7 + 12
    assert usage["cached_tokens"] == 3 + 3 + 10
    expected = 2 * _price("gpt-4o-mini", None, 11, 7, 3) + _price("gpt-4o-mini", None, 30, 12, 10)
    assert math.isclose(usage["cost_usd"], expected, rel_tol=1e-6) and usage["cost_usd"] > 0
    assert usage["by_model"]["gpt-4o-mini"]["requests"] == 3
    assert usage["model_seconds"] > 0


def test_anthropic_stream_message_start_plus_delta(served):
    doc = {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [], "stream": True}
    status, _, body = served.request("POST", "/anthropic/v1/messages", doc)
    assert status == 200 and b"event: message_stop" in body
    usage = served.run.close()["usage"]
    # input = fresh 20 + cache read 5; output from message_delta (9), not message_start's 1
    assert (usage["input_tokens"], usage["output_tokens"], usage["cached_tokens"]) == (25, 9, 5)
    assert math.isclose(usage["cost_usd"], _price("claude-sonnet-4-5", "anthropic", 25, 9, 5), rel_tol=1e-6)


@pytest.mark.parametrize("suffix", [":generateContent", ":streamGenerateContent?alt=sse", ":streamGenerateContent"])
def test_gemini_usage_metadata(served, suffix):
    status, _, _ = served.request("POST", f"/gemini/v1beta/models/gemini-2.5-flash{suffix}",
                                  {"contents": [{"parts": [{"text": "x"}]}]})
    assert status == 200
    usage = served.run.close()["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (9, 4 + 2)  # thoughts are billed as output
    assert usage["by_model"]["gemini-2.5-flash"]["cost_usd"] == pytest.approx(
        _price("gemini-2.5-flash", "google", 9, 6, 0))


def test_unknown_model_keeps_tokens_and_says_why(served):
    served.request("POST", "/openai/v1/chat/completions", {"model": "lab-finetune-7b", "messages": []})
    usage = served.run.close()["usage"]
    assert usage["input_tokens"] == 11 and usage["cost_usd"] is None
    assert "lab-finetune-7b" in usage["cost_unknown_reason"]
    assert usage["by_model"]["lab-finetune-7b"]["cost_usd"] is None


def test_call_usage_ignores_garbage():
    usage = CallUsage("openai")
    for junk in (None, 3, "x", {"usage": "lots"}, {"usage": {"prompt_tokens": -5, "completion_tokens": True}}, [[{}]]):
        usage.observe(junk)
    assert (usage.input_tokens, usage.output_tokens) == (0, 0)


def test_trajectory_line_per_call_with_usage(served):
    served.request("POST", "/gemini/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", {"contents": []})
    served.run.close()
    (call,) = calls(served)
    assert call["protocol"] == "gemini" and call["stream"] is True and len(call["response"]) == 2
    assert call["usage"]["output_tokens"] == 6 and call["usage"]["cost_usd"] > 0
    assert "?key" not in call["route"]


def test_sse_reader_across_chunk_boundaries():
    from pytest_rexmle.gateway.sse import SSEReader

    stream = (b'event: message_start\r\ndata: {"a": 1}\r\n\r\n: comment\n\ndata: {"b":\ndata: 2}\n\n'
              b"data: not json\n\ndata: [DONE]\n\n")
    reader, out = SSEReader(), []
    for i in range(len(stream)):  # one byte at a time: nothing may depend on where chunks break
        out += reader.feed(stream[i:i + 1])
    out += reader.close()
    assert [event for event, _ in out] == [{"a": 1}, {"b": 2}, "not json", "[DONE]"]
    assert out[1][1] == len('{"b":\n2}')


def test_a_stream_answered_without_usage_leaves_tokens_and_cost_unknown_and_says_so(served):
    """A chat stream asked without stream_options.include_usage carries no token counts (ML-Master's coder
    asks so): the run's usage counts the call as unmetered and its cost as unknown, never as free."""
    chat = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]}
    served.request("POST", "/openai/v1/chat/completions", chat)  # metered: 11 in, 7 out
    status, _, body = served.request("POST", "/openai/v1/chat/completions", {**chat, "stream": True})
    assert status == 200 and b"[DONE]" in body
    usage = served.run.close()["usage"]
    assert usage["requests"] == 2 and (usage["input_tokens"], usage["output_tokens"]) == (11, 7)
    assert usage["calls_without_usage"] == 1
    assert usage["cost_usd"] is None and "without token usage" in usage["cost_unknown_reason"]
    assert math.isclose(usage["cost_usd_known_part"], _price("gpt-4o-mini", None, 11, 7, 3), abs_tol=1e-8)
    assert usage["by_model"]["gpt-4o-mini"]["calls_without_usage"] == 1
