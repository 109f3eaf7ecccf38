"""Nothing downloaded is believed (issue #38.7): ``rexmle report`` re-derives what a session report allows,
reads it bounded, and labels every session it did not re-grade "unverified".

The forged reports here are what an attacker can write: all results OK at 100 %, a disclosure that hides the
``sandbox: none`` and ``network: host`` its own settings state, a claimed H100, a 200,000-deep JSON, a 1 GiB file.
"""

from __future__ import annotations

import argparse
import copy
import json
import resource

from pytest_rexmle.report.disclosure import NETWORKS, UNSAFE
from pytest_rexmle.report.merge import MergedReport, add_report_arguments, run_report
from pytest_rexmle.report.trust import MAX_REPORT_BYTES

from .helpers import session

IDS = ["isles22", "ldct-iqa", "topcow-cta-cls"]


def _args(*argv: str) -> argparse.Namespace:
    return add_report_arguments(argparse.ArgumentParser()).parse_args(list(argv))


def forged(honest: dict) -> dict:
    """An honest report rewritten to claim 100 % everywhere, hide its unsafe settings and claim an H100."""
    doc = copy.deepcopy(honest)
    doc.update(agent="forger", run_id="forged-1", score=1.0, n_fail=0)
    for rec in doc["tasks"]:
        rec.update(status="ok", percentile=1.0, reason=None)
        rec["metrics"] = rec["metrics"] or {m: 0.0 for m in rec["ranking_metrics"]}
    doc["settings"] = {**doc["settings"], "sandbox": "none", "network": "host"}
    doc["disclosure"] = {"network": "gateway", "unsafe": [], "suspected_leaks": []}
    doc["compute"] = {"runs": {}, "total": {}, "hardware": ["8× NVIDIA H100 80GB HBM3"]}
    return doc


def _write(folder, doc: dict) -> str:
    folder.mkdir()
    (folder / "rexmle-report.json").write_text(json.dumps(doc))
    return str(folder)


def test_a_forged_session_is_rederived_and_labelled_unverified(tmp_path, capsys):
    honest = session("honest", "honest-1", seed=3, ids=IDS, fail_every=0)
    fake = forged(session("forger", "x", seed=5, ids=IDS, fail_every=2))
    out = tmp_path / "out"
    assert run_report(_args(_write(tmp_path / "a", honest), _write(tmp_path / "b", fake), "--out", str(out),
                            "--reference", "none")) == 0
    merged = json.loads((out / "rexmle-merged.json").read_text())
    MergedReport.check(merged)
    agents = {a["label"]: a for a in merged["agents"]}
    # the percentiles come from the metrics against the leaderboard, not from the file's 100 %
    assert agents["forger"]["mean"] < 1.0
    forger_rows = [r for r in agents["forger"]["tasks"]]
    assert all(r["mean_percentile"] < 1.0 for r in forger_rows), forger_rows
    source = next(s for s in merged["sources"] if s["run_id"] == "forged-1")
    assert source["trust"] == "unverified" and source["score"] == agents["forger"]["mean"]
    assert any("percentile 1.0 claimed" in n for n in source["trust_notes"])
    # the disclosure is rebuilt from the settings the same file states
    assert UNSAFE["unsafe_local"] in merged["unsafe"] and NETWORKS["host"] in merged["unsafe"]
    assert any("left out what its own settings state" in w for w in merged["warnings"])
    # the claimed hardware is shown as a claim
    assert list(merged["compute"]["hardware"]) == ["8× NVIDIA H100 80GB HBM3 (as an unverified session states it)"]
    assert merged["verification"]["verified"] == 0 and merged["verification"]["unverified"] == 2
    assert "--verify" in merged["verification"]["unverified_why"]["forged-1"]
    md = (out / "rexmle-merged.md").read_text()
    assert "| forger — UNVERIFIED |" in md and "| honest — UNVERIFIED |" in md and "Verified: 0 session(s)" in md
    assert "UNSAFE" in md
    page = (out / "rexmle-report.html").read_text()
    assert "forger<b> — UNVERIFIED</b>" in page and "as an unverified session states it" in page


def test_a_deep_json_is_a_clean_error(tmp_path, capsys):
    deep = tmp_path / "deep" / "rexmle-report.json"
    deep.parent.mkdir()
    deep.write_text("[" * 200_000 + "]" * 200_000)
    assert run_report(_args(str(deep.parent), "--out", str(tmp_path / "out"))) == 1
    err = capsys.readouterr().err
    assert "rexmle report:" in err and "nested 200000 levels deep" in err and "Traceback" not in err


def test_a_huge_report_is_refused_before_it_is_read(tmp_path, capsys):
    huge = tmp_path / "huge" / "rexmle-report.json"
    huge.parent.mkdir()
    with huge.open("wb") as fh:  # sparse: 1 GiB that costs no disk
        fh.truncate(1 << 30)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert run_report(_args(str(huge.parent), "--out", str(tmp_path / "out"))) == 1
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    err = capsys.readouterr().err
    assert f"more than the {MAX_REPORT_BYTES} bytes" in err and grown_kib < 64 * 1024, (err, grown_kib)


def test_a_report_that_is_no_object_is_a_clean_error(tmp_path, capsys):
    bad = tmp_path / "list" / "rexmle-report.json"
    bad.parent.mkdir()
    bad.write_text("[1, 2]")
    assert run_report(_args(str(bad.parent), "--out", str(tmp_path / "out"))) == 1
    assert "is not a JSON object" in capsys.readouterr().err


def test_the_ranking_printed_says_unverified(tmp_path, capsys):
    doc = session("honest", "honest-1", seed=3, ids=IDS, fail_every=0)
    assert run_report(_args(_write(tmp_path / "a", doc), "--out", str(tmp_path / "out"), "--reference", "none")) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("1. honest: ") and first.endswith("— UNVERIFIED"), first


def test_the_index_skips_a_huge_session_file(tmp_path):
    from pytest_rexmle.report.archive import sessions

    (tmp_path / "20260101T000000Z-aaaaaa").mkdir()
    (tmp_path / "20260101T000000Z-aaaaaa" / "rexmle-report.json").write_text(json.dumps(
        session("honest", "honest-1", seed=3, ids=IDS, fail_every=0)))
    (tmp_path / "20260102T000000Z-bbbbbb").mkdir()
    with (tmp_path / "20260102T000000Z-bbbbbb" / "rexmle-report.json").open("wb") as fh:
        fh.truncate(1 << 30)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert [d["folder"] for d in sessions(tmp_path)] == ["20260101T000000Z-aaaaaa"]
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 1024
