"""The official SDKs, pointed at the gateway by base URL and token only, work unchanged (streams too),
and a spent budget reaches them as their own quota exception without retries."""

from __future__ import annotations

import pytest

from pytest_rexmle.gateway import Budget

from .conftest import REAL_KEYS, calls, open_served

openai = pytest.importorskip("openai", reason="the openai package (dev extra) is not installed")
anthropic = pytest.importorskip("anthropic", reason="the anthropic package (dev extra) is not installed")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the SDK dates its model names


def test_openai_sdk_plain_and_streaming(served, standin):
    client = openai.OpenAI(base_url=served.run.environment(served.base)["OPENAI_BASE_URL"],
                           api_key=served.run.token, max_retries=0)
    reply = client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "hi" and reply.usage.prompt_tokens == 11
    stream = client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}],
                                            stream=True, stream_options={"include_usage": True})
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "Hello!"
    assert client.embeddings.create(model="text-embedding-3-small", input="x").usage.prompt_tokens == 5
    assert all(s.headers["authorization"] == f"Bearer {REAL_KEYS['OPENAI_API_KEY']}" for s in standin.seen)
    usage = served.run.close()["usage"]
    assert usage["requests"] == 3 and usage["input_tokens"] == 11 + 11 + 5 and usage["output_tokens"] == 14


def test_anthropic_sdk_streaming(served):
    client = anthropic.Anthropic(base_url=served.run.environment(served.base)["ANTHROPIC_BASE_URL"],
                                 api_key=served.run.token, max_retries=0)
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=10,
                                messages=[{"role": "user", "content": "hi"}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "hi" and final.usage.output_tokens == 9
    usage = served.run.close()["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (25, 9)
    assert calls(served)[0]["stream"] is True


def test_budget_reaches_sdks_as_their_exceptions(gateway, tmp_path):
    s = open_served(gateway, tmp_path, budget=Budget(requests=0))
    env = s.run.environment(s.base)
    oa = openai.OpenAI(base_url=env["OPENAI_BASE_URL"], api_key=s.run.token)  # default retries: none taken
    with pytest.raises(openai.RateLimitError) as err:
        oa.chat.completions.create(model="gpt-4o-mini", messages=[])
    assert err.value.code == "insufficient_quota" and "budget" in str(err.value)
    an = anthropic.Anthropic(base_url=env["ANTHROPIC_BASE_URL"], api_key=s.run.token)
    with pytest.raises(anthropic.RateLimitError):
        an.messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=[])
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=env["OPENAI_BASE_URL"], api_key="sk-guess", max_retries=0).models.list()
    record = s.run.close()
    assert record["budget_exhausted"] and record["usage"]["requests"] == 0
    assert [c["status"] for c in calls(s)] == [429, 429, 401]
