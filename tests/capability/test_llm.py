"""The llm judge against a loopback chat-completions server: prompt content, strict JSON handling,
retries, chunking of long logs, per-run aggregation over sections, and the API key never leaking."""

from __future__ import annotations

import json

import pytest

from pytest_rexmle.capability import CapabilityRun, SessionCapability, get_judge, session_document
from pytest_rexmle.capability.llm import PROMPT_VERSION, SYSTEM_PROMPT, JudgeError, LLMJudge, parse_reply
from pytest_rexmle.capability.schema import UNPARSABLE
from pytest_rexmle.capability.stages import StageScores, stage_scores
from pytest_rexmle.capability.strategies import load_strategies
from pytest_rexmle.report.html import render_html

from ..report.helpers import session as report_session
from .helpers import ChatServer, make_run

SECRET = "sk-test-DO-NOT-LEAK-7f3a9c"


@pytest.fixture
def server():
    with ChatServer() as srv:
        yield srv


@pytest.fixture
def judge(server, monkeypatch):
    monkeypatch.setenv("REXMLE_JUDGE_API_KEY", SECRET)
    return get_judge("llm", base_url=server.base_url, model="judge-model", params='{"temperature": 0}', backoff="0",
                     max_attempts="3", timeout="10")


def test_valid_reply_prompt_and_document(tmp_path, server, judge):
    run = make_run(tmp_path / "run", "Resampled to isotropic spacing. EVIDENCE-4\nused TTA EVIDENCE-9\n")
    doc = judge.judge_run(run, "isles22")
    CapabilityRun.check(doc)
    assert [r["score"] for r in doc["strategies"]] == [0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0]
    assert doc["strategies"][3]["evidence"] == "saw EVIDENCE-4"
    assert doc["strategies"][3]["section"] == "isles22-section-1"
    assert doc["judge"]["model"] == "judge-model" and doc["judge"]["prompt_version"] == PROMPT_VERSION
    assert doc["judge"]["params"] == {"temperature": 0}
    assert doc["judge_usage"] == {"requests": 1, "prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
    (request,) = server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == f"Bearer {SECRET}"
    body = request["body"]
    assert body["model"] == "judge-model" and body["temperature"] == 0
    assert body["response_format"] == {"type": "json_object"}
    assert body["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    user = body["messages"][1]["content"]
    # 13 blocks "TARGET STRATEGY: <name>\n<criteria>" verbatim, in id order, blank-line separated
    blocks = "\n\n".join(f"TARGET STRATEGY: {s.name}\n{s.criteria}" for s in load_strategies())
    # the log is the observed trace (the gateway's recorded model calls), never the agent's stdout
    assert user.startswith(blocks + "\n\nLog section (isles22-section-1):\n=== logs/model-calls.jsonl#1 ===\n")
    assert user.count("TARGET STRATEGY: ") == 13
    assert "\"results\"" in user.splitlines()[-1]


def test_code_blocks_are_removed_by_default(tmp_path, server, judge):
    run = make_run(tmp_path / "run", "before\n```python\nimport optuna  # EVIDENCE-13\n```\nafter EVIDENCE-5\n")
    doc = judge.judge_run(run, "isles22")
    assert doc["strategies"][12]["score"] == 0 and doc["strategies"][4]["score"] == 1
    assert "optuna" not in server.requests[0]["body"]["messages"][1]["content"]
    keep = LLMJudge(base_url=server.base_url, keep_code=True, backoff=0)
    assert keep.judge_run(run, "isles22")["strategies"][12]["score"] == 1


def test_malformed_reply_is_retried(tmp_path, server, judge):
    server.script = ["Sure! Here is my verdict: strategy 4 applies.", '{"result": []}']
    doc = judge.judge_run(make_run(tmp_path / "run", "EVIDENCE-4\n"), "isles22")
    assert len(server.requests) == 3  # prose, then wrong key, then the fake model's valid JSON
    assert doc["strategies"][3]["score"] == 1 and doc["flags"] == [] and not doc["sections"][0]["flagged"]


def test_always_malformed_reply_scores_zero_and_is_flagged(tmp_path, server, judge):
    server.script = ["not json"] * 3
    doc = judge.judge_run(make_run(tmp_path / "run", "EVIDENCE-4\n"), "isles22")
    assert len(server.requests) == 3
    assert doc["flags"] == ["unparsable: isles22-section-1"]
    assert doc["sections"][0]["flagged"] is True
    assert {r["evidence"] for r in doc["sections"][0]["results"]} == {UNPARSABLE}
    assert all(r["score"] == 0 for r in doc["strategies"])
    CapabilityRun.check(doc)


def test_transient_http_errors_are_retried_and_auth_errors_are_not(tmp_path, server, judge):
    server.script = [500, 429]
    doc = judge.judge_run(make_run(tmp_path / "run", "EVIDENCE-2\n"), "isles22")
    assert len(server.requests) == 3 and doc["strategies"][1]["score"] == 1
    server.script = [401]
    with pytest.raises(JudgeError) as info:
        judge.judge_run(make_run(tmp_path / "run2", "EVIDENCE-2\n"), "isles22")
    assert "401" in str(info.value) and SECRET not in str(info.value) and "REXMLE_JUDGE_API_KEY" in str(info.value)


def test_long_log_is_chunked_and_sections_are_or_ed(tmp_path, server, judge):
    filler = "epoch {i} loss=0.{i:04d} some ordinary progress output of the training loop\n"
    lines = [filler.format(i=i) for i in range(900)]  # ~70 chars each: ~64 000 characters in all
    lines[700] = "EVIDENCE-12 merged the fold models\n"
    lines[50] = "EVIDENCE-1 traced the crash and fixed it\n"
    text = "".join(lines)
    doc = judge.judge_run(make_run(tmp_path / "run", text), "isles22")
    n = len(server.requests)
    # 64 000+ characters at <= 15 000 per section, cut at line ends: 5 sections
    assert n == len(doc["sections"]) == 5
    assert [s["label"] for s in doc["sections"]] == [f"isles22-section-{i}" for i in range(1, 6)]
    for request in server.requests:
        section = request["body"]["messages"][1]["content"].split("):\n", 1)[1].rsplit("\nReturn a JSON", 1)[0]
        assert len(section) <= 15_000
    assert doc["strategies"][0]["section"] == "isles22-section-1"
    assert doc["strategies"][11]["score"] == 1 and doc["strategies"][11]["section"] != "isles22-section-1"
    assert sum(r["score"] for r in doc["strategies"]) == 2
    CapabilityRun.check(doc)


def test_llm_stage_scores(tmp_path, server, judge):
    run = make_run(tmp_path / "run", "PLAN-DONE\nVALID-DONE\n")
    doc = stage_scores(run, "isles22", None, judge)
    StageScores.check(doc)
    scores = {r["id"]: r["score"] for r in doc["stages"]}
    assert scores == {"S1": 1.0, "S2": 0.0, "S3": 1.0, "S4": 0.0, "S5": 0.0}
    assert doc["total"] == pytest.approx(0.25 + 0.35)
    assert "stages" in server.requests[-1]["body"]["messages"][1]["content"].splitlines()[-1]


def test_api_key_is_never_written(tmp_path, server, judge):
    run = make_run(tmp_path / "run", "EVIDENCE-3 EVIDENCE-7\nPLAN-DONE\n")
    server.script = ["garbage"]
    doc = judge.judge_run(run, "isles22")
    stages = stage_scores(run, "isles22", None, judge)
    session = session_document([doc], [stages])
    SessionCapability.check(session)
    (tmp_path / "rexmle-capability.json").write_text(json.dumps(session))
    page = render_html([report_session("toy", "r1", seed=1, ids=["isles22", "ldct-iqa"])], [session])
    (tmp_path / "report.html").write_text(page)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) >= 6
    for path in written:
        assert SECRET.encode() not in path.read_bytes(), path
    assert SECRET not in repr(judge) and SECRET not in json.dumps(judge.describe())
    assert judge.describe()["api_key_env"] == "REXMLE_JUDGE_API_KEY"


def test_no_key_sends_no_authorization_header(tmp_path, server, monkeypatch):
    monkeypatch.delenv("REXMLE_JUDGE_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    judge = get_judge("llm", base_url=server.base_url, backoff=0)
    judge.judge_run(make_run(tmp_path / "run", "hello\n"), "isles22")
    assert "Authorization" not in server.requests[0]["headers"]


def test_credentials_in_the_url_are_not_recorded():
    judge = LLMJudge(base_url="http://user:hunter2@127.0.0.1:9/v1")
    assert "hunter2" not in json.dumps(judge.describe()) and "hunter2" not in repr(judge)


@pytest.mark.parametrize("content,expected", [
    ('{"results": []}', []),
    ('```json\n{"results": [{"id": 1}]}\n```', [{"id": 1}]),
    ('{"results": {}}', None),
    ("[1, 2]", None),
    ("", None),
    (None, None),
])
def test_parse_reply(content, expected):
    assert parse_reply(content, "results") == expected


def test_forged_log_is_never_sent_to_the_model(tmp_path, server, judge):
    # every strategy's token in the agent's own stdout and notes: a claim, not an observed trace
    claims = "\n".join(f"EVIDENCE-{i}" for i in range(1, 14)) + "\nPLAN-DONE SETUP-DONE VALID-DONE\n"
    run = make_run(tmp_path / "run", stdout=claims, files={"workspace/notes.md": claims})
    doc = judge.judge_run(run, "isles22")
    stages = stage_scores(run, "isles22", None, judge)
    assert server.requests == [] and all(r["score"] == 0 for r in doc["strategies"])
    assert [s["score"] for s in stages["stages"][:3]] == [0.0, 0.0, 0.0]
    # the same tokens in the recorded model calls are judged
    run2 = make_run(tmp_path / "run2", claims)
    assert all(r["score"] == 1 for r in judge.judge_run(run2, "isles22")["strategies"])
    assert [s["score"] for s in stage_scores(run2, "isles22", None, judge)["stages"][:3]] == [1.0, 1.0, 1.0]
