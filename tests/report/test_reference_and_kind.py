"""How does my agent compare? The published agents, positions among the humans, "not run", and the data
kind in every view (issue 20 items 3–5). HTML is parsed, not searched as a string."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from pytest_rexmle.leaderboard import Leaderboard
from pytest_rexmle.report import archive
from pytest_rexmle.report.html import render_html
from pytest_rexmle.report.merge import MergedReport, merge_reports
from pytest_rexmle.report.merge import markdown as merged_markdown
from pytest_rexmle.report.model import NOTE, SYNTHETIC_NOTE, build_report
from pytest_rexmle.report.reference import PAPER_RESULTS, paper_agents, paper_results, with_reference
from pytest_rexmle.report.render import markdown, score_line, terminal_lines
from pytest_rexmle.task import registry

from ..reference import reference_sha256, sha256
from .helpers import graded, session


class Tables(HTMLParser):
    """Every <table> of a page as rows of cell texts, keyed by the table's class."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.row_classes: dict[str, list[str]] = {}
        self._table: str | None = None
        self._cell: list[str] | None = None
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self._table = attrs.get("class", "")
            self.tables[self._table] = []
            self.row_classes[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
            self.row_classes[self._table].append(attrs.get("class") or "")
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []
        elif tag == "br" and self._cell is not None:
            self._cell.append(" ")

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[self._table][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def parse(page: str) -> Tables:
    parser = Tables()
    parser.feed(page)
    return parser


IDS = ["isles22", "ldct-iqa", "seg-a"]


def _published(task: str, agent: str) -> dict:
    return next(r for r in paper_results()["runs"] if r["task"] == task and r["agent"] == agent and r["budget_hours"] == 24)


def test_packaged_copy_is_the_reference_file():
    assert sha256(PAPER_RESULTS) == reference_sha256("_common/paper_results.json")


def test_html_shows_published_agents_positions_and_human_median():
    doc = session("sample", "r1", seed=5, ids=IDS, fail_every=0)
    page = parse(render_html([doc]))
    summary = page.tables["summary wide"]
    assert summary[0][:6] == ["Rank", "Agent", "Data", "Runs", "Tasks run", "Score (mean)"]
    published = [row for row, cls in zip(summary, page.row_classes["summary wide"], strict=False) if cls == "published"]
    assert [row[1] for row in published] == ["R&D-Agent (published)", "AIDE (published)", "ML-Master (published)"]
    assert all(row[2] == "published" for row in published)
    assert "Table 3, all 20: 12.15%" in published[0][5] and "Table 3, all 20: 9.05%" in published[1][5]
    # the published score over these three challenges: mean of the paper's S-table percentiles
    rd = [_published(t, "R&D-Agent") for t in IDS]
    expected = sum(r["percentile"] if r["status"] == "ok" else 0.0 for r in rd) / 3
    assert published[0][5].startswith(f"{100 * expected:.1f}%")
    assert summary[1][1] == "sample" and summary[1][2] == "synthetic" and summary[1][4] == "3 of 3"

    table3 = page.tables["table3 wide"]
    head = table3[0]
    assert head[:5] == ["Task", "N", "Metric", "Human best", "Human median"]
    assert head[5:] == ["sample", "R&D-Agent (published)", "AIDE (published)", "ML-Master (published)"]
    task = registry().get("ldct-iqa")
    board = Leaderboard.read(task.leaderboard_path)
    record = next(r for r in doc["tasks"] if r["task_id"] == "ldct-iqa")
    row = next(r for r in table3 if "score ↑" in r)
    at = row.index("score ↑")
    assert float(row[at + 2]) == pytest.approx(statistics.median(board.values["score"]), rel=1e-3)
    ordinal = {1: "1st", 2: "2nd", 3: "3rd"}.get(record["positions"]["score"], f"{record['positions']['score']}th")
    assert row[at + 3].endswith(f"{ordinal} of {board.n + 1}")
    published_pos = _published("ldct-iqa", "R&D-Agent")["positions"]["score"]
    assert row[at + 4].endswith(f"of {board.n + 1}") and row[at + 4].split()[-3] == f"{published_pos}th"
    text = "".join(page.text)
    assert "Human best / Human median" in text and "Synthetic data." in text  # the legend and the banner
    assert SYNTHETIC_NOTE in text and NOTE not in text


def test_reference_none_leaves_them_out():
    doc = session("sample", "r1", seed=5, ids=IDS)
    page = render_html([doc], reference="none")
    assert "(published)" not in page
    assert "(published)" not in markdown(doc, reference="none")
    assert markdown(doc).count("(published)") >= 3


def test_markdown_has_positions_median_reference_and_kind():
    doc = session("sample", "r1", seed=5, ids=IDS, fail_every=0)
    text = markdown(doc)
    assert "**synthetic twins**" in text and SYNTHETIC_NOTE.split(":")[0] in text
    rec = next(r for r in doc["tasks"] if r["task_id"] == "isles22")
    board = Leaderboard.read(registry().get("isles22").leaderboard_path)
    assert f"of {board.n + 1} (human best" in text and "median" in text
    assert "| R&D-Agent (published) | AIDE (published) | ML-Master (published) |" in text
    assert "9.05%" in text and "12.15%" in text
    assert rec["positions"]["dice"] >= 1


def test_real_data_keeps_the_real_note():
    doc = build_report([graded("isles22", 0.3, "a")], agent="a", agent_options={}, settings={"data": "prepared"},
                       run_id="r")
    assert doc["data_kind"] == "real" and doc["note"] == NOTE
    assert any(line.startswith("data: real") for line in terminal_lines(doc))
    assert "Synthetic data." not in render_html([doc])


def test_skipped_is_not_a_fail():
    from pytest_rexmle.report.model import not_run

    doc = build_report([not_run("isles22", "data not prepared: run rexmle prepare isles22")], agent="a",
                       agent_options={}, settings={"data": "prepared"}, run_id="r", skipped=["isles22"])
    assert doc["n_fail"] == 0 and doc["skipped"] == ["isles22"] and doc["score"] == 0.0
    assert score_line(doc) == "partial score: 0.0% over 1 task(s), 0 FAIL, 1 skipped (counted as 0)"
    assert "| skipped | SKIPPED: not run\\: data not prepared" in markdown(doc)


def test_a_challenge_never_run_is_not_run_not_fail():
    """Before: an agent merged from a ``-k ldct-iqa`` session showed 0.0 % (1/1 FAIL) on 19 challenges."""
    one = session("quick", "r1", seed=1, ids=["ldct-iqa"], fail_every=0)
    full = session("full", "r2", seed=2)
    merged = merge_reports([one, full])
    MergedReport.check(merged)
    quick = next(a for a in merged["agents"] if a["label"] == "quick")
    assert quick["not_run"] == [c for c in merged["tasks"] if c != "ldct-iqa"]
    assert quick["mean"] == pytest.approx(one["score"]) and quick["n_fail"] == [0]
    page = parse(render_html([merged]))
    table3 = page.tables["table3 wide"]
    col = table3[0].index("quick") - 5  # cells after the five fixed columns of a challenge's first row
    pct_rows = [r for r in table3 if "percentile" in r]
    shown = [r[r.index("percentile") + 3 + col] for r in pct_rows]
    assert shown.count("not run") == 19 and len(shown) == 20
    summary = page.tables["summary wide"]
    assert next(r for r in summary if r[1] == "quick")[4].startswith("1 of 20 (19 not run")
    md = merged_markdown(with_reference(merged, "paper"))
    assert md.count("not run") >= 19 and "1 of 20" in md


def test_index_has_a_data_column(tmp_path):
    synthetic = session("sample", "20260101T000000Z-aaaaaa", seed=1, ids=["isles22"])
    real = build_report([graded("isles22", 0.3, "a")], agent="a", agent_options={}, settings={"data": "prepared"},
                        run_id="20260102T000000Z-bbbbbb")
    for doc in (synthetic, real):
        archive.write_json(archive.session_folder(tmp_path, doc["run_id"]) / archive.REPORT_JSON, doc)
    archive.write_index(tmp_path)
    page = parse((tmp_path / archive.INDEX_HTML).read_text())
    rows = page.tables["sessions"]
    at = rows[0].index("Data")
    assert {r[0].split()[0]: r[at] for r in rows[1:]} == {synthetic["run_id"]: "synthetic", real["run_id"]: "real"}
    md = (tmp_path / archive.INDEX_MD).read_text()
    assert "| Data |" in md and "| synthetic |" in md and "| real |" in md


def test_readme_report_example_works_as_written(tmp_path):
    """``rexmle report .rexmle/report run2/.rexmle/report --out merged/`` (docs/getting-started.md) takes every
    session of both."""
    first, second = tmp_path / ".rexmle" / "report", tmp_path / "run2" / ".rexmle" / "report"
    docs = [session("a", "20260101T000000Z-000001", seed=1, ids=IDS), session("a", "20260101T000000Z-000002", seed=2, ids=IDS),
            session("b", "20260101T000000Z-000003", seed=3, ids=IDS)]
    for root, doc in ((first, docs[0]), (first, docs[1]), (second, docs[2])):
        archive.write_json(archive.session_folder(root, doc["run_id"]) / archive.REPORT_JSON, doc)
        archive.point_latest(root, doc["run_id"])
    guide = (Path(__file__).resolve().parents[2] / "docs" / "getting-started.md").read_text()
    assert "rexmle report .rexmle/report run2/.rexmle/report --out merged/" in guide
    proc = subprocess.run([sys.executable, "-m", "pytest_rexmle", "report", ".rexmle/report", "run2/.rexmle/report",
                           "--out", "merged/"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "took 2 session(s) from .rexmle/report" in proc.stderr
    assert "took 1 session(s) from run2/.rexmle/report" in proc.stderr
    merged = json.loads((tmp_path / "merged" / "rexmle-merged.json").read_text())
    assert sorted(s["run_id"] for s in merged["sources"]) == sorted(d["run_id"] for d in docs)
    assert {a["label"]: a["n_runs"] for a in merged["agents"]} == {"a": 2, "b": 1}
    assert [r["label"] for r in merged["reference"]] == [r["label"] for r in paper_agents(IDS)]
    none = subprocess.run([sys.executable, "-m", "pytest_rexmle", "report", ".rexmle/report", "--reference", "none",
                           "--out", "plain/"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert none.returncode == 0, none.stderr
    assert "(published)" not in (tmp_path / "plain" / "rexmle-report.html").read_text()
