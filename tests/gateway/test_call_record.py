"""The record of model calls (issue 32.5, 32.3 and the lone-surrogate hole): written before the answer
reaches the agent, a call that cannot be recorded is not made, every answered call leaves its lines,
refusals are marked as refused, and the file has a disk budget that a refusal loop cannot grow past."""

from __future__ import annotations

import http.client
import json
import os

from pytest_rexmle.capability.observed import read_model_calls

from .conftest import calls, lines, make_gateway, open_served

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


def test_the_request_is_recorded_before_the_first_byte_of_the_answer(served, standin):
    """The line used to be written after the answer had gone out: an agent could read an answer the record
    never got (the harness killed meanwhile, the write failing)."""
    doc = {"model": "gated", "stream": True, "messages": [{"role": "user", "content": "needle-4711"}]}
    conn = http.client.HTTPConnection(served.host, served.port, timeout=20)
    conn.request("POST", "/openai/v1/chat/completions", body=json.dumps(doc).encode(),
                 headers={"Authorization": f"Bearer {served.run.token}", "Content-Type": "application/json"})
    resp = conn.getresponse()
    first = resp.read1(64)  # the provider holds the rest of its stream until released
    on_disk = served.run.trajectory.path.read_text()
    standin.release.set()
    resp.read()
    conn.close()
    assert resp.status == 200 and first
    (line,) = [json.loads(text) for text in on_disk.splitlines()]
    assert line["phase"] == "request" and line["request"]["messages"][0]["content"] == "needle-4711"
    served.run.close()
    (call,) = calls(served)
    assert call["status"] == 200 and call["stream"] is True and len(call["response"]) > 3


def test_a_call_that_cannot_be_recorded_is_refused_and_not_made(served, standin):
    """A full disk under the record: the call used to be answered (and metered) and its line lost."""
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, served.run.trajectory._fd)  # the record's own descriptor now fails every write: ENOSPC
    os.close(full)
    status, headers, body = served.request("POST", "/openai/v1/chat/completions", CHAT)
    assert status == 507 and headers["x-should-retry"] == "false"
    assert "the call was not made" in json.loads(body)["error"]["message"]
    assert standin.seen == []
    record = served.run.close()
    assert record["usage"]["requests"] == 0 and record["errors"]["record"] == 1


def test_a_lone_surrogate_leaves_every_answered_call_its_lines(served, standin):
    """JSON "\\ud800" in a request made the write raise after the answer was sent and metered: 4 answered
    calls, 1 line."""
    raw = b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "half a pair: \\ud800 (%d)"}]}'
    statuses = [served.request("POST", "/openai/v1/chat/completions", raw % i)[0] for i in range(4)]
    record = served.run.close()
    assert statuses == [200] * 4 and record["usage"]["requests"] == 4
    recorded = calls(served)
    assert [c["request"]["messages"][0]["content"] for c in recorded] == [
        f"half a pair: \ud800 ({i})" for i in range(4)]
    assert all(c["status"] == 200 and c["response"]["choices"] for c in recorded)
    trace = read_model_calls(served.run.logs_dir.parent)  # the capability judge reads these lines
    assert "half a pair: \ufffd (3)" in trace.text or "half a pair: \ud800 (3)" in trace.text


def test_refused_calls_are_marked_refused_with_the_reason(gateway, standin, tmp_path):
    """Refusals looked like calls: the judge credited the text of requests that never reached a provider."""
    from pytest_rexmle.gateway import Budget

    s = open_served(gateway, tmp_path, budget=Budget(requests=0))
    strategy = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "I ran 5-fold cross-validation"}]}
    assert s.request("POST", "/openai/v1/chat/completions", strategy)[0] == 429  # budget
    assert s.request("POST", "/openai/v1/fine_tuning/jobs", {})[0] == 404  # unknown route
    assert s.request("POST", "/openai/v1/chat/completions", CHAT, token="rexmle-not-this-run")[0] == 401
    assert s.request("POST", "/openai/v1/chat/completions", b"{}", {"Content-Length": "2",
                                                                    "Transfer-Encoding": "chunked"})[0] == 400
    s.run.close()
    recorded = lines(s)
    assert [r["status"] for r in recorded] == [429, 404, 401, 400]
    assert all(r["refused"] is True and r["reason"] and r["request"] is None for r in recorded)
    assert "budget" in recorded[0]["reason"] and "unknown route" in recorded[1]["reason"]
    assert standin.seen == []
    assert "cross-validation" not in read_model_calls(s.run.logs_dir.parent).text  # no evidence for the judge


def test_past_its_disk_budget_the_record_refuses_calls_and_says_so(standin, tmp_path):
    """The record had no budget of its own (1 GiB, past which calls went on with metadata lines)."""
    gw = make_gateway(standin, record_bytes=3 * 1024 * 1024)
    s = open_served(gw, tmp_path)
    big = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "y" * 600_000}]}
    assert s.request("POST", "/openai/v1/chat/completions", big)[0] == 200
    status, headers, body = s.request("POST", "/openai/v1/chat/completions", big)
    assert status == 507 and "disk budget" in json.loads(body)["error"]["message"]
    assert len(standin.seen) == 1
    s.run.close()
    gw.close()
    first, refusal = calls(s)
    assert first["status"] == 200 and first["request"]["messages"][0]["content"] == "y" * 600_000
    assert refusal["refused"] is True and "disk budget" in refusal["reason"] and refusal["request_bytes"] > 600_000
    assert s.run.trajectory.path.stat().st_size < 3 * 1024 * 1024


def test_a_refusal_loop_is_counted_not_written_line_by_line(served, standin):
    """Each refusal wrote a line: ~4.5 GB/h of record with a zero budget. Repeats are now counted."""
    conn = http.client.HTTPConnection(served.host, served.port, timeout=20)
    for i in range(1000):
        conn.request("POST", f"/openai/v1/nothing/{i}", body=b"{}",
                     headers={"Authorization": f"Bearer {served.run.token}", "Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 404
    conn.close()
    served.run.close()
    recorded = lines(served)
    assert len(recorded) <= 101 and all(r["refused"] for r in recorded)
    assert sum(r.get("repeated", 1) for r in recorded) == 1000  # every refusal counted, none dropped
    assert recorded[-1]["repeated"] == 900 and recorded[-1]["first_ts"] <= recorded[-1]["last_ts"]
    assert served.run.trajectory.path.stat().st_size < 100_000


def test_the_record_budget_is_a_share_of_the_runs_disk_limit(gateway, tmp_path):
    """A runtime with a disk limit gives the record at most a quarter of it (and never more than the
    gateway's own budget)."""
    from types import SimpleNamespace

    from pytest_rexmle.limits import Limits as RunLimits
    from pytest_rexmle.runtime.gateway_link import RunGateway

    policy = SimpleNamespace(budget=None, egress_allow=())
    for disk, expected in ((64 << 20, 16 << 20), (100 << 30, gateway.limits.record_bytes), (None, None)):
        run_dir = tmp_path / f"run-{disk}"
        spec = SimpleNamespace(task_id="ldct-iqa", logs=run_dir / "logs", submission=run_dir / "submission",
                               data_dir=None, limits=RunLimits(disk=disk))
        linked = RunGateway(lambda: gateway, spec, policy)
        assert linked.run.trajectory.max_bytes == (expected or gateway.limits.record_bytes)
        linked.run.close()
