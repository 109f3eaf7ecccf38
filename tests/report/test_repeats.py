"""A session of ``--rexmle-repeat N``: every run keeps its row, the score counts each challenge once (the mean
over its repeats), an ERROR or FAIL is never hidden by an ok sibling, and the repeats' statistics are the
numbers ``rexmle report`` gives for N sessions of one repeat each."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_rexmle.report.merge import merge_reports, split_repeats
from pytest_rexmle.report.model import build_report, harness_error, with_aggregate
from pytest_rexmle.report.render import markdown, terminal_lines

from .helpers import failed, graded

TASKS = ["isles22", "ldct-iqa", "topcow-cta-det"]
#: each repeat's results: per task (quantile of the human range, or "fail" / "error")
REPEATS = [{"isles22": 0.1, "ldct-iqa": 0.5, "topcow-cta-det": "fail"},
           {"isles22": 0.4, "ldct-iqa": "error", "topcow-cta-det": 0.9},
           {"isles22": 0.7, "ldct-iqa": 0.2, "topcow-cta-det": 0.3}]
SETTINGS = {"data": "synthetic"}


def _result(task_id: str, how, repeat: int | None):
    if how == "fail":
        rec = failed(task_id, "sample")
    elif how == "error":
        rec = dataclasses.replace(harness_error(task_id, "the runtime broke", "Traceback ..."), agent="sample")
    else:
        rec = graded(task_id, how, "sample")
    rec.repeat = repeat
    return rec


def _repeated_session() -> dict:
    records = [_result(t, plan[t], r) for r, plan in enumerate(REPEATS, start=1) for t in TASKS]
    return with_aggregate(build_report(records, agent="sample", agent_options={}, settings=SETTINGS, run_id="S",
                                       repeats=len(REPEATS)))


def _single_sessions() -> list[dict]:
    docs = []
    for r, plan in enumerate(REPEATS, start=1):
        doc = build_report([_result(t, plan[t], None) for t in TASKS], agent="sample", agent_options={},
                           settings=SETTINGS, run_id=f"one-{r}")
        doc["created"] = f"2026-01-01T00:00:0{r}+00:00"  # merged in the order the repeats ran
        docs.append(doc)
    return docs


def test_every_run_keeps_its_row_and_each_challenge_counts_once():
    doc = _repeated_session()
    assert doc["repeats"] == 3 and doc["n_runs"] == 9 and len(doc["tasks"]) == 9
    assert doc["selected"] == TASKS  # one per challenge, not one per run
    assert [(c["task_id"], c["repeat"]) for c in doc["tasks"]][:3] == [("isles22", 1), ("isles22", 2),
                                                                                 ("isles22", 3)]
    per_task = {t: [c["percentile"] if c["status"] == "ok" else 0.0 for c in doc["tasks"]
                    if c["task_id"] == t] for t in TASKS}
    assert doc["score"] == pytest.approx(sum(sum(v) / 3 for v in per_task.values()) / 3)
    # the FAIL of repeat 1 and the ERROR of repeat 2 are counted although their siblings are ok
    assert doc["n_fail"] == 1 and doc["n_error"] == 1


def test_an_error_or_fail_is_never_hidden_by_an_ok_sibling():
    doc = _repeated_session()
    rows = {row["task_id"]: row for row in doc["aggregate"][0]["tasks"]}
    assert rows["ldct-iqa"]["counts"] == {"ok": 2, "error": 1}
    assert rows["topcow-cta-det"]["counts"] == {"invalid": 1, "ok": 2}
    lines = terminal_lines(doc, width=160)
    assert any("ldct-iqa: mean" in line and line.endswith("2 ok, 1 ERROR") for line in lines), lines
    assert any("topcow-cta-det: mean" in line and line.endswith("2 ok, 1 FAIL (invalid)") for line in lines), lines
    assert sum(1 for line in lines if line.startswith("ldct-iqa r")) == 3  # each run its own row
    assert lines[-1].endswith("over 3 task(s) (9 runs, 3 repeats each), 1 FAIL, 1 ERROR (harness, not the agent)")
    text = markdown(doc, reference=None)
    assert "## Repeats" in text and "| sample | ldct\\-iqa | 3 |" in text and "2 ok, 1 ERROR |" in text
    assert "\\(repeat 2\\)" in text  # each run its own row (parentheses escaped as Markdown text)


def test_merging_repeats_gives_the_numbers_of_merging_sessions():
    repeated, singles = _repeated_session(), _single_sessions()
    by_sessions = merge_reports(singles)["agents"][0]
    by_repeats = merge_reports([repeated])["agents"][0]
    aggregate = repeated["aggregate"][0]
    for key in ("scores", "mean", "sem", "ci"):
        assert by_repeats[key] == by_sessions[key] == aggregate[key], key
    assert by_repeats["n_runs"] == by_sessions["n_runs"] == aggregate["n_repeats"] == 3
    for a, b, c in zip(by_sessions["tasks"], by_repeats["tasks"], aggregate["tasks"], strict=True):
        for key in ("task_id", "n_runs", "percentiles", "mean_percentile", "sem", "ci", "statuses"):
            assert a[key] == b[key] == c[key], (a["task_id"], key)
    assert by_sessions["sem"] is not None and by_sessions["ci"][0] < by_sessions["ci"][1]  # a real spread
    # the session's own headline is the mean over its challenges' means: here, with every repeat of every
    # challenge present, the mean of the repeats' scores as well
    assert repeated["score"] == pytest.approx(by_sessions["mean"])


def test_a_session_without_repeats_is_unchanged():
    doc = _single_sessions()[0]
    assert "repeats" not in doc and "aggregate" not in with_aggregate(doc)
    assert all("repeat" not in c for c in doc["tasks"])
    assert split_repeats(doc) == [doc]


def test_each_repeat_links_to_its_own_run_page():
    from pytest_rexmle.report.html import compute_section

    doc = _repeated_session()
    for rec in doc["tasks"]:
        rec["run_dir"] = f"/runs/{rec['task_id']}/r{rec['repeat']}"
    doc["compute"] = {"runs": {f"ldct-iqa-r{r}": {"wall_seconds": 1.0, "runtime": "local"} for r in (1, 2, 3)}}
    html = "".join(compute_section([doc]))
    for r in (1, 2, 3):
        assert f"file:///runs/ldct-iqa/r{r}/run.html" in html


def test_several_agents_are_aggregated_apart():
    records = []
    for r in (1, 2):
        for agent, how in (("a", 0.2 * r), ("b", "fail" if r == 2 else 0.9)):
            rec = failed("isles22", agent) if how == "fail" else graded("isles22", how, agent)
            rec.repeat = r
            records.append(rec)
    doc = build_report(records, agent="a,b", agent_options={}, settings=SETTINGS, run_id="S", repeats=2)
    doc["agents"] = {"a": {"agent_options": {}}, "b": {"agent_options": {"model": "x"}}}
    with_aggregate(doc)
    assert doc["selected"] == ["isles22", "isles22"] and doc["n_fail"] == 1  # one per (challenge, agent)
    by_agent = {entry["agent"]: entry for entry in doc["aggregate"]}
    assert sorted(by_agent) == ["a", "b"] and by_agent["a"]["n_repeats"] == by_agent["b"]["n_repeats"] == 2
    assert by_agent["a"]["tasks"][0]["counts"] == {"ok": 2}
    assert by_agent["b"]["tasks"][0]["counts"] == {"ok": 1, "invalid": 1}
    a = [rec["percentile"] for rec in doc["tasks"] if rec["agent"] == "a"]
    assert by_agent["a"]["mean"] == pytest.approx(sum(a) / 2)


def test_a_selection_of_some_repeats_says_up_to():
    records = [_result("isles22", 0.3, 2), _result("ldct-iqa", 0.3, 1), _result("ldct-iqa", 0.5, 2)]
    doc = with_aggregate(build_report(records, agent="sample", agent_options={}, settings=SETTINGS, run_id="S",
                                      repeats=3))
    assert terminal_lines(doc)[-1].endswith("over 2 task(s) (3 runs, up to 3 repeats each), 0 FAIL")
    rows = {row["task_id"]: row for row in doc["aggregate"][0]["tasks"]}
    assert rows["ldct-iqa"]["counts"] == {"ok": 2}
    # the repeat left out is not counted (merged per task, as rexmle report merges sessions): never a FAIL, and
    # the repeats table agrees with the score, which averages the repeats that ran
    assert rows["isles22"]["counts"] == {"ok": 1}
    assert any(line.startswith("  isles22: mean") and line.endswith("1 ok") for line in terminal_lines(doc))
