"""Merged reports do what docs/reading-the-report.md says (issue #40.3): sessions of different selections are
merged per task, and a task a partial session never selected is neither a FAIL nor a 0 for it.

Real sessions of the deterministic ``sample`` agent on synthetic twins: one full session (its report copied
as two more identical sessions, which is what two more runs of that agent write) and two ``-k`` sessions.
The merge must give the full sessions' own score."""

from __future__ import annotations

import argparse
import json

import numpy  # noqa: F401  (imported before pytester snapshots sys.modules: it cannot load twice)
import pytest

from pytest_rexmle.report.merge import MergedReport, add_report_arguments, merge_reports, run_report
from pytest_rexmle.report.render import pct

from ..conftest import report_json
from .test_merge import _record, _report


def _args(*argv: str) -> argparse.Namespace:
    return add_report_arguments(argparse.ArgumentParser()).parse_args(list(argv))


def test_full_and_k_sessions_merge_to_the_full_score(bench, tmp_path):
    bench("--agent=sample", "--rexmle-judge=none").assert_outcomes(passed=20)
    full = report_json(bench.path)
    bench("--agent=sample", "--rexmle-judge=none", "-k", "isles22 or panther").assert_outcomes(passed=3)
    k1 = report_json(bench.path)
    bench("--agent=sample", "--rexmle-judge=none", "-k", "topcow-cta-cls").assert_outcomes(passed=1)
    k2 = report_json(bench.path)
    assert full["partial"] is False and k1["selected"] == ["isles22", "panther-t1", "panther-t2"]
    # the agent is deterministic: the -k sessions repeat the full session's percentiles on what they selected
    by_id = {r["task_id"]: r["percentile"] for r in full["tasks"]}
    assert all(r["percentile"] == by_id[r["task_id"]] for r in k1["tasks"] + k2["tasks"])
    folders = []
    for i, doc in enumerate([full, {**full, "run_id": full["run_id"] + "-b"}, {**full, "run_id": full["run_id"] + "-c"},
                             k1, k2]):
        folder = tmp_path / f"s{i}"
        folder.mkdir()
        (folder / "rexmle-report.json").write_text(json.dumps(doc))
        folders.append(str(folder))
    out = tmp_path / "merged"
    assert run_report(_args(*folders, "--out", str(out), "--reference", "none")) == 0
    merged = json.loads((out / "rexmle-merged.json").read_text())
    MergedReport.check(merged)
    (agent,) = merged["agents"]
    assert agent["n_runs"] == 5 and agent["mean"] == pytest.approx(full["score"], abs=1e-12)
    assert agent["n_fail"] == [0, 0, 0, 0, 0] and agent["n_tasks"] == [20, 20, 20, 3, 1]
    assert all("not run" not in row["statuses"] and row["n_fail"] == 0 for row in agent["tasks"])
    rows = {row["task_id"]: row for row in agent["tasks"]}
    assert rows["isles22"]["n_runs"] == 4 and rows["topcow-cta-cls"]["n_runs"] == 4 and rows["dentex"]["n_runs"] == 3
    md = (out / "rexmle-merged.md").read_text()
    assert f"| {pct(full['score'])} |" in md, md


def test_equal_selections_keep_the_run_scores_statistics():
    """Every run selected the same challenges: the score is the mean of the run scores, the standard error theirs."""
    docs = [_report("a", "r1", [_record("isles22", 0.5), _record("seg-a", 0.25)]),
            _report("a", "r2", [_record("isles22", 0.7), _record("seg-a", 0.0, "invalid")]),
            _report("a", "r3", [_record("isles22", 0.3), _record("seg-a", 0.0, "invalid")])]
    (a,) = merge_reports(docs)["agents"]
    assert a["same_selection"] is True and a["scores"] == pytest.approx([0.375, 0.35, 0.15])
    assert a["mean"] == pytest.approx(0.875 / 3)
    # sample sd of (0.375, 0.35, 0.15) is 0.123322; / sqrt(3) = 0.0712004
    assert a["sem"] == pytest.approx(0.0712004, abs=1e-6) and a["n_fail"] == [0, 1, 1]
