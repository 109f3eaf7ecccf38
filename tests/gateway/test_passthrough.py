"""The three protocols pass through unchanged: same body upstream, real key swapped in, token never
forwarded, answers (streams included) back to the agent as the provider sent them."""

from __future__ import annotations

import json
import socket
import time

import pytest

from .conftest import REAL_KEYS, calls

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "héllo"}], "temperature": 0.25}


def test_openai_chat_body_byte_identical_and_key_swapped(served, standin):
    raw = json.dumps(CHAT, indent=3, ensure_ascii=False).encode()  # odd spacing and UTF-8: must arrive as is
    status, headers, body = served.request("POST", "/openai/v1/chat/completions", raw,
                                           {"Content-Type": "application/json", "X-Custom": "dropped",
                                            "X-Stainless-Lang": "python"})
    assert status == 200, body
    seen = standin.last()
    assert seen.path == "/v1/chat/completions"
    assert seen.body == raw
    assert seen.headers["authorization"] == f"Bearer {REAL_KEYS['OPENAI_API_KEY']}"
    assert seen.headers["x-stainless-lang"] == "python"  # the SDK's telemetry is on the allow-list
    assert "x-custom" not in seen.headers  # anything not on it stays with the gateway
    assert served.run.token not in json.dumps(seen.headers)
    assert json.loads(body)["choices"][0]["message"]["content"] == "hi"
    assert REAL_KEYS["OPENAI_API_KEY"] not in body.decode() + json.dumps(headers)


@pytest.mark.parametrize("place", ["x-api-key", "bearer"])
def test_anthropic_token_in_its_places(served, standin, place):
    doc = {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"x-api-key": served.run.token, "anthropic-version": "2023-06-01"} if place == "x-api-key" else {}
    status, _, body = served.request("POST", "/anthropic/v1/messages", doc, headers,
                                     token=None if place == "x-api-key" else "run")
    assert status == 200, body
    seen = standin.last()
    assert seen.path == "/v1/messages"
    assert seen.headers["x-api-key"] == REAL_KEYS["ANTHROPIC_API_KEY"]
    assert "authorization" not in seen.headers
    if place == "x-api-key":
        assert seen.headers["anthropic-version"] == "2023-06-01"


@pytest.mark.parametrize("place", ["query", "x-goog-api-key"])
def test_gemini_token_in_query_or_header(served, standin, place):
    doc = {"contents": [{"parts": [{"text": "hi"}]}]}
    path = "/gemini/v1beta/models/gemini-2.5-flash:generateContent"
    if place == "query":
        status, _, body = served.request("POST", f"{path}?key={served.run.token}&other=1", doc, token=None)
    else:
        status, _, body = served.request("POST", path, doc, {"x-goog-api-key": served.run.token}, token=None)
    assert status == 200, body
    seen = standin.last()
    assert seen.path.startswith("/v1beta/models/gemini-2.5-flash:generateContent")
    assert "key=" not in seen.path and served.run.token not in seen.path
    assert seen.headers["x-goog-api-key"] == REAL_KEYS["GEMINI_API_KEY"]
    if place == "query":
        assert "other=1" in seen.path


def test_openai_stream_is_forwarded_chunk_by_chunk(served, standin):
    """The stand-in sends one event and waits; the agent must already read it through the gateway."""
    sock = socket.create_connection((served.host, served.port), timeout=10)
    body = json.dumps({**CHAT, "model": "gated", "stream": True}).encode()
    sock.sendall(b"POST /openai/v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                 % (served.run.token.encode(), len(body), body))
    got = b""
    deadline = time.monotonic() + 5
    while b"Hel" not in got and time.monotonic() < deadline:
        got += sock.recv(65536)
    assert b"Hel" in got and b"[DONE]" not in got  # the first event, while the stand-in still holds the rest
    standin.release.set()
    while b"0\r\n\r\n" not in got and time.monotonic() < deadline:
        got += sock.recv(65536)
    sock.close()
    assert b"data: [DONE]" in got


def test_embeddings_models_count_tokens_routes(served, standin):
    assert served.request("POST", "/openai/v1/embeddings", {"model": "text-embedding-3-small", "input": "x"})[0] == 200
    assert served.request("GET", "/openai/v1/models")[0] == 200
    status, _, body = served.request("POST", "/anthropic/v1/messages/count_tokens",
                                     {"model": "claude-sonnet-4-5", "messages": []})
    assert status == 200 and json.loads(body) == {"input_tokens": 42}
    usage = served.run.close()["usage"]
    # three requests, but only the embedding is a billed call with tokens
    assert usage["requests"] == 3 and usage["input_tokens"] == 5 and usage["output_tokens"] == 0


def test_trajectory_records_calls_redacted(served, standin):
    served.request("POST", "/openai/v1/chat/completions", {**CHAT, "stream": True,
                                                          "stream_options": {"include_usage": True}})
    served.request("POST", "/openai/v1/chat/completions", {**CHAT, "model": "echo-key"})
    served.run.close()
    text = served.run.trajectory.path.read_text()
    assert served.run.token not in text and REAL_KEYS["OPENAI_API_KEY"] not in text
    first, second = calls(served)
    assert first["protocol"] == "openai" and first["stream"] is True and first["status"] == 200
    assert first["request"]["messages"][0]["content"] == "héllo"
    assert first["response"][-1] == "[DONE]" and first["response"][0]["choices"][0]["delta"]["content"] == "Hel"
    assert first["usage"]["input_tokens"] == 11 and first["usage"]["output_tokens"] == 7
    assert first["duration_s"] > 0 and first["model"] == "gpt-4o-mini"
    assert second["status"] == 401 and "[REDACTED]" in json.dumps(second["response"])


def test_upstream_connections_kept_alive_and_stale_ones_retried(served, standin):
    gateway = served.run.gateway
    pool = gateway.pool(gateway.upstreams["openai"])
    for _ in range(3):
        assert served.request("POST", "/openai/v1/chat/completions", CHAT)[0] == 200
        deadline = time.monotonic() + 5  # the gateway's thread hands the connection back just after answering
        while pool.idle == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert len({s.client_port for s in standin.seen}) == 1  # one upstream connection for three calls
    live = [sock for sock in standin.sockets if sock.fileno() != -1]  # a handler may have closed its own already
    assert live
    for sock in live:  # the provider drops its idle connections
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:  # closed by its handler between the check and here
            pass
    status, _, body = served.request("POST", "/openai/v1/chat/completions", CHAT)
    assert status == 200, body
    assert standin.seen[-1].client_port != standin.seen[0].client_port
    assert served.run.close()["usage"]["requests"] == 4


def test_trajectory_refuses_calls_past_its_disk_budget(served, standin):
    served.run.trajectory.max_bytes = 1  # as if the run had already written its record's budget
    assert served.request("POST", "/openai/v1/chat/completions", CHAT)[0] == 507
    assert served.request("POST", "/openai/v1/chat/completions", CHAT)[0] == 507
    record = served.run.close()
    assert standin.seen == [] and record["usage"]["requests"] == 0
    (line,) = calls(served)  # past the budget, refusals are counted: one line at close
    assert line["refused"] is True and line["repeated"] == 2 and "disk budget" in line["reason"]


def test_trajectory_never_follows_a_link_planted_in_the_logs(gateway, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    logs = tmp_path / "planted" / "logs"
    logs.mkdir(parents=True)
    (logs / "model-calls.jsonl").symlink_to(victim)
    with pytest.raises(OSError):
        gateway.open_run("planted", logs_dir=logs, submission_dir=tmp_path, task_id="ldct-iqa")
    assert victim.read_text() == "untouched\n"


def test_big_request_kept_as_head_and_tail(standin, tmp_path):
    from .conftest import make_gateway, open_served

    gw = make_gateway(standin, max_body=8 * 1024 * 1024)
    s = open_served(gw, tmp_path)
    history = [{"role": "user", "content": f"step {i} " + "x" * 1000} for i in range(3000)]  # about 3 MB
    status, _, _ = s.request("POST", "/openai/v1/chat/completions", {"model": "gpt-4o-mini", "messages": history})
    assert status == 200 and len(standin.last().body) > 3_000_000  # forwarded whole
    s.run.close()
    (call,) = calls(s)
    assert call["truncated"] is True and call["request"]["bytes"] == len(standin.last().body)
    assert call["request"]["preview_head"].startswith('{"model"') and "step 2999" in call["request"]["preview_tail"]
    assert call["usage"]["input_tokens"] == 11
    gw.close()
