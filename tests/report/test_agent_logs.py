"""The agent's own log in ``trajectory.atif.json``: one sub-agent trajectory per kept log, marked as
reported by the agent, beside the gateway-observed steps and totals (which it never changes).

The fixtures are written as the real CLIs write them (Claude Code 2.1's session transcript, Codex 0.169's
rollout, Gemini CLI's JSON-lines chat session, mini-swe-agent 2.4's trajectory, AIDE 0.2's journal), in the
folders the adapters copy them to; then the same folders hold what a hostile agent leaves instead: a
sparse file declaring 1 GB, a FIFO, JSON nested 100,000 deep, bytes that are not UTF-8 and a link out of
the run folder. None may hang or crash the writer; each is skipped with a note.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from pytest_rexmle.report.agent_logs import AGENT_LOGS
from pytest_rexmle.report.atif import AtifTrajectory, build_trajectory, write_trajectory

COMMAND = 'cp "$REXMLE_DATA_DIR/sample_submission.csv" "$REXMLE_SUBMISSION_DIR/submission.csv" && rexmle validate'
VERDICT = "OK: 15 test case(s), format valid for ldct-iqa (checked against public data only)"
TASK = "# LDCT-IQA — predict radiologists' quality scores for low-dose CT slices"


def lines(*records: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def gateway_calls(logs: Path) -> None:
    """Two calls as the gateway records them (request line, then response line, sharing ``call``)."""
    out = []
    for n in (1, 2):
        base = {"call": n, "protocol": "openai", "route": "POST /openai/v1/chat/completions", "stream": False}
        out.append({**base, "phase": "request", "ts": f"2026-11-27T15:23:5{n}.000000+00:00", "model": "m",
                    "request": {"model": "m", "messages": [{"role": "user", "content": TASK}]}})
        out.append({**base, "phase": "response", "ts": f"2026-11-27T15:23:5{n}.500000+00:00", "status": 200,
                    "duration_s": 0.01, "model": "m",
                    "response": {"choices": [{"message": {"role": "assistant", "content": f"answer {n}"}}]},
                    "usage": {"input_tokens": 150, "output_tokens": 25, "cached_tokens": 0, "cost_usd": 0.001}})
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "model-calls.jsonl").write_text(lines(*out))


def claude_transcript(folder: Path, session: str = "ffc14b54-dde8-45c4-b35a-46f236f6a5f1") -> Path:
    path = folder / "config" / "projects" / "-rexmle-workspace" / f"{session}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    common = {"isSidechain": False, "userType": "external", "cwd": "/rexmle/workspace", "sessionId": session,
              "version": "2.1.331"}
    usage = {"input_tokens": 120, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 40,
             "output_tokens": 30, "service_tier": "standard"}

    def answer(mid: str, uuid: str, blocks: list, stop: str) -> dict:
        return {**common, "parentUuid": None, "type": "assistant", "uuid": uuid, "timestamp": "2026-11-27T15:23:27.7Z",
                "message": {"id": mid, "type": "message", "role": "assistant", "model": "claude-scripted-1",
                            "content": blocks, "stop_reason": stop, "usage": usage}}

    path.write_text(lines(
        {"type": "queue-operation", "operation": "enqueue", "timestamp": "2026-11-27T15:23:27.231Z",
         "sessionId": session, "content": TASK},
        {**common, "parentUuid": None, "type": "user", "uuid": "u1", "timestamp": "2026-11-27T15:23:27.3Z",
         "message": {"role": "user", "content": TASK}},
        {**common, "type": "attachment", "uuid": "a1", "attachment": {"type": "date", "date": "2026-11-27"}},
        answer("msg_0001", "as1", [{"type": "thinking", "thinking": "Copy first, then check.", "signature": "x"},
                                   {"type": "text", "text": "I will copy the sample submission and validate it."}],
               "tool_use"),
        answer("msg_0001", "as2", [{"type": "tool_use", "id": "toolu_0001", "name": "Bash", "input": {
            "command": COMMAND, "description": "Run a step of the task"}}], "tool_use"),
        {**common, "parentUuid": "as2", "type": "user", "uuid": "u2", "timestamp": "2026-11-27T15:23:29.050Z",
         "message": {"role": "user", "content": [{"tool_use_id": "toolu_0001", "type": "tool_result",
                                                  "content": VERDICT, "is_error": False}]},
         "toolUseResult": {"stdout": VERDICT, "stderr": "", "interrupted": False}},
        answer("msg_0002", "as3", [{"type": "text", "text": "The submission is in place and validates."}], "end_turn"),
        {"type": "cost-state", "sessionId": session, "totalCostUSD": 0.00216},
    ))
    return path


def codex_rollout(folder: Path) -> Path:
    path = folder / "home" / "sessions" / "2026" / "11" / "27" / \
        "rollout-2026-11-27T15-24-15-01a21d9b-6fef-7ee2-a4c8-16657a011e40.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)

    def item(n: int, payload: dict, kind: str = "response_item") -> dict:
        return {"timestamp": f"2026-11-27T15:24:1{n}.000Z", "ordinal": n, "type": kind, "payload": payload}

    path.write_text(lines(
        item(0, {"id": "01a21d9b", "timestamp": "2026-11-27T15:24:15.755Z", "cwd": "/rexmle/workspace",
                 "originator": "codex_exec", "cli_version": "0.169.0", "model_provider": "rexmle"}, "session_meta"),
        item(1, {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<skills>"}]}),
        item(2, {"turn_id": "t1", "cwd": "/rexmle/workspace", "approval_policy": "never", "model": "gpt-scripted"},
             "turn_context"),
        item(3, {"type": "message", "role": "user", "content": [{"type": "input_text", "text": TASK}]}),
        item(4, {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Validate the sample."}],
                 "content": None, "encrypted_content": "gAAAA"}),
        item(5, {"type": "function_call", "name": "exec_command", "call_id": "call_0001",
                 "arguments": json.dumps({"cmd": COMMAND, "workdir": "/rexmle/workspace"})}),
        item(6, {"thread_id": "01a21d9b", "response_id": "resp_0001",
                 "usage": {"input_tokens": 2000, "cached_input_tokens": 500, "output_tokens": 40, "total_tokens": 2040},
                 "turn_token_usage": {"input_tokens": 2000}}, "token_usage_record"),  # 0.169: before the output
        item(7, {"type": "function_call_output", "call_id": "call_0001",
                 "output": json.dumps({"output": VERDICT, "metadata": {"exit_code": 0, "duration_seconds": 0.9}})}),
        item(8, {"type": "token_count", "info": {"last_token_usage": {"input_tokens": 1, "output_tokens": 1}}},
             "event_msg"),  # the same answer's count again, after its output: not counted twice
        item(9, {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]}),
        item(10, {"type": "token_count", "info": {"last_token_usage": {  # older versions: this line only
            "input_tokens": 2100, "cached_input_tokens": 2000, "output_tokens": 5}}}, "event_msg"),
    ))
    return path


def gemini_session(folder: Path) -> Path:
    path = folder / "home" / ".gemini" / "tmp" / "workspace" / "chats" / "session-2026-11-27T15-24-6a4bc3be.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    call = {"id": "run_shell_command_1", "name": "run_shell_command", "args": {"command": COMMAND},
            "result": [{"functionResponse": {"id": "run_shell_command_1", "name": "run_shell_command",
                                             "response": {"output": f"Output: {VERDICT}"}}}],
            "status": "success", "resultDisplay": VERDICT, "displayName": "Shell"}
    first = {"id": "g1", "timestamp": "2026-11-27T15:24:52.249Z", "type": "gemini",
             "content": "I will copy the sample submission and validate it.",
             "thoughts": [{"subject": "Plan", "description": "copy, then validate", "timestamp": "x"}],
             "tokens": {"input": 300, "output": 50, "cached": 100, "thoughts": 0, "tool": 0, "total": 350},
             "model": "gemini-scripted"}
    path.write_text(lines(
        {"sessionId": "6a4bc3be", "projectHash": "541b", "startTime": "2026-11-27T15:24:51.835Z", "kind": "main"},
        {"$set": {"messages": [{"id": "ctx", "timestamp": "2026-11-27T15:24:51.836Z", "type": "user",
                                "content": [{"text": "<session_context>linux</session_context>"}]}]}},
        {"id": "u1", "timestamp": "2026-11-27T15:24:51.847Z", "type": "user", "content": [{"text": TASK}]},
        first,
        {"$set": {"lastUpdated": "2026-11-27T15:24:52.249Z"}},
        {**first, "toolCalls": [call]},
        {"id": "u2", "timestamp": "2026-11-27T15:24:54.523Z", "type": "user",
         "content": [{"functionResponse": call["result"][0]["functionResponse"]}]},
        {"id": "g2", "timestamp": "2026-11-27T15:24:54.585Z", "type": "gemini", "content": "It validates.",
         "thoughts": [], "tokens": {"input": 400, "output": 10, "cached": 0}, "model": "gemini-scripted"},
    ))
    return path


def mini_trajectory(folder: Path) -> Path:
    def answer(n: int, content: str, command: str) -> dict:
        call = {"function": {"arguments": json.dumps({"command": command}), "name": "bash"}, "id": f"call_000{n}",
                "type": "function"}
        return {"content": content, "role": "assistant", "tool_calls": [call],
                "extra": {"actions": [{"command": command, "tool_call_id": f"call_000{n}"}],
                          "response": {"id": f"chatcmpl-000{n}", "model": "scripted-chat",
                                       "usage": {"completion_tokens": 25, "prompt_tokens": 150, "total_tokens": 175}},
                          "cost": 0.0, "timestamp": 1795793038.5 + n}}

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "trajectory.json"
    path.write_text(json.dumps({
        "info": {"model_stats": {"instance_cost": 0.0, "api_calls": 2}, "mini_version": "2.4.6",
                 "exit_status": "Submitted", "submission": ""},
        "messages": [
            {"role": "system", "content": "You are a helpful assistant that can interact with a computer."},
            {"role": "user", "content": "Please solve this issue: " + TASK},
            answer(1, "Copy the sample submission, then validate.", COMMAND),
            {"content": json.dumps({"returncode": 0, "output": VERDICT + "\n"}), "tool_call_id": "call_0001",
             "role": "tool", "extra": {"raw_output": VERDICT, "returncode": 0, "timestamp": 1795793039.39}},
            answer(2, "The submission is in place; finishing.", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
            {"role": "exit", "content": "", "extra": {"exit_status": "Submitted", "submission": ""}},
        ],
        "trajectory_format": "mini-swe-agent-1.1"}))
    return path


def aide_journal(folder: Path) -> Path:
    path = folder / "logs" / "0-rexmle" / "journal.json"
    path.parent.mkdir(parents=True, exist_ok=True)

    def node(step: int, nid: str, plan: str, out: list, metric, buggy: bool, exc=None) -> dict:
        return {"code": f"import pandas as pd  # step {step}", "plan": plan, "step": step, "id": nid,
                "ctime": 1795793000.0 + step, "parent": None, "children": [], "_term_out": out, "exec_time": 1.5,
                "exc_type": exc, "exc_info": None, "exc_stack": None, "analysis": f"analysis {step}",
                "metric": {"value": metric, "maximize": True}, "is_buggy": buggy}

    path.write_text(json.dumps({"nodes": [
        node(1, "b2", "Fix the path.", ["PLCC 0.71\n"], 0.71, False),
        node(0, "a1", "A ridge regression on image statistics.", ["Traceback...\n", "KeyError\n"], None, True,
             "KeyError")], "node2parent": {"b2": "a1"}, "__version": "2"}, separators=(",", ":")))
    return path


def run_of(tmp_path: Path, agent: str) -> tuple[Path, Path]:
    """A finished run's folder with the gateway's record, and the folder the adapter keeps the agent's log in."""
    gateway_calls(tmp_path / "logs")
    kept = tmp_path / "logs" / agent / {"aide": "logs", "ml-master": "logs"}.get(agent, agent)
    if agent in ("aide", "ml-master"):
        kept = kept.parent
    kept.mkdir(parents=True, exist_ok=True)
    return tmp_path, kept


def embedded(run: Path, agent: str) -> tuple[dict, AtifTrajectory]:
    doc = build_trajectory(run, {"agent": agent, "task": "ldct-iqa"})
    trajectory = AtifTrajectory.model_validate(doc)
    assert trajectory.subagent_trajectories and len(trajectory.subagent_trajectories) == 1, doc.get("extra")
    return doc, trajectory.subagent_trajectories[0]


def assert_gateway_root(doc: dict) -> None:
    """The root stays the gateway's: its steps are the two observed calls and its totals the meter."""
    final = doc["final_metrics"]
    assert (final["total_prompt_tokens"], final["total_completion_tokens"], final["total_cost_usd"]) == (300, 50, 0.002)
    assert [s["extra"]["observed_by"] for s in doc["steps"] if s["source"] == "agent"] == ["gateway", "gateway"]
    assert "the agent's claims, not observed by the harness" in doc["notes"]


def tool_step(sub: AtifTrajectory, name: str):
    step = next(s for s in sub.steps if s.tool_calls and s.tool_calls[0].function_name == name)
    return step, step.tool_calls[0], step.observation.results[0]


def test_claude_code_session_transcript_is_embedded_as_reported_by_the_agent(tmp_path):
    run, kept = run_of(tmp_path, "claude-code")
    claude_transcript(kept)
    (kept / "stdout.jsonl").write_text(lines({"type": "system", "subtype": "init", "session_id": "s"}))
    doc, sub = embedded(run, "claude-code")
    assert_gateway_root(doc)
    assert sub.extra["reported_by"] == "agent" and sub.extra["source_file"] == (
        "logs/claude-code/claude-code/config/projects/-rexmle-workspace/ffc14b54-dde8-45c4-b35a-46f236f6a5f1.jsonl")
    assert (sub.agent.name, sub.agent.version, sub.agent.model_name) == ("claude-code", "2.1.331", "claude-scripted-1")
    assert [s.source for s in sub.steps] == ["user", "agent", "agent"]  # one answer over two lines is one step
    step, call, result = tool_step(sub, "Bash")
    assert call.tool_call_id == "toolu_0001" and call.arguments["command"] == COMMAND
    assert result.source_call_id == "toolu_0001" and result.content == VERDICT
    assert step.reasoning_content == "Copy first, then check."
    assert step.message == "I will copy the sample submission and validate it."
    assert (step.metrics.prompt_tokens, step.metrics.completion_tokens, step.metrics.cached_tokens) == (160, 30, 40)
    assert sub.final_metrics.total_completion_tokens == 60 and sub.final_metrics.extra == {"reported_by": "agent"}


def test_claude_code_stream_json_is_read_when_no_transcript_was_kept(tmp_path):
    run, kept = run_of(tmp_path, "claude-code")
    (kept / "stdout.jsonl").write_text(lines(
        {"type": "system", "subtype": "init", "session_id": "s1", "model": "claude-scripted-1"},
        {"type": "assistant", "session_id": "s1", "parent_tool_use_id": None, "message": {
            "id": "msg_1", "role": "assistant", "model": "claude-scripted-1",
            "usage": {"input_tokens": 5, "output_tokens": 1},
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": COMMAND}}]}},
        {"type": "user", "session_id": "s1", "message": {"role": "user", "content": [
            {"tool_use_id": "toolu_1", "type": "tool_result", "content": VERDICT}]}},
        {"type": "result", "subtype": "success", "num_turns": 2, "total_cost_usd": 0.002, "usage": {}}))
    _, sub = embedded(run, "claude-code")
    assert sub.extra["source_file"] == "logs/claude-code/claude-code/stdout.jsonl"
    _, call, result = tool_step(sub, "Bash")
    assert call.arguments == {"command": COMMAND} and result.content == VERDICT
    assert sub.extra["agent_says"]["result"] == {"subtype": "success", "num_turns": 2, "total_cost_usd": 0.002}


def test_codex_rollout_is_embedded_with_its_shell_call_and_token_counts(tmp_path):
    run, kept = run_of(tmp_path, "codex")
    codex_rollout(kept)
    doc, sub = embedded(run, "codex")
    assert_gateway_root(doc)
    assert (sub.agent.version, sub.agent.model_name) == ("0.169.0", "gpt-scripted")
    assert [s.source for s in sub.steps] == ["system", "user", "agent", "agent"]
    step, call, result = tool_step(sub, "exec_command")
    assert call.tool_call_id == "call_0001" and call.arguments["cmd"] == COMMAND
    assert VERDICT in result.content and step.reasoning_content == "Validate the sample."
    assert (step.metrics.prompt_tokens, step.metrics.cached_tokens, step.metrics.completion_tokens) == (2000, 500, 40)
    assert sub.steps[-1].message == "Done." and sub.final_metrics.total_prompt_tokens == 4100


def test_gemini_cli_chat_session_is_embedded_with_the_last_version_of_each_message(tmp_path):
    run, kept = run_of(tmp_path, "gemini-cli")
    gemini_session(kept)
    doc, sub = embedded(run, "gemini-cli")
    assert_gateway_root(doc)
    assert [s.source for s in sub.steps] == ["user", "user", "agent", "agent"]  # the repeat of g1 replaced it
    step, call, result = tool_step(sub, "run_shell_command")
    assert call.arguments == {"command": COMMAND} and VERDICT in result.content
    assert step.reasoning_content == "Plan: copy, then validate"
    assert (step.metrics.prompt_tokens, step.metrics.completion_tokens, step.metrics.cached_tokens) == (300, 50, 100)


def test_mini_swe_agent_trajectory_is_embedded_with_its_bash_calls(tmp_path):
    run, kept = run_of(tmp_path, "mini-swe-agent")
    mini_trajectory(kept)
    doc, sub = embedded(run, "mini-swe-agent")
    assert_gateway_root(doc)
    assert [s.source for s in sub.steps] == ["system", "user", "agent", "agent", "system"]
    step, call, result = tool_step(sub, "bash")
    assert call.tool_call_id == "call_0001" and call.arguments == {"command": COMMAND}
    assert VERDICT in result.content and step.metrics.prompt_tokens == 150 and step.model_name == "scripted-chat"
    assert sub.agent.version == "2.4.6" and sub.extra["agent_says"]["exit_status"] == "Submitted"


@pytest.mark.parametrize("agent", ["aide", "ml-master"])
def test_a_search_journal_is_embedded_node_by_node(tmp_path, agent):
    run, kept = run_of(tmp_path, agent)
    aide_journal(kept)
    _, sub = embedded(run, agent)
    assert sub.extra["source_file"] == f"logs/{agent}/logs/0-rexmle/journal.json"
    first, second = sub.steps  # in the order the search made them
    assert first.message == "A ridge regression on image statistics." and first.extra["is_buggy"] is True
    assert first.observation.results[0].content == "Traceback...\nKeyError\n" and first.extra["exc_type"] == "KeyError"
    assert second.extra == {**second.extra, "parent": "a1", "metric": 0.71, "is_buggy": False}
    assert second.tool_calls[0].arguments == {"code": "import pandas as pd  # step 1"}


def test_every_embedded_trajectory_has_its_own_id(tmp_path):
    run, kept = run_of(tmp_path, "claude-code")
    claude_transcript(kept, "aaaa")
    claude_transcript(kept, "bbbb")
    doc = write_trajectory(run, {"agent": "claude-code", "task": "ldct-iqa"})
    subs = AtifTrajectory.model_validate(json.loads(doc.read_text())).subagent_trajectories
    assert len(subs) == 2 and len({s.trajectory_id for s in subs}) == 2
    assert [s.session_id for s in subs] == ["aaaa", "bbbb"]


def test_every_bundled_agent_that_keeps_a_log_has_a_reader():
    from pytest_rexmle.agents.aide.adapter import AideAgent
    from pytest_rexmle.agents.rd_agent.adapter import RDAgent

    assert set(AGENT_LOGS) == {"claude-code", "codex", "gemini-cli", "mini-swe-agent", "aide", "ml-master"}
    assert AideAgent.log_folders == ("aide/logs",) and RDAgent.log_folders == ()  # R&D-Agent keeps none


# -- what a hostile agent leaves where its log should be ------------------------------------------------------

def test_hostile_logs_are_skipped_with_a_note_and_never_hang_the_writer(tmp_path):
    run, kept = run_of(tmp_path, "claude-code")
    projects = kept / "config" / "projects" / "p"
    projects.mkdir(parents=True)
    with open(projects / "sparse.jsonl", "wb") as sparse:      # 1 GB declared, nothing written
        sparse.truncate(1 << 30)
    os.mkfifo(projects / "fifo.jsonl")                          # an endless read for whoever opens it
    outside = tmp_path.parent / f"{tmp_path.name}-outside.jsonl"
    outside.write_text(lines({"type": "user", "message": {"role": "user", "content": "from outside the run"}}))
    (projects / "link.jsonl").symlink_to(outside)               # a link out of the run folder
    (projects / "deep.jsonl").write_bytes(b"[" * 100_000 + b"]" * 100_000 + b"\n")
    mixed = claude_transcript(kept, "mixed").read_bytes()       # a real transcript with garbage inside
    (projects.parent / "-rexmle-workspace" / "mixed.jsonl").write_bytes(
        b"\xff\xfe not utf-8 \xc3\x28\n" + b'{"type": "user", "message": ' + b"{" * 5000 + b"\n" + mixed
        + b"not json\n")
    started = time.monotonic()
    doc = build_trajectory(run, {"agent": "claude-code", "task": "ldct-iqa"})
    assert time.monotonic() - started < 20
    trajectory = AtifTrajectory.model_validate(doc)
    notes = {n["source_file"].rsplit("/", 1)[-1]: n for n in doc["extra"]["agent_logs"]}
    assert notes["sparse.jsonl"]["status"] == "skipped" and "1073741824 bytes" in notes["sparse.jsonl"]["reason"]
    assert notes["fifo.jsonl"] == {**notes["fifo.jsonl"], "status": "skipped", "reason": "a FIFO, not a regular file"}
    assert notes["link.jsonl"]["reason"] == "a symbolic link, not a regular file"
    assert notes["deep.jsonl"] == {**notes["deep.jsonl"], "status": "skipped", "reason": "no steps in it",
                                   "skipped_lines": 1}
    assert notes["mixed.jsonl"] == {**notes["mixed.jsonl"], "status": "embedded", "skipped_lines": 3}
    assert "Agent logs skipped: " in doc["notes"] and "fifo.jsonl (a FIFO, not a regular file)" in doc["notes"]
    (sub,) = trajectory.subagent_trajectories
    assert "from outside the run" not in json.dumps(doc)
    assert tool_step(sub, "Bash")[2].content == VERDICT and sub.extra["skipped_lines"] == 3


@pytest.mark.parametrize("agent, name", [("mini-swe-agent", "trajectory.json"), ("aide", "journal.json")])
def test_a_hostile_json_log_is_skipped_with_a_note(tmp_path, agent, name):
    run, kept = run_of(tmp_path, agent)
    folder = kept / "logs" / "0-rexmle" if agent == "aide" else kept
    folder.mkdir(parents=True, exist_ok=True)
    for content, reason in ((b"{" * 100_000, "nested"), (b'{"messages": "\xff\xfe"}', "not UTF-8"),
                            (b"[1, 2, 3]", "no steps in it")):
        (folder / name).write_bytes(content)
        doc = build_trajectory(run, {"agent": agent, "task": "ldct-iqa"})
        (note,) = doc["extra"]["agent_logs"]
        assert note["status"] == "skipped" and reason in note["reason"], note
        assert "subagent_trajectories" not in doc
    (folder / name).unlink()
    os.mkfifo(folder / name)
    doc = build_trajectory(run, {"agent": agent, "task": "ldct-iqa"})
    assert doc["extra"]["agent_logs"][0]["reason"] == "a FIFO, not a regular file"


def test_long_agent_texts_are_cut_and_steps_bounded(tmp_path, monkeypatch):
    from pytest_rexmle.report import agent_logs

    monkeypatch.setattr(agent_logs, "MAX_STEPS", 3)
    run, kept = run_of(tmp_path, "claude-code")
    path = claude_transcript(kept)
    with open(path, "a") as out:
        out.write(lines(*({"type": "user", "message": {"role": "user", "content": "x" * 50_000}} for _ in range(5))))
    _, sub = embedded(run, "claude-code")
    assert len(sub.steps) == 3 and sub.extra["cut"] is True and "cut at the harness's bounds" in sub.notes
    monkeypatch.setattr(agent_logs, "MAX_STEPS", 100)
    _, sub = embedded(run, "claude-code")
    assert sub.steps[-1].message.endswith("[30000 characters cut by the harness]")


def test_the_run_page_says_what_the_agents_own_log_gave(tmp_path):
    from pytest_rexmle.report.runpage import render_run_page

    run, kept = run_of(tmp_path, "claude-code")
    claude_transcript(kept)
    os.mkfifo(kept / "config" / "projects" / "-rexmle-workspace" / "<img src=x onerror=alert(1)>.jsonl")
    write_trajectory(run, {"agent": "claude-code", "task": "ldct-iqa"})
    html = render_run_page(run)
    assert ("the agent's own log: 3 steps (reported by the agent, not observed) — logs/claude-code/claude-code/"
            "config/projects/-rexmle-workspace/ffc14b54-dde8-45c4-b35a-46f236f6a5f1.jsonl") in html
    assert "<img src=x" not in html and ("-rexmle-workspace/&lt;img src=x onerror=alert(1)&gt;.jsonl was not read: "
                                         "a FIFO, not a regular file") in html


def test_a_log_no_reader_foresaw_costs_that_log_only(tmp_path, monkeypatch):
    """A reader that meets a shape it did not foresee loses that log, never the run's trajectory."""
    from pytest_rexmle.report import agent_logs

    def stumbles(path, budget):
        raise TypeError("unforeseen")

    monkeypatch.setitem(agent_logs.AGENT_LOGS, "mini-swe-agent",
                        (agent_logs.LogFormat("mini-swe-agent/trajectory.json", stumbles),))
    run, kept = run_of(tmp_path, "mini-swe-agent")
    mini_trajectory(kept)
    doc = build_trajectory(run, {"agent": "mini-swe-agent", "task": "ldct-iqa"})
    assert doc["extra"]["agent_logs"] == [{"source_file": "logs/mini-swe-agent/mini-swe-agent/trajectory.json",
                                           "status": "skipped",
                                           "reason": "could not be read as mini-swe-agent's log (TypeError)"}]
    assert doc["final_metrics"]["total_prompt_tokens"] == 300 and "subagent_trajectories" not in doc
