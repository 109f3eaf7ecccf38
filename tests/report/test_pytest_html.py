"""pytest-html's results table shows each challenge's percentile, status and key metrics (it showed the
pass/fail outcome only), and a session without pytest-html is unaffected."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from ..conftest import report_json


def _table(path: Path) -> tuple[list[str], dict[str, list[str]]]:
    """The header cells and each test's row cells, as pytest-html stored them in its page."""
    page = path.read_text()
    blob = json.loads(html.unescape(re.search(r'data-jsonblob="([^"]*)"', page).group(1)))
    header = re.findall(r"<th[^>]*>[^<]*</th>", page.split('id="results-table-head"', 1)[1].split("</thead>", 1)[0])
    rows = {test_id.rsplit("::", 1)[-1]: runs[0]["resultsTableRow"] for test_id, runs in blob["tests"].items()}
    return header, rows


def _text(cell: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", cell))


def test_results_table_has_percentile_status_and_key_metrics(bench, needs_bwrap):
    result = bench("--agent=sample", "-k", "ldct-iqa or isles22", "--rexmle-judge=none", "--html=page.html",
                   "--self-contained-html")
    result.assert_outcomes(passed=2)
    header, rows = _table(bench.path / "page.html")
    assert [_text(c) for c in header[:5]] == ["Result", "Test", "Percentile", "Status", "Key metrics"]
    assert 'data-column-type="percentile"' in header[2] and "sortable" in header[2]
    by_id = {c["task_id"]: c for c in report_json(bench.path)["tasks"]}
    assert sorted(rows) == ["test_task[isles22]", "test_task[ldct-iqa]"]
    for name, cells in rows.items():
        record = by_id[name.split("[")[1].rstrip("]")]
        assert len(cells) == len(header)
        assert _text(cells[2]) == f"{record['percentile']:.3f}"
        assert _text(cells[3]) == record["status"] == "ok"
        shown = dict(pair.split("=") for pair in _text(cells[4]).split(", "))
        assert list(shown) == record["ranking_metrics"][:3]
        for key, text in shown.items():
            assert float(text) == round(record["metrics"][key], 4) or abs(float(text) - record["metrics"][key]) < 1e-3
    assert _text(rows["test_task[isles22]"][4]).startswith("dice=")


def test_a_session_without_pytest_html_is_unaffected(bench, needs_bwrap):
    """The columns' hooks are pytest-html's own hooks, optional here: with its plugins left out, pytest would
    refuse a hook it does not know (PluginValidationError) unless it is marked optional."""
    result = bench("--agent=sample", "-k", "ldct-iqa", "--rexmle-judge=none", "-p", "no:html", "-p", "no:html_fixtures")
    result.assert_outcomes(passed=1)
    assert "PluginValidationError" not in result.stdout.str() + result.stderr.str()
    plugins = [line for line in result.stdout.lines if line.startswith("plugins:")]
    assert plugins and "html-" not in plugins[0]  # pytest-html was not loaded


def test_a_challenge_without_result_has_empty_cells(pytester, shared_cache, monkeypatch):
    """A skipped challenge (its data not prepared) keeps the row as wide as the header, with empty cells."""
    monkeypatch.setenv("REXMLE_CACHE_DIR", str(shared_cache))
    empty = pytester.path / "no-data"
    empty.mkdir()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--agent=sample", "--rexmle-data=prepared",
                                           f"--rexmle-data-dir={empty}", "-k", "ldct-iqa", "--html=page.html",
                                           timeout=300)
    result.assert_outcomes(skipped=1)
    header, rows = _table(pytester.path / "page.html")
    (cells,) = rows.values()
    assert len(cells) == len(header) and _text(cells[0]) == "Skipped"
    assert [_text(c) for c in cells[2:5]] == ["", "", ""]
