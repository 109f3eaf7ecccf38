"""Suspected leaks (issue 17.5): a submission that copies the answers is flagged, the baseline is not.

One task of each kind (segmentation, detection, classification, regression) on synthetic twins, the
``beats-humans`` rule on crafted metrics, the egress reference, and a whole session in which the
submission is replaced by the answers: result.json, JUnit, terminal and reports carry the flag.
"""

from __future__ import annotations

import json

import pytest

from pytest_rexmle.data.synthetic import ensure_synthetic
from pytest_rexmle.graders.base import load_grader
from pytest_rexmle.leaderboard import Leaderboard
from pytest_rexmle.report.junit import read_cases
from pytest_rexmle.scoring import leaks
from pytest_rexmle.scoring.grading import grade_submission, result_from_grade
from pytest_rexmle.scoring.ranking import rank
from pytest_rexmle.scoring.result import TaskResult
from pytest_rexmle.task import registry

from .conftest import REPO, report_dir, report_json, run_folders

KINDS = {"isles22": "segmentation", "topcow-cta-det": "detection", "puma-t1-nuclei-det": "detection",
         "topcow-cta-cls": "classification", "ldct-iqa": "regression"}


def _graded(task, data, tmp_path, kind: str, run_dir=None):
    grader = load_grader(task)
    out = tmp_path / kind
    if kind == "baseline":
        grader.write_baseline(data.public, out)
    else:  # the agent copied the private answers into its submission
        grader.write_perfect(data.private, out)
    return result_from_grade(task, grade_submission(task, out, data.private), run_dir=run_dir)


@pytest.mark.parametrize("task_id", sorted(KINDS))
def test_copied_answers_are_flagged_and_the_baseline_is_not(task_id, tmp_path, shared_cache):
    task = registry().get(task_id)
    data = ensure_synthetic(task, shared_cache)
    perfect = leaks.perfect_metrics(task, data.private, tmp_path / "cache", data.answers_id)
    assert set(perfect) >= {m.key for m in task.ranking_metrics}
    # cached per task version and answers: the second call reads the file
    cached = tmp_path / "cache" / leaks.REFERENCE_DIR / f"{task.id}-v{task.version}-{data.answers_id}.json"
    assert cached.is_file()
    assert leaks.perfect_metrics(task, data.private, tmp_path / "cache", data.answers_id) == pytest.approx(perfect)

    copied = _graded(task, data, tmp_path, "copy")
    leak = leaks.check(task, copied, perfect)
    assert leak is not None and leaks.ANSWERS_REPRODUCED in leaks.summary(leak), (task_id, copied.metrics)
    assert leak["rules"][0]["detail"].startswith("every ranking metric within 0.001")
    assert leak["egress"] is None

    baseline = _graded(task, data, tmp_path, "baseline")
    assert baseline.status == "ok"
    assert leaks.check(task, baseline, perfect) is None, (task_id, baseline.metrics)


def test_beats_humans_needs_a_wide_margin_on_most_ranked_metrics():
    task = registry().get("isles22")  # dice, lesion_f1 (higher), lesion_count_diff, abs_volume_diff (lower)
    board = Leaderboard.read(task.leaderboard_path)
    best = {m.key: board.best(m.key, m.higher_is_better) for m in task.ranking_metrics}
    # humans: dice 0.7758-0.7869 (spread floored at 5 % of 0.7869), lesion_f1 0.8043-0.8246 (likewise)
    wide = {"dice": 0.95, "lesion_f1": 0.97, "lesion_count_diff": 0.5, "abs_volume_diff": best["abs_volume_diff"]}
    detail = leaks.beats_humans(task, wide, board)
    assert detail is not None and detail.count("beats the best human") == 3
    # a best-human-level result, and one that is far better on a single (scale-bound) metric, are not flagged
    assert leaks.beats_humans(task, dict(best), board) is None
    assert leaks.beats_humans(task, {**best, "abs_volume_diff": 0.0, "lesion_count_diff": 0.0}, board) is None
    # a hair above the best human on every metric is within the margin
    hair = {"dice": best["dice"] + 0.01, "lesion_f1": best["lesion_f1"] + 0.01,
            "lesion_count_diff": best["lesion_count_diff"] - 0.05, "abs_volume_diff": best["abs_volume_diff"] - 0.1}
    assert leaks.beats_humans(task, hair, board) is None


def test_beats_humans_never_fires_on_synthetic_twins(tmp_path, shared_cache):
    """Synthetic twins are not comparable with the humans: beating them there is expected (issue #40.4). The
    answers rule still applies there, and the flag points to a docs page and anchor that exist."""
    task = registry().get("isles22")
    wide = {"dice": 0.95, "lesion_f1": 0.97, "lesion_count_diff": 0.5, "abs_volume_diff": 0.5}
    result = TaskResult.graded(task, wide, rank(task, wide))
    assert leaks.summary(leaks.check(task, result, None)) == leaks.BEATS_HUMANS
    assert leaks.check(task, result, None, synthetic=True) is None
    data = ensure_synthetic(task, shared_cache)
    copied = _graded(task, data, tmp_path, "copy")
    perfect = leaks.perfect_metrics(task, data.private, tmp_path / "cache", data.answers_id)
    assert leaks.summary(leaks.check(task, copied, perfect, synthetic=True)) == leaks.ANSWERS_REPRODUCED
    page, anchor = leaks.DOCS.split("#")
    headings = [line.lstrip("#").strip().lower().replace(" ", "-") for line in (REPO / page).read_text().splitlines()
                if line.startswith("#")]
    assert anchor in headings


def test_egress_log_is_referenced_when_present(tmp_path, shared_cache):
    task = registry().get("ldct-iqa")
    data = ensure_synthetic(task, shared_cache)
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"egress": [
        {"host": "zenodo.org", "port": 443, "allowed": False}, {"host": "pypi.org", "port": 443, "allowed": True},
        {"host": "huggingface.co", "port": 443, "allowed": True}]}))
    copied = _graded(task, data, tmp_path, "copy", run_dir=str(run))
    leak = leaks.check(task, copied, leaks.perfect_metrics(task, data.private, tmp_path / "cache", data.answers_id))
    assert leak["egress"] == "run.json egress: 3 request(s), allowed hosts: huggingface.co, pypi.org"
    (run / "run.json").write_text("{}")  # no gateway: nothing to point at
    assert leaks.egress_note(run) is None
    assert leaks.check(task, copied, leaks.perfect_metrics(task, data.private, tmp_path / "cache",
                                                           data.answers_id))["egress"] is None


COPYING_CONFTEST = '''
import shutil

import pytest

from pytest_rexmle.graders.base import load_grader


@pytest.fixture
def rexmle_submission(rexmle_agent_run, rexmle_task, rexmle_data):
    """Stands in for an agent that reached the private answers and copied them into its submission."""
    submission = rexmle_agent_run.folder.submission
    shutil.rmtree(submission)
    load_grader(rexmle_task).write_perfect(rexmle_data.private, submission)
    return submission
'''


@pytest.mark.slow  # a whole session; the leak check's logic is tested above
def test_session_flags_a_copied_submission_everywhere(bench, needs_bwrap):
    bench.path.joinpath("conftest.py").write_text(COPYING_CONFTEST)
    result = bench("--agent=sample", "-k", "ldct-iqa", "--junitxml=junit.xml")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["suspected leak: ldct-iqa: answers-reproduced* (run.json egress: *)",
                                 f"  what a suspected leak means: {leaks.DOCS}"])
    (folder,) = run_folders(bench.path, "ldct-iqa")
    record = json.loads((folder / "result.json").read_text())
    assert record["suspected_leak"]["rules"][0]["rule"] == "answers-reproduced"
    assert report_json(bench.path)["tasks"][0]["suspected_leak"] == record["suspected_leak"]
    props = read_cases(bench.path / "junit.xml")["test_task[ldct-iqa]"]
    assert props["suspected_leak"].startswith("answers-reproduced")
    assert "⚠ suspected leak (docs/security/host-side.md#suspected-leaks)" in (
        report_dir(bench.path) / "rexmle-report.md").read_text()
    page = (report_dir(bench.path) / "rexmle-report.html").read_text()
    assert "Suspected leak" in page and "README" not in page and leaks.DOCS in page


@pytest.mark.slow  # a whole session; the leak check's logic is tested above
def test_session_with_the_baseline_is_not_flagged(bench, needs_bwrap):
    result = bench("--agent=sample", "-k", "ldct-iqa", "--junitxml=junit.xml")
    result.assert_outcomes(passed=1)
    assert "suspected leak" not in result.stdout.str()
    (folder,) = run_folders(bench.path, "ldct-iqa")
    assert json.loads((folder / "result.json").read_text())["suspected_leak"] is None
    props = set(read_cases(bench.path / "junit.xml")["test_task[ldct-iqa]"])
    assert "suspected_leak" not in props and "percentile" in props
