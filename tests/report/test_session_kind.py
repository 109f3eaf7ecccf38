"""A real session says what it graded (synthetic or real) in the terminal, JUnit, Markdown, HTML and the
index; a challenge skipped for missing data is counted as skipped, as pytest counts it, not as a FAIL."""

from __future__ import annotations

from pytest_rexmle.report.junit import read_cases as _junit

from ..conftest import report_dir, report_json


def test_skipped_for_missing_data_is_not_a_fail(pytester, shared_cache, monkeypatch):
    monkeypatch.setenv("REXMLE_CACHE_DIR", str(shared_cache))
    empty = pytester.path / "no-data"
    empty.mkdir()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--agent=sample", "--rexmle-data=prepared",
                                           f"--rexmle-data-dir={empty}", "-k", "ldct-iqa", "--junitxml=out.xml",
                                           timeout=300)
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*data: real*",
                                 "partial score: 0.0% over 1 task(s), 0 FAIL, 1 skipped (counted as 0)"])
    doc = report_json(pytester.path)
    assert doc["skipped"] == ["ldct-iqa"] and doc["n_fail"] == 0 and doc["data_kind"] == "real"
    assert _junit(pytester.path / "out.xml")["test_task[ldct-iqa]"]["data"] == "real"
    md = (report_dir(pytester.path) / "rexmle-report.md").read_text()
    assert "| skipped | SKIPPED:" in md and "0 FAIL" in md and "1 skipped" in md
    index = (pytester.path / ".rexmle" / "report" / "index.md").read_text()
    assert "| real |" in index


def test_synthetic_session_is_marked_everywhere(bench):
    result = bench("--agent=sample", "-k", "ldct-iqa", "--rexmle-judge=none", "--junitxml=out.xml")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["data: SYNTHETIC twins*", "partial score:*over 1 task(s), 0 FAIL"])
    assert _junit(bench.path / "out.xml")["test_task[ldct-iqa]"]["data"] == "synthetic"
    doc = report_json(bench.path)
    assert doc["data_kind"] == "synthetic" and "project's split" not in doc["note"]
    folder = report_dir(bench.path)
    md = (folder / "rexmle-report.md").read_text()
    assert "**synthetic twins**" in md and "project's split" not in md
    page = (folder / "rexmle-report.html").read_text()
    assert "Synthetic data." in page and "project's split" not in page and "(published)" in page
    index = (bench.path / ".rexmle" / "report" / "index.html").read_text()
    assert "<td class='data synthetic'>synthetic</td>" in index
