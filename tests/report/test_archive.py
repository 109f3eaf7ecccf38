"""Reports people keep: one folder per session, a ``latest`` link, an index, world-readable files; the
terminal table wraps reasons instead of cutting them; ``rexmle status`` lists finished runs too."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from pytest_rexmle.report import archive
from pytest_rexmle.report.render import fmt_number, terminal_lines

from ..conftest import report_json
from .helpers import session


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_run_ids_sort_by_start_and_are_unique():
    early = archive.new_run_id(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    late = archive.new_run_id(datetime(2026, 1, 2, 3, 4, 6, tzinfo=UTC))
    assert early.startswith("20260102T030405Z-") and early < late
    assert len({archive.new_run_id() for _ in range(50)}) == 50


def test_files_are_0644_even_under_a_strict_umask(tmp_path):
    old = os.umask(0o077)
    try:
        path = archive.write_json(tmp_path / "r" / "x.json", {"a": 1})
    finally:
        os.umask(old)
    assert _mode(path) == 0o644 and json.loads(path.read_text()) == {"a": 1}
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")], "no temp file left behind"


def test_index_lists_every_session_newest_first_and_latest_moves(tmp_path):
    for run_id, created, seed in (("20260101T000000Z-aaaaaa", "2026-01-01T00:00:00+00:00", 1),
                                  ("20260102T000000Z-bbbbbb", "2026-01-02T00:00:00+00:00", 2)):
        doc = {**session("sample", run_id, seed=seed), "created": created}
        archive.write_json(archive.session_folder(tmp_path, run_id) / archive.REPORT_JSON, doc)
        archive.point_latest(tmp_path, run_id)
        archive.write_index(tmp_path)
    (tmp_path / "stray").mkdir()  # a folder without a report is not a session
    assert os.readlink(tmp_path / "latest") == "20260102T000000Z-bbbbbb"
    md = (tmp_path / "index.md").read_text()
    assert md.index("20260102T000000Z-bbbbbb") < md.index("20260101T000000Z-aaaaaa")
    assert "2 session(s)" in md and "`latest` → `20260102T000000Z-bbbbbb`" in md
    page = (tmp_path / "index.html").read_text()
    assert page.count("<tr><td><a href=") == 2 and "(latest)" in page
    assert _mode(tmp_path / "index.html") == 0o644


def test_a_sessions_end_reads_only_the_new_or_changed_reports(tmp_path, monkeypatch):
    """The index used to re-read every earlier session at each session's end (S² over S sessions)."""
    from pytest_rexmle.report import trust

    read = []
    real = trust.read_report
    monkeypatch.setattr(trust, "read_report", lambda path, *a, **k: read.append(Path(path).parent.name) or real(path, *a, **k))
    ids = [f"2026010{d}T000000Z-{c * 6}" for d, c in ((1, "a"), (2, "b"), (3, "c"))]
    for day, run_id in enumerate(ids, start=1):
        doc = {**session("sample", run_id, seed=day), "created": f"2026-01-0{day}T00:00:00+00:00"}
        archive.write_json(archive.session_folder(tmp_path, run_id) / archive.REPORT_JSON, doc)
        archive.write_index(tmp_path)
    assert read == ids  # each report read once, when its session ended
    full = (tmp_path / "index.md").read_text()
    (tmp_path / archive.INDEX_CACHE).unlink()  # from scratch: the same index
    archive.write_index(tmp_path)
    assert (tmp_path / "index.md").read_text() == full
    changed = {**session("sample", ids[0], seed=9), "created": "2026-01-01T00:00:00+00:00", "agent": "renamed"}
    archive.write_json(archive.session_folder(tmp_path, ids[0]) / archive.REPORT_JSON, changed)
    read.clear()
    archive.write_index(tmp_path)
    assert read == [ids[0]] and "renamed" in (tmp_path / "index.md").read_text()


def test_local_time_is_readable():
    text = archive.local_time("2026-03-04T05:06:07.123456+00:00")
    assert re.fullmatch(r"2026-03-0[345] \d\d:\d6( \S+)?", text), text


def test_numbers_share_one_format():
    """Before: ``1.665e+04`` beside ``3175`` in one table."""
    assert [fmt_number(v) for v in (16650.3, 3175, 0.6492, 16.45, 2.0, 0, 0.0)] == \
        ["16650", "3175", "0.6492", "16.45", "2", "0", "0"]
    assert fmt_number(float("inf")) == "inf" and fmt_number(None) == "-" and fmt_number(1e-7) == "1.000e-07"


def test_terminal_table_wraps_reasons_instead_of_cutting_them():
    """Before: ``…stderr ends with: bwrap: Creating`` — cut at 60 characters."""
    doc = session("sample", "r1", seed=1, ids=["isles22", "ldct-iqa"])
    reason = ("agent exited with code 1; stderr ends with: bwrap: Creating new namespace failed: "
              "Operation not permitted (run in a container? see --rexmle-sandbox)")
    for rec in doc["tasks"]:
        if rec["task_id"] == "ldct-iqa":
            rec.update(status="missing", reason=reason, metrics=None, percentile=0.0)
    lines = terminal_lines(doc, width=80)
    assert all(len(line) <= len(lines[1]) for line in lines[:-1]), lines  # nothing sticks out of the table
    assert len(lines) >= 2 + 2 + 2, "the long reason takes continuation lines"
    start, end = lines[0].index("key metrics"), lines[0].index("percentile")
    column = " ".join(line[start:end].strip() for line in lines[2:-1])
    assert reason in column  # every word, in order: nothing cut
    assert lines[-1].startswith("partial score:")


def test_two_sessions_keep_both_reports(bench, needs_bwrap):
    """Before: every session overwrote .rexmle/report, so a -k re-run wiped the full report."""
    bench("--agent=sample", "-k", "ldct-iqa or isles22").assert_outcomes(passed=2)
    first = report_json(bench.path)
    bench("--agent=sample", "-k", "ldct-iqa").assert_outcomes(passed=1)
    second = report_json(bench.path)
    root = bench.path / ".rexmle" / "report"
    assert first["run_id"] != second["run_id"]
    assert os.readlink(root / "latest") == second["run_id"]
    kept = json.loads((root / first["run_id"] / "rexmle-report.json").read_text())
    assert kept == first and kept["selected"] == ["isles22", "ldct-iqa"]
    assert {p.name for p in root.iterdir() if p.is_dir() and not p.is_symlink()} == {first["run_id"], second["run_id"]}
    index = (root / "index.md").read_text()
    assert first["run_id"] in index and second["run_id"] in index
    for folder in (root / first["run_id"], root / second["run_id"]):
        for name in ("rexmle-report.json", "rexmle-report.md", "rexmle-report.html"):
            assert _mode(folder / name) == 0o644, folder / name
    # `rexmle report` takes the report folder as its latest session
    out = bench.path / "merged"
    proc = subprocess.run([sys.executable, "-m", "pytest_rexmle", "report", str(root), str(root / first["run_id"]),
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    merged = json.loads((out / "rexmle-merged.json").read_text())
    assert sorted(s["run_id"] for s in merged["sources"]) == sorted([first["run_id"], second["run_id"]])


def _run(root: Path, task: str, stamp: str, result: dict | None, started: str) -> None:
    folder = root / task / "sample-abc" / stamp
    folder.mkdir(parents=True)
    meta = {"task": task, "agent": "sample", "time_limit": 60, "started": started}
    if result is not None:
        meta["finished"] = started
        (folder / "result.json").write_text(json.dumps(result))
    (folder / "run.json").write_text(json.dumps(meta))


def test_status_shows_finished_runs_when_none_is_running(tmp_path):
    """Before: ``rexmle status --running`` said "No runs in .rexmle/runs" although finished runs existed."""
    now = datetime.now(UTC).isoformat()
    _run(tmp_path, "ldct-iqa", "20260101T000000-1", {"status": "ok", "percentile": 0.25,
                                                     "timings": {"agent_seconds": 3.0}}, now)
    _run(tmp_path, "isles22", "20260101T000000-1", {"status": "timeout", "percentile": 0.0,
                                                    "timings": {"agent_seconds": 60.0}}, now)
    cmd = [sys.executable, "-m", "pytest_rexmle", "status", "--runs-dir", str(tmp_path)]
    running = subprocess.run([*cmd, "--running"], capture_output=True, text=True, timeout=60)
    assert running.returncode == 0, running.stderr
    assert "no run in progress" in running.stdout and "2 finished run(s)" in running.stdout
    assert "no runs in" not in running.stdout
    every = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    lines = every.stdout.splitlines()
    assert any(line.startswith("ldct-iqa") and " ok " in line and "percentile 25.0%" in line for line in lines)
    assert any(line.startswith("isles22") and " timeout " in line for line in lines)
