"""Merging session reports (docs/reading-the-report.md): per-run scores over the union of tasks, mean, standard
error, fixed-seed bootstrap intervals, shared ranks, agent labels, and the ``rexmle report`` command."""

from __future__ import annotations

import argparse
import copy
import json
import math

import pytest

from pytest_rexmle.report.merge import MergedReport, add_report_arguments, bootstrap_ci, merge_reports, run_report, sem
from pytest_rexmle.report.model import SCHEMA

from .helpers import session


def _record(cid: str, pct: float, status: str = "ok", metrics: dict | None = None) -> dict:
    return {"task_id": cid, "reference_id": cid, "status": status, "reason": None if status == "ok" else "x",
            "metrics": metrics if status == "ok" else None, "ranking_metrics": ["m"],
            "positions": None, "mean_position": 2.0 if status == "ok" else None, "n_humans": 4,
            "percentile": pct if status == "ok" else 0.0}


def _report(agent: str, run_id: str, records: list[dict], options: dict | None = None) -> dict:
    ids = [r["task_id"] for r in records]
    score = sum(r["percentile"] for r in records) / len(records)
    return {"schema": SCHEMA, "created": f"2026-01-01T00:00:0{run_id[-1]}+00:00", "run_id": run_id, "agent": agent,
            "agent_options": options or {}, "settings": {}, "selected": ids, "partial": True, "score": score,
            "n_fail": sum(r["status"] != "ok" for r in records), "tasks": records, "note": "n"}


def test_hand_computed_merge():
    docs = [
        _report("a", "r1", [_record("isles22", 0.5, metrics={"m": 1.0}), _record("seg-a", 0.25, metrics={"m": 3.0})]),
        _report("a", "r2", [_record("isles22", 0.7, metrics={"m": 2.0}), _record("seg-a", 0.0, "invalid")]),
        _report("a", "r3", [_record("isles22", 0.3, metrics={"m": 4.0})]),  # did not select seg-a: not a FAIL
        _report("b", "r4", [_record("isles22", 0.6, metrics={"m": 5.0}), _record("seg-a", 0.2, metrics={"m": "inf"})]),
    ]
    merged = merge_reports(docs)
    MergedReport.check(merged)
    assert merged["tasks"] == ["isles22", "seg-a"] and merged["partial"] is True
    a = next(x for x in merged["agents"] if x["label"] == "a")
    b = next(x for x in merged["agents"] if x["label"] == "b")
    # each run over what it selected: r1 (0.5+0.25)/2 = 0.375, r2 (0.7+0)/2 = 0.35, r3 0.3 (isles22 only)
    assert a["scores"] == pytest.approx([0.375, 0.35, 0.3]) and a["n_tasks"] == [2, 2, 1]
    # merged per task: isles22 (0.5+0.7+0.3)/3 = 0.5, seg-a over r1, r2 (0.25+0)/2 = 0.125; mean 0.3125
    assert a["mean"] == pytest.approx(0.3125) and a["same_selection"] is False
    # different selections: the error and interval of a bootstrap scoring each draw per task
    assert 0.0 < a["sem"] < 0.2 and a["ci"][0] <= a["mean"] <= a["ci"][1]
    assert a["n_fail"] == [0, 1, 0]
    isles, sega = a["tasks"]
    assert isles["percentiles"] == [0.5, 0.7, 0.3] and isles["mean_percentile"] == pytest.approx(0.5)
    assert isles["metrics"] == {"m": {"mean": pytest.approx(7 / 3), "n": 3}}
    assert sega["statuses"] == ["ok", "invalid"] and sega["n_fail"] == 1 and sega["n_runs"] == 2
    assert sega["mean_percentile"] == pytest.approx(0.125)
    assert sega["metrics"] == {"m": {"mean": 3.0, "n": 1}}
    # one run: no standard error, a point interval; an infinite metric survives as the string "inf"
    assert b["n_runs"] == 1 and b["sem"] is None and b["ci"] == [0.4, 0.4]
    assert b["tasks"][1]["metrics"]["m"]["mean"] == "inf"
    # b (0.4) ranks above a (0.3125)
    assert [(x["label"], x["rank"]) for x in merged["agents"]] == [("b", 1), ("a", 2)]
    json.dumps(merged, allow_nan=False)


def test_ties_share_a_rank_and_options_split_agents():
    docs = [_report("cmd", "r1", [_record("isles22", 0.5)], {"cmd": "x"}),
            _report("cmd", "r2", [_record("isles22", 0.5)], {"cmd": "y"}),
            _report("zzz", "r3", [_record("isles22", 0.1)])]
    merged = merge_reports(docs)
    labels = [a["label"] for a in merged["agents"]]
    assert labels[0].startswith("cmd [") and labels[1].startswith("cmd [") and labels[0] != labels[1]
    assert [a["rank"] for a in merged["agents"]] == [1, 1, 3]


def test_bootstrap_is_deterministic_and_sane():
    values = [0.1, 0.4, 0.35, 0.8, 0.2]
    first = bootstrap_ci(values, seed=(0, 1))
    assert first == bootstrap_ci(values, seed=(0, 1))
    assert first != bootstrap_ci(values, seed=(1, 1))
    assert min(values) <= first[0] < sum(values) / 5 < first[1] <= max(values)
    assert bootstrap_ci([0.3]) == [0.3, 0.3] and bootstrap_ci([0.2, 0.2]) == [0.2, 0.2]
    assert sem([1.0]) is None and sem([1.0, 3.0]) == pytest.approx(1.0)  # sd sqrt(2) / sqrt(2)


def test_merge_of_realistic_sessions_is_order_independent():
    docs = [session("aide", "r1", seed=1), session("ml", "r2", seed=2), session("ml", "r3", seed=3)]
    one = merge_reports(docs)
    two = merge_reports(list(reversed(docs)))
    MergedReport.check(one)
    strip = lambda d: {k: v for k, v in d.items() if k not in ("created", "sources")}  # noqa: E731
    assert strip(one) == strip(two)
    assert one["partial"] is False and len(one["tasks"]) == 20


def test_validate_merged_rejects():
    merged = merge_reports([_report("a", "r1", [_record("isles22", 0.5)]), _report("a", "r2", [_record("isles22", 0.7)])])
    MergedReport.check(merged)
    for mutate in (lambda d: d.update(schema="x"), lambda d: d["agents"][0].update(mean=0.9),
                   lambda d: d["agents"][0].update(sem=None), lambda d: d["agents"][0].update(rank=2),
                   lambda d: d["agents"][0]["tasks"].pop(), lambda d: d["agents"][0].update(ci=[0.8, 0.2])):
        bad = copy.deepcopy(merged)
        mutate(bad)
        with pytest.raises(ValueError):
            MergedReport.check(bad)
    with pytest.raises(ValueError):
        merge_reports([])
    with pytest.raises(ValueError):
        merge_reports([{"schema": "nope"}])


def _args(*argv: str) -> argparse.Namespace:
    return add_report_arguments(argparse.ArgumentParser()).parse_args(list(argv))


def test_report_command(tmp_path, capsys):
    d1, d2 = tmp_path / "s1", tmp_path / "s2"
    for folder, doc in ((d1, session("aide", "r1", seed=1, ids=["isles22", "ldct-iqa"])),
                        (d2, session("ml", "r2", seed=2, ids=["isles22", "seg-a"]))):
        folder.mkdir()
        (folder / "rexmle-report.json").write_text(json.dumps(doc))
    out = tmp_path / "out"
    assert run_report(_args(str(d1), str(d2 / "rexmle-report.json"), "--out", str(out))) == 0
    merged = json.loads((out / "rexmle-merged.json").read_text())
    MergedReport.check(merged)
    assert merged["tasks"] == ["isles22", "ldct-iqa", "seg-a"]
    assert (out / "rexmle-report.html").read_text().startswith("<!DOCTYPE html>")
    assert "| Rank | Agent |" in (out / "rexmle-merged.md").read_text()
    assert str(out / "rexmle-report.html") in capsys.readouterr().out
    assert run_report(_args(str(tmp_path / "missing"), "--out", str(out))) == 2
    (tmp_path / "bad.json").write_text("{")
    assert run_report(_args(str(tmp_path / "bad.json"), "--out", str(out))) == 1
    assert "rexmle report:" in capsys.readouterr().err


def test_sem_matches_formula():
    values = [0.2, 0.5, 0.9, 0.4]
    mean = sum(values) / 4
    expected = math.sqrt(sum((v - mean) ** 2 for v in values) / 3) / 2
    assert sem(values) == pytest.approx(expected)


def test_merged_document_is_checked_before_it_is_written(tmp_path, monkeypatch):
    """A merge that breaks its own schema (a harness bug) stops before rexmle-merged.json exists."""
    from pytest_rexmle.documents import DocumentError
    from pytest_rexmle.report import merge

    folder = tmp_path / "s1"
    folder.mkdir()
    (folder / "rexmle-report.json").write_text(json.dumps(session("aide", "r1", seed=1, ids=["isles22"])))
    monkeypatch.setattr(merge, "with_reference", lambda doc, reference: {**doc, "schema": "rexmle-merged-report/0"})
    out = tmp_path / "out"
    with pytest.raises(DocumentError, match="rexmle-merged.json"):
        run_report(_args(str(folder), "--out", str(out)))
    assert not (out / "rexmle-merged.json").exists()
