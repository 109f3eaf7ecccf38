"""The plugin seen from the outside: collection, selection, outcomes, reports, JUnit, resume."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_rexmle.report.junit import read_cases
from pytest_rexmle.task import registry

from .conftest import AGENTS, REPO, report_dir, report_json, run_folders
from .report.test_junit import xunit2_violations
from .report.test_pytest_html import _table as html_table
from .report.test_pytest_html import _text as html_text

ALL_IDS = sorted(t.id for t in registry())


def collected_ids(result) -> list[str]:
    return [line.split("[", 1)[1].rstrip("]") for line in result.outlines if "test_task[" in line]


def test_no_agent_means_no_benchmark_items(bench):
    bench.path.joinpath("test_plain.py").write_text("def test_x():\n    assert 1 + 1 == 2\n")
    result = bench("--collect-only", "-q")
    assert collected_ids(result) == []
    result.stdout.fnmatch_lines(["test_plain.py::test_x"])


def test_agent_collects_all_20_in_sorted_order(bench):
    result = bench("--agent=sample", "--collect-only", "-q")
    assert collected_ids(result) == ALL_IDS
    assert len(ALL_IDS) == 20


#: one pytest session each: the fast lane keeps one marker and one keyword (alias) selection
@pytest.mark.parametrize("selection, expected", [
    pytest.param(["-k", "topcow"], ["topcow-cta-cls", "topcow-cta-det", "topcow-cta-seg", "topcow-mra-cls",
                                    "topcow-mra-det", "topcow-mra-seg"], marks=pytest.mark.slow),
    pytest.param(["-m", "segmentation and cta"], ["seg-a", "topbrain-cta-seg", "topcow-cta-seg"],
                 marks=pytest.mark.slow),
    (["-m", "cta and detection"], ["topcow-cta-det"]),
    pytest.param(["-m", "pathology and detection"], ["puma-t1-nuclei-det", "puma-t2-nuclei-det"],
                 marks=pytest.mark.slow),
    pytest.param(["-m", "quality_assessment or enhancement"], ["ldct-iqa", "usenhance"], marks=pytest.mark.slow),
    (["-k", "topcow-track1-task2 or neurips-cellseg"], ["cellseg", "topcow-cta-det"]),  # reference ids as aliases
])
def test_selection_by_keyword_and_marker(bench, selection, expected):
    result = bench("--agent=sample", "--collect-only", "-q", *selection)
    assert collected_ids(result) == expected


def test_markers_are_registered(bench):
    result = bench("--markers")
    for marker in ("segmentation", "detection", "classification", "quality_assessment", "enhancement",
                   "ultrasound", "ct", "cta", "mra", "mri", "xray", "pathology", "microscopy"):
        result.stdout.fnmatch_lines([f"@pytest.mark.{marker}:*"])


@pytest.mark.slow  # an xdist session of three sandboxed runs
def test_three_tasks_under_xdist_with_junit_and_report(bench, needs_bwrap):
    result = bench("--agent=sample", "-n", "2", "-k", "ldct-iqa or topcow-cta-det or isles22", "--junitxml=out.xml",
                   "--html=page.html")
    result.assert_outcomes(passed=3)
    props = read_cases(bench.path / "out.xml")
    assert xunit2_violations(bench.path / "out.xml") == []  # the cases from xdist workers too (pytest's xunit2)
    assert sorted(props) == ["test_task[isles22]", "test_task[ldct-iqa]", "test_task[topcow-cta-det]"]
    for p in props.values():
        assert p["status"] == "ok"
        assert 0.0 <= float(p["percentile"]) <= 1.0
        assert "mean_position" in p
    # every JUnit position is the leaderboard position of the JUnit metric value
    from pytest_rexmle.leaderboard import Leaderboard
    from pytest_rexmle.scoring.ranking import position

    for task_id in ("isles22", "ldct-iqa", "topcow-cta-det"):
        task, p = registry().get(task_id), props[f"test_task[{task_id}]"]
        board = Leaderboard.read(task.leaderboard_path)
        for m in task.ranking_metrics:
            assert int(p[f"position.{m.key}"]) == position(float(p[f"metric.{m.key}"]), board.values[m.key],
                                                           m.higher_is_better)
    # ldct-iqa: constant scores -> every correlation 0 -> score 0, below all 6 humans -> position 7
    assert float(props["test_task[ldct-iqa]"]["metric.score"]) == 0.0
    doc = report_json(bench.path)
    assert doc["selected"] == ["isles22", "ldct-iqa", "topcow-cta-det"]
    assert doc["partial"] is True and doc["n_fail"] == 0
    percentiles = [c["percentile"] for c in doc["tasks"]]
    # pytest-html's Percentile column, from the results the workers sent
    _, rows = html_table(bench.path / "page.html")
    assert {name: html_text(cells[2]) for name, cells in rows.items()} == \
        {f"test_task[{c['task_id']}]": f"{c['percentile']:.3f}" for c in doc["tasks"]}
    assert doc["score"] == pytest.approx(sum(percentiles) / 3)
    assert (report_dir(bench.path) / "rexmle-report.md").read_text().count("| ok |") == 3
    result.stdout.fnmatch_lines(["*ReX-MLE results*", "*partial score:*over 3 task(s), 0 FAIL*"])


def _competitions_copy(tmp_path: Path, **overrides: dict) -> Path:
    """A copy of the competitions' task folders (for ``REXMLE_COMPETITIONS_DIR``) with some task.yaml fields
    replaced (None removes the field); the code stays the package's."""
    import yaml

    root = tmp_path / "competitions"
    shutil.copytree(REPO / "pytest_rexmle" / "competitions", root,
                    ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    for task_id, fields in overrides.items():
        (path,) = root.glob(f"*/tasks/{task_id}/task.yaml")
        data = yaml.safe_load(path.read_text())
        for key, value in fields.items():
            if value is None:
                data.pop(key, None)
            else:
                data[key] = value
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    return root


def test_task_without_grader_skips_and_counts_as_fail(bench, needs_bwrap, tmp_path, monkeypatch):
    monkeypatch.setenv("REXMLE_COMPETITIONS_DIR", str(_competitions_copy(tmp_path, dentex={"grader": None})))
    result = bench("--agent=sample", "-k", "ldct-iqa or dentex", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*dentex: grader not implemented yet*"])
    doc = report_json(bench.path)
    by_id = {c["task_id"]: c for c in doc["tasks"]}
    assert by_id["dentex"]["status"] == "missing" and by_id["dentex"]["percentile"] == 0.0
    assert "not run" in by_id["dentex"]["reason"]
    assert doc["score"] == pytest.approx(by_id["ldct-iqa"]["percentile"] / 2)


def test_prepared_data_missing_skips_with_the_prepare_command(bench, tmp_path):
    empty = tmp_path / "no-data"
    result = bench("--agent=sample", "--rexmle-data=prepared", f"--rexmle-data-dir={empty}", "-k", "ldct-iqa", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([f"*rexmle prepare ldct-iqa --data-dir {empty}*"])


def test_min_percentile_turns_a_graded_item_into_a_failure(bench, needs_bwrap):
    """A percent, as the reports print percentiles; and the report says so, rather than a silent ok."""
    result = bench("--agent=sample", "-k", "ldct-iqa", "--rexmle-min-percentile=50%")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*percentile 0.0% is below --rexmle-min-percentile 50%*",
                                 "ldct-iqa*ok < min*",
                                 "*0 FAIL, 1 below --rexmle-min-percentile 50.0% (failed in pytest)"])
    doc = report_json(bench.path)
    assert doc["settings"]["min_percentile"] == 0.5 and doc["n_below_min_percentile"] == 1
    assert doc["tasks"][0]["status"] == "ok" and doc["tasks"][0]["below_min_percentile"] is True


@pytest.mark.parametrize("value, message", [
    ("0.4", "*--rexmle-min-percentile 0.4 is ambiguous: it is a percent now (it used to be a fraction); write 40 "
            "for 40% or 0.4% for 0.4 percent*"),
    ("150", "*--rexmle-min-percentile must be a percent between 0 and 100, got '150'*"),
    ("forty", "*--rexmle-min-percentile expects a percent such as 40 or 40%, got 'forty'*"),
    ("0", None), ("40", None), ("40%", None), ("0.4%", None)])
def test_min_percentile_is_a_percent_and_an_ambiguous_fraction_is_refused(bench, value, message):
    result = bench("--agent=sample", f"--rexmle-min-percentile={value}", "--collect-only", "-q", "-k", "ldct-iqa")
    if message is None:
        assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    else:
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([message])
        assert "Traceback" not in result.stderr.str()


def test_crashing_agent_is_a_fail_with_exit_code_and_stderr(bench, needs_bwrap):
    result = bench("--agent=command", f"--agent-option=dir={AGENTS / 'crasher'}", "--agent-option=cmd=python agent.py",
                   "-k", "ldct-iqa")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*FAIL [[]missing[]] agent exited with code 3; stderr ends with: crasher: giving up*"])
    doc = report_json(bench.path)
    assert doc["tasks"][0]["status"] == "missing" and doc["n_fail"] == 1 and doc["score"] == 0.0


def test_invalid_submission_is_a_fail_naming_the_rule(bench, needs_bwrap):
    cmd = "printf 'image_id,quality_score\\n1000,1.0\\n' > $REXMLE_SUBMISSION_DIR/submission.csv"
    result = bench("--agent=command", f"--agent-option=cmd={cmd}", "-k", "ldct-iqa")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*FAIL [[]invalid[]] submission.csv: missing test case(s) '1001'*"])


def test_grader_error_is_an_error_not_a_failure(bench, needs_bwrap, tmp_path, shared_cache):
    """A broken answers file is the harness's fault: pytest 'error', status 'error' in the report."""
    from pytest_rexmle.data.synthetic import ensure_synthetic

    twin = ensure_synthetic(registry().get("ldct-iqa"), shared_cache)
    data_dir = tmp_path / "data"
    shutil.copytree(twin.root, data_dir / "ldct-iqa")
    answers = data_dir / "ldct-iqa" / "private" / "answers.csv"
    answers.write_text(answers.read_text().replace("\n1000,", "\n1000,not-a-number-", 1))
    result = bench("--agent=sample", "--rexmle-data=prepared", f"--rexmle-data-dir={data_dir}", "-k", "ldct-iqa")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*grader error: ValueError*"])
    record = report_json(bench.path)["tasks"][0]
    assert record["status"] == "error" and record["percentile"] == 0.0 and "Traceback" in record["traceback"]


def test_resume_reuses_finished_results(bench, needs_bwrap):
    first = bench("--agent=sample", "-k", "ldct-iqa", "--rexmle-resume")
    first.assert_outcomes(passed=1)
    assert len(run_folders(bench.path, "ldct-iqa")) == 1
    again = bench("--agent=sample", "-k", "ldct-iqa", "--rexmle-resume")
    again.assert_outcomes(passed=1)
    assert len(run_folders(bench.path, "ldct-iqa")) == 1, "a finished result must be reused, not re-run"
    fresh = bench("--agent=sample", "-k", "ldct-iqa")
    fresh.assert_outcomes(passed=1)
    assert len(run_folders(bench.path, "ldct-iqa")) == 2, "without --rexmle-resume every session runs anew"
    other = bench("--agent=sample", "-k", "ldct-iqa", "--rexmle-resume", "--rexmle-time-limit=600")
    other.assert_outcomes(passed=1)
    assert len(run_folders(bench.path, "ldct-iqa")) == 3, "different options must not reuse a result"


def test_resume_finds_runs_of_the_old_item_name(bench, needs_bwrap):
    """A campaign started while the benchmark's item was ``test_challenge[<task>]`` resumes as ``test_task[<task>]``."""
    bench.path.joinpath("conftest.py").write_text(
        "import pytest\n\n\n"
        "@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_collection_modifyitems(items):\n"
        "    for item in items:  # the benchmark's item as it was named before (pytest's NodeId: pinned)\n"
        "        item.name = item.name.replace('test_task[', 'test_challenge[')\n"
        "        item._id = type(item._id).parse(item.nodeid.replace('::test_task[', '::test_challenge['))\n")
    old = bench("--agent=sample", "-k", "ldct-iqa", "--rexmle-resume", "-v")
    old.assert_outcomes(passed=1)
    old.stdout.fnmatch_lines(["*::test_challenge?ldct-iqa? PASSED*"])
    bench.path.joinpath("conftest.py").unlink()
    again = bench("--agent=sample", "-k", "ldct-iqa", "--rexmle-resume", "-v")
    again.assert_outcomes(passed=1)
    again.stdout.fnmatch_lines(["*::test_task?ldct-iqa? PASSED*"])
    assert len(run_folders(bench.path, "ldct-iqa")) == 1, "the run of the old item name must be resumed, not re-run"


def test_result_hook_is_called(bench, needs_bwrap):
    bench.path.joinpath("conftest.py").write_text(
        "def pytest_rexmle_result(result, item):\n"
        "    open('hook.txt', 'a').write(f'{result.task_id} {result.status}\\n')\n")
    bench("--agent=sample", "-k", "ldct-iqa").assert_outcomes(passed=1)
    assert bench.path.joinpath("hook.txt").read_text() == "ldct-iqa ok\n"


def test_unknown_agent_is_a_usage_error(bench):
    result = bench("--agent=nope", "-k", "ldct-iqa")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown agent 'nope'; available: aide, claude-code, codex, command, gemini-cli, mini-swe-agent, ml-master, rd-agent, sample*"])


def test_command_agent_requires_cmd(bench):
    result = bench("--agent=command", "-k", "ldct-iqa")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*agent 'command' needs --agent-option cmd=...*"])


def test_ini_options_are_equivalent(bench, needs_bwrap):
    bench.path.joinpath("pytest.ini").write_text("[pytest]\nrexmle_agent = sample\nrexmle_data = synthetic\n")
    result = bench("-k", "ldct-iqa")
    result.assert_outcomes(passed=1)
