"""Several agents in one session (``--agent`` repeatable): one item per task and agent, each agent's
runs, resume keys and score kept apart."""

from __future__ import annotations

import json

import pytest

from .conftest import report_json, run_folders

BAD = "printf 'image_id,quality_score\\n1000,1.0\\n' > $REXMLE_SUBMISSION_DIR/submission.csv"


def collected_ids(result) -> list[str]:
    return [line.split("[", 1)[1].rstrip("]") for line in result.outlines if "test_task[" in line]


def test_each_challenge_and_agent_is_an_item(bench):
    result = bench("--agent=sample", "--agent=command", "--agent-option=command:cmd=true", "--collect-only", "-q")
    ids = collected_ids(result)
    assert len(ids) == 40 and ids[:2] == [f"{ids[0].rsplit('-', 1)[0]}-sample", f"{ids[0].rsplit('-', 1)[0]}-command"]
    assert "ldct-iqa-command" in ids and "ldct-iqa-sample" in ids
    # a comma list is the same session; one agent keeps the plain ids
    assert collected_ids(bench("--agent=sample,command", "--agent-option=command:cmd=true", "--collect-only",
                               "-q")) == ids
    assert "ldct-iqa" in collected_ids(bench("--agent=sample", "--collect-only", "-q"))


def test_repeats_of_several_agents_are_items_of_their_own(bench):
    ids = collected_ids(bench("--agent=sample,command", "--agent-option=command:cmd=true", "--rexmle-repeat=2",
                              "--collect-only", "-q", "-k", "ldct-iqa"))
    assert ids == ["ldct-iqa-sample-r1", "ldct-iqa-sample-r2", "ldct-iqa-command-r1", "ldct-iqa-command-r2"]
    assert collected_ids(bench("--agent=sample", "--rexmle-repeat=2", "--collect-only", "-q", "-k",
                               "ldct-iqa-r2")) == ["ldct-iqa-r2"]
    result = bench("--agent=sample", "--rexmle-repeat=0", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--rexmle-repeat must be at least 1, got 0*"])


def test_agent_options_for_an_agent_not_in_the_session_are_a_usage_error(bench):
    result = bench("--agent=sample", "--agent-option=codex:model=gpt-5", "-k", "ldct-iqa")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--agent-option codex:model=gpt-5: 'codex' is not one of the session's agents*"])
    # every agent is checked before anything runs
    result = bench("--agent=sample", "--agent=command", "-k", "ldct-iqa")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*agent 'command' needs --agent-option cmd=...*"])


@pytest.mark.slow  # a session of two agents' sandboxed runs
def test_two_agents_run_graded_and_reported_apart(bench, needs_bwrap):
    args = ("--agent=sample", "--agent=command", f"--agent-option=command:cmd={BAD}", "-k", "ldct-iqa",
            "--rexmle-resume")
    result = bench(*args)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*FAILED*test_task?ldct-iqa-command?*"])
    result.stdout.fnmatch_lines(["agent sample: score *% over 1 task(s), 0 FAIL",
                                 "agent command: score 0.0% over 1 task(s), 1 FAIL"])
    folders = run_folders(bench.path, "ldct-iqa")
    assert sorted(f.parent.name.split("-")[0] for f in folders) == ["command", "sample"]
    doc = report_json(bench.path)
    by_agent = {r["agent"]: r for r in doc["tasks"]}
    assert by_agent["sample"]["status"] == "ok" and by_agent["command"]["status"] == "invalid"
    assert set(doc["agents"]) == {"sample", "command"}
    assert doc["agents"]["command"]["n_fail"] == 1 and doc["agents"]["sample"]["n_fail"] == 0
    assert doc["agents"]["sample"]["score"] == by_agent["sample"]["percentile"]
    assert doc["agents"]["command"]["agent_options"] == {"cmd": BAD}
    for folder in folders:
        meta = json.loads((folder / "run.json").read_text())
        assert meta["agent"] == folder.parent.name.split("-")[0] and meta["key"]["agent"] == meta["agent"]
    # resume keys are per agent: both results are reused, nothing runs again
    bench(*args).assert_outcomes(passed=1, failed=1)
    assert len(run_folders(bench.path, "ldct-iqa")) == 2
