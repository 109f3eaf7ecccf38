"""Every system prompt a run used reaches its ATIF trajectory, each change as a system step.

The calls go through the real gateway (to the loopback stand-in of the providers), and the trajectory is
built from the record the gateway wrote. Before: only the first call's system prompt was kept, so an agent
that changed its instructions mid-run (a context compaction, a helper model with other instructions, a
system message added to a chat) showed the first instructions only.
"""

from __future__ import annotations

from pathlib import Path

from pytest_rexmle.report.atif import AtifTrajectory, build_trajectory
from pytest_rexmle.report.calls import PREVIEW_CHARS

PLAN = "You are an ML engineer. Plan first."
COMPACT = "You are an ML engineer. The conversation so far was summarised below."
HEADERS = {"anthropic-version": "2023-06-01"}


def _anthropic(served, system: str, text: str) -> None:
    doc = {"model": "claude-sonnet-4-5", "max_tokens": 10, "system": system,
           "messages": [{"role": "user", "content": text}]}
    status, _, body = served.request("POST", "/anthropic/v1/messages", doc, HEADERS, token="run")
    assert status == 200, body


def _trajectory(served) -> dict:
    served.run.close()
    run_dir = Path(served.run.trajectory.path).parent.parent
    doc = build_trajectory(run_dir, {"agent": "command", "task": "ldct-iqa"})
    AtifTrajectory.model_validate(doc)  # still ATIF v1.7 by the models' rules
    return doc


def _system_steps(doc: dict) -> list[dict]:
    return [s for s in doc["steps"] if s["source"] == "system"]


def test_a_changed_system_prompt_is_a_system_step_each_time(served, standin):
    for system, text in ((PLAN, "task"), (PLAN, "go on"), (COMPACT, "go on"), (PLAN, "back")):
        _anthropic(served, system, text)
    doc = _trajectory(served)
    steps = _system_steps(doc)
    assert [s["message"] for s in steps] == [PLAN, COMPACT, PLAN]
    assert [s["extra"].get("system_prompt") for s in steps] == [None, "changed", "changed"]
    assert [s["extra"]["call"] for s in steps] == [1, 3, 4]
    # each change stands before the call it came with: system, user, agent for every call that brought one
    sources = [s["source"] for s in doc["steps"]]
    assert sources == ["system", "user", "agent", "user", "agent", "system", "user", "agent", "system", "user", "agent"]
    assert len([s for s in doc["steps"] if s["source"] == "agent"]) == 4


def test_a_system_message_added_to_a_chat_gives_the_added_part(served, standin):
    history = [{"role": "system", "content": PLAN}, {"role": "user", "content": "task"}]
    for extra in ([], [{"role": "assistant", "content": "ok"}, {"role": "system", "content": "Budget: 10 minutes left."},
                       {"role": "user", "content": "go on"}]):
        status, _, body = served.request("POST", "/openai/v1/chat/completions",
                                         {"model": "gpt-4o-mini", "messages": history + extra}, token="run")
        assert status == 200, body
    steps = _system_steps(_trajectory(served))
    assert [s["message"] for s in steps] == [PLAN, "Budget: 10 minutes left."]
    assert steps[1]["extra"]["system_prompt"] == "extended"


def test_a_change_past_the_preview_is_still_seen(served, standin):
    """Prompts are kept as a preview of PREVIEW_CHARS characters; a change after it is found by the digest."""
    head = "x" * PREVIEW_CHARS
    _anthropic(served, head + " today is Monday", "task")
    _anthropic(served, head + " today is Friday", "go on")
    steps = _system_steps(_trajectory(served))
    assert len(steps) == 2 and steps[1]["extra"]["system_prompt"] == "changed"
    assert steps[0]["extra"]["system_prompt_sha256"] != steps[1]["extra"]["system_prompt_sha256"]
