"""Bad input (issue 17, item 8): each a clear error for the agent and a record for the run; the gateway
never crashes and never blocks another run; tokens open only their own run."""

from __future__ import annotations

import json
import socket
import threading
import time

from .conftest import REAL_KEYS, calls, make_gateway, open_served

CHAT = {"model": "gpt-4o-mini", "messages": []}


def _raw(served, data: bytes, timeout: float = 10.0) -> bytes:
    sock = socket.create_connection((served.host, served.port), timeout=timeout)
    sock.sendall(data)
    got = b""
    try:
        while True:
            part = sock.recv(65536)
            if not part:
                break
            got += part
    except TimeoutError:
        pass
    sock.close()
    return got


def test_missing_and_wrong_token_in_each_shape(served, standin):
    status, headers, body = served.request("POST", "/openai/v1/chat/completions", CHAT, token=None)
    assert status == 401 and json.loads(body)["error"]["type"] == "invalid_api_key"
    status, _, body = served.request("POST", "/anthropic/v1/messages", CHAT, {"x-api-key": "sk-wrong"}, token=None)
    assert status == 401 and json.loads(body)["error"]["type"] == "authentication_error"
    status, _, body = served.request("POST", "/gemini/v1beta/models/gemini-2.5-flash:generateContent?key=nope", {},
                                     token=None)
    assert status == 401 and json.loads(body)["error"]["status"] == "UNAUTHENTICATED"
    assert standin.seen == []  # nothing reached the provider
    assert served.run.close()["errors"]["unauthorized"] == 3


def test_unknown_route_and_malformed_request(served, standin):
    status, _, body = served.request("POST", "/openai/v1/fine_tuning/jobs", {})
    assert status == 404 and "unknown route" in json.loads(body)["error"]["message"]
    assert b"400" in _raw(served, b"GARBAGE\r\n\r\n").split(b"\r\n")[0]
    answer = _raw(served, b"POST /openai/v1/chat/completions HTTP/1.1\r\nContent-Length: 5\r\n"
                          b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400") and b"both Transfer-Encoding and Content-Length" in answer
    assert standin.seen == []
    assert served.request("POST", "/openai/v1/chat/completions", CHAT)[0] == 200  # still serving


def test_huge_body_is_413_without_reading_it(served, standin):
    big = b"x" * (2 * 1024 * 1024)  # the test gateway's cap is 1 MiB
    answer = _raw(served, b"POST /openai/v1/chat/completions HTTP/1.1\r\nAuthorization: Bearer %s\r\n"
                          b"Content-Length: %d\r\n\r\n" % (served.run.token.encode(), len(big)))
    assert answer.startswith(b"HTTP/1.1 413") and b"exceeds the gateway's limit" in answer
    assert standin.seen == []
    served.run.close()
    (line,) = calls(served)
    assert line["status"] == 413 and line["route"] == "POST /openai/v1/chat/completions" and "limit" in line["error"]


def test_chunked_request_body_is_forwarded_whole(served, standin):
    body = json.dumps(CHAT).encode()
    half = len(body) // 2
    answer = _raw(served, b"POST /openai/v1/chat/completions HTTP/1.1\r\nAuthorization: Bearer %s\r\n"
                          b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n"
                  % (served.run.token.encode(), half, body[:half], len(body) - half, body[half:]))
    assert answer.startswith(b"HTTP/1.1 200")
    assert standin.last().body == body


def test_slow_client_is_dropped_and_does_not_block_others(standin, tmp_path):
    gw = make_gateway(standin, client_timeout=0.5)
    s = open_served(gw, tmp_path)
    slow = socket.create_connection((s.host, s.port), timeout=5)
    slow.sendall(b"POST /openai/v1/chat/completions HTTP/1.1\r\nContent-Length: 100\r\n")  # and then nothing
    started = time.monotonic()
    assert s.request("POST", "/openai/v1/chat/completions", CHAT)[0] == 200  # served meanwhile
    assert slow.recv(100) == b""  # dropped after the client time-out
    assert time.monotonic() - started < 4
    slow.close()
    gw.close()


def test_upstream_errors_502_504_and_key_never_echoed(standin, tmp_path):
    gw = make_gateway(standin, upstream_timeout=0.5)
    s = open_served(gw, tmp_path)
    status, _, body = s.request("POST", "/openai/v1/chat/completions", {**CHAT, "model": "hang"})
    assert status == 504 and "did not answer within 0.5 s" in json.loads(body)["error"]["message"]
    status, _, body = s.request("POST", "/anthropic/v1/messages", {**CHAT, "model": "echo-key"})
    assert status == 401 and REAL_KEYS["ANTHROPIC_API_KEY"] not in body.decode() and b"[REDACTED]" in body
    gw.upstreams["openai"] = gw.upstreams["openai"].__class__.from_url("openai", "http://127.0.0.1:9/v1", "sk-x")
    status, _, body = s.request("POST", "/openai/v1/chat/completions", CHAT)
    assert status == 502 and "cannot be reached" in json.loads(body)["error"]["message"]
    s.run.close()
    statuses = [c["status"] for c in calls(s)]
    assert statuses == [504, 401, 502] and all("error" in c for c in calls(s) if c["status"] != 401)
    gw.close()


def test_two_runs_tokens_budgets_and_calls_apart(gateway, tmp_path, standin):
    from pytest_rexmle.gateway import Budget

    a = open_served(gateway, tmp_path, "a", budget=Budget(requests=1))
    b = open_served(gateway, tmp_path, "b", budget=Budget(requests=5))
    assert a.run.token != b.run.token
    # b's token on a's listener: refused like any wrong key, and nothing spent
    assert a.request("POST", "/openai/v1/chat/completions", CHAT, token=b.run.token)[0] == 401
    results = {}

    def call(name, served, n):
        results[name] = [served.request("POST", "/openai/v1/chat/completions", CHAT)[0] for _ in range(n)]

    threads = [threading.Thread(target=call, args=("a", a, 3)), threading.Thread(target=call, args=("b", b, 3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert results["a"] == [200, 429, 429] and results["b"] == [200, 200, 200]
    ra, rb = a.run.close(), b.run.close()
    assert ra["usage"]["requests"] == 1 and rb["usage"]["requests"] == 3 and rb["budget_exhausted"] is None
    assert len(calls(b)) == 3 and all(c["status"] == 200 for c in calls(b))
    assert b.run.token not in a.run.trajectory.path.read_text()
    # a closed run's listener no longer answers
    try:
        status = a.request("POST", "/openai/v1/chat/completions", CHAT, timeout=2)[0]
    except OSError:
        status = None
    assert status is None


def test_environment_names_the_gateway_and_only_the_token(served):
    env = served.run.environment("http://10.0.2.2:8484")
    assert env["OPENAI_BASE_URL"] == "http://10.0.2.2:8484/openai/v1"
    assert env["ANTHROPIC_BASE_URL"] == "http://10.0.2.2:8484/anthropic"
    assert env["GOOGLE_GEMINI_BASE_URL"] == "http://10.0.2.2:8484/gemini"
    assert env["REXMLE_VALIDATE_URL"] == "http://10.0.2.2:8484/rexmle/validate"
    assert {env[k] for k in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")} == {
        served.run.token}
    assert env["HTTPS_PROXY"] == f"http://rexmle:{served.run.token}@10.0.2.2:8484"
    assert "10.0.2.2" in env["NO_PROXY"].split(",")
    assert not any(key in json.dumps(env) for key in REAL_KEYS.values())


def test_broken_upstream_setting_breaks_only_its_protocol(standin, tmp_path):
    from pytest_rexmle.gateway import Gateway, Limits

    gw = Gateway(None, environ={"OPENAI_BASE_URL": "localhost:8000/v1", "ANTHROPIC_BASE_URL": standin.url,
                                **REAL_KEYS}, limits=Limits(), task_hosts=())
    s = open_served(gw, tmp_path)
    status, _, body = s.request("POST", "/openai/v1/chat/completions", CHAT)
    assert status == 502 and "OPENAI_BASE_URL is not usable" in json.loads(body)["error"]["message"]
    status, _, _ = s.request("POST", "/anthropic/v1/messages", {"model": "claude-sonnet-4-5", "messages": []})
    assert status == 200
    assert s.run.close()["usage"]["requests"] == 1
    gw.close()


def test_paths_that_could_mean_another_route_never_reach_the_provider(served, standin):
    """The real key is attached only to the listed routes: no dot segments or encodings to walk elsewhere."""
    for path in ("/openai/v1/models/../../v1/files", "/openai/v1/responses/..", "/openai/v1/models/%2e%2e/files",
                 "/anthropic/v1/models/..%2Forganizations", "/openai/v1//chat/completions",
                 "/gemini/v1beta/models/./x:generateContent", "/openai/v1/models\\..\\files"):
        status, _, body = served.request("GET", path)
        assert status == 404, (path, body)
    assert standin.seen == []


def test_expect_100_continue(served, standin):
    big = _raw(served, b"POST /openai/v1/chat/completions HTTP/1.1\r\nAuthorization: Bearer %s\r\n"
                       b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n"
               % (served.run.token.encode(), 5 * 1024 * 1024))
    assert big.startswith(b"HTTP/1.1 413") and b"100 Continue" not in big
    body = json.dumps(CHAT).encode()
    sock = socket.create_connection((served.host, served.port), timeout=10)
    sock.sendall(b"POST /openai/v1/chat/completions HTTP/1.1\r\nAuthorization: Bearer %s\r\nConnection: close\r\n"
                 b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % (served.run.token.encode(), len(body)))
    assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue")
    sock.sendall(body)
    rest = b""
    while part := sock.recv(65536):
        rest += part
    sock.close()
    assert b"HTTP/1.1 200" in rest and standin.last().body == body


def test_trickling_client_is_dropped_at_the_request_deadline(standin, tmp_path):
    gw = make_gateway(standin, client_timeout=1.0, request_timeout=1.5)
    s = open_served(gw, tmp_path)
    sock = socket.create_connection((s.host, s.port), timeout=5)
    started = time.monotonic()
    dropped = None
    try:
        for byte in b"POST /openai/v1/chat/completions HTTP/1.1\r\nX-Slow: " + b"a" * 100:
            sock.sendall(bytes([byte]))  # one byte every 0.1 s: each read is quick, the request never ends
            time.sleep(0.1)
            if time.monotonic() - started > 6:
                break
    except OSError:
        dropped = time.monotonic() - started
    if dropped is None:
        sock.settimeout(3)
        assert sock.recv(100) == b""
        dropped = time.monotonic() - started
    sock.close()
    assert dropped < 6
    gw.close()
