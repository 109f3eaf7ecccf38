"""``rexmle report --verify`` (issue #38.7): a session's submissions are hashed into its report, and a
downloaded report is believed only as far as its submissions re-grade to the same metrics here.

A real session of the ``sample`` agent on synthetic twins; its report merged as it is (verified), copied
with its runs into a bundle elsewhere (verified from the copies next to the report), forged to claim better
metrics (refused, left out), and with a submission file changed after the fact (refused)."""

from __future__ import annotations

import argparse
import copy
import json
import shutil

import numpy  # noqa: F401  (imported before pytester snapshots sys.modules: it cannot load twice)

from pytest_rexmle.report.merge import add_report_arguments, run_report
from pytest_rexmle.task import registry

from ..conftest import report_dir, report_json

TASKS = ["ldct-iqa", "topcow-cta-cls"]


def _args(*argv: str) -> argparse.Namespace:
    return add_report_arguments(argparse.ArgumentParser()).parse_args(list(argv))


def _merge(tmp_path, name: str, *inputs: str, verify: bool = True) -> tuple[int, dict | None, str]:
    out = tmp_path / name
    rc = run_report(_args(*inputs, "--out", str(out), "--reference", "none", *(["--verify"] if verify else [])))
    merged = json.loads((out / "rexmle-merged.json").read_text()) if rc == 0 else None
    md = (out / "rexmle-merged.md").read_text() if rc == 0 else ""
    return rc, merged, md


def _bundle(tmp_path, bench, doc: dict, name: str) -> tuple:
    """The session folder and its run folders copied elsewhere (as a download holds them); the record's
    run_dir names a folder that does not exist here."""
    root = tmp_path / name
    shutil.copytree(report_dir(bench.path), root / "report", symlinks=False)
    for rec in doc["tasks"]:
        src = bench.path / ".rexmle" / "runs" / rec["task_id"]
        shutil.copytree(src, root / "runs" / rec["task_id"])
        rec["run_dir"] = "/elsewhere/" + rec["run_dir"].split("/.rexmle/", 1)[1]
    (root / "report" / "rexmle-report.json").write_text(json.dumps(doc))
    return root, root / "report"


def test_verify_regrades_and_refuses_a_forged_result(bench, tmp_path, capsys):
    bench("--agent=sample", "--rexmle-judge=none", "-k", " or ".join(TASKS)).assert_outcomes(passed=2)
    doc = report_json(bench.path)
    # the session states each submission's files and hashes, and the answers it was graded against
    for cid in TASKS:
        stated = doc["submissions"][cid]
        assert stated["files"] and all(len(h) == 64 for h in stated["files"].values()) and stated["answers_id"]

    # as written: every graded result re-grades the same here
    rc, merged, md = _merge(tmp_path, "as-is", str(report_dir(bench.path)))
    assert rc == 0 and merged["verification"]["verified"] == 1, merged["verification"]
    assert merged["agents"][0]["trust"] == "verified"
    assert "UNVERIFIED" not in md.split("| Task |")[0].split("| Rank |")[1]
    # without --verify the same session is only believed as far as its rows allow
    rc, merged, md = _merge(tmp_path, "unchecked", str(report_dir(bench.path)), verify=False)
    assert merged["agents"][0]["trust"] == "unverified" and "| sample — UNVERIFIED |" in md

    # a copy elsewhere: the runs are found next to the report
    _, report = _bundle(tmp_path, bench, copy.deepcopy(doc), "bundle")
    rc, merged, _ = _merge(tmp_path, "bundled", str(report))
    assert rc == 0 and merged["agents"][0]["trust"] == "verified", merged["sources"]

    # forged: better metrics claimed for ldct-iqa (re-ranked to 100 % from them, so only re-grading catches it)
    forged = copy.deepcopy(doc)
    forged["run_id"] += "-forged"
    task = registry().get("ldct-iqa")
    rec = next(r for r in forged["tasks"] if r["task_id"] == "ldct-iqa")
    rec["metrics"] = {**rec["metrics"], **{m.key: 3.0 for m in task.ranking_metrics}}
    root = tmp_path / "forged"
    root.mkdir()
    (root / "rexmle-report.json").write_text(json.dumps(forged))
    rc, merged, _ = _merge(tmp_path, "forged-unchecked", str(root), verify=False)
    (agent,) = merged["agents"]
    assert agent["trust"] == "unverified" and agent["tasks"][0]["mean_percentile"] == 1.0
    capsys.readouterr()
    rc, merged, md = _merge(tmp_path, "forged-checked", str(report_dir(bench.path)), str(root))
    err = capsys.readouterr().err
    assert rc == 0 and [s["run_id"] for s in merged["sources"]] == [doc["run_id"]]
    assert merged["refused"][0]["run_id"] == forged["run_id"] and "re-graded metrics differ" in merged["refused"][0]["why"]
    assert "REFUSED session" in err and "**REFUSED (left out): session" in md
    assert run_report(_args(str(root), "--out", str(tmp_path / "only-forged"), "--verify")) == 1
    assert "every session was refused" in capsys.readouterr().err

    # another agent's name on this agent's genuine runs, hashes and metrics: the run folders say whose they are
    renamed = copy.deepcopy(doc)
    renamed.update(run_id=doc["run_id"] + "-renamed", agent="forger")
    for rec in renamed["tasks"]:
        rec["agent"] = "forger"
    root = tmp_path / "renamed"
    root.mkdir()
    (root / "rexmle-report.json").write_text(json.dumps(renamed))
    rc, merged, _ = _merge(tmp_path, "renamed-out", str(root), str(report_dir(bench.path)))
    assert "holds sample [" in merged["refused"][0]["why"], merged.get("refused")

    # a submission file changed after grading: its hashes no longer match the report's
    root, report = _bundle(tmp_path, bench, copy.deepcopy(doc), "tampered")
    first = next(p for p in sorted((root / "runs" / "topcow-cta-cls").rglob("submission/*")) if p.is_file())
    first.write_bytes(first.read_bytes() + b"\n")
    rc, merged, _ = _merge(tmp_path, "tampered-out", str(report), str(report_dir(bench.path)))
    assert merged["refused"][0]["why"].startswith("topcow-cta-cls: the submission in")


def test_a_forged_run_dir_names_no_other_folder(tmp_path):
    """The run folder's name and the task come from the file: a glob or a '..' there finds nothing."""
    from pytest_rexmle.report.verify import find_run, verify_record

    (tmp_path / "runs" / "ldct-iqa" / "someone" / "20260101T000000-1" / "submission").mkdir(parents=True)
    report = tmp_path / "rexmle-report.json"
    assert find_run({"task_id": "ldct-iqa", "run_dir": "/gone/20260101T000000-1"}, report) is not None
    assert find_run({"task_id": "ldct-iqa", "run_dir": "/gone/*"}, report) is None
    assert find_run({"task_id": "ldct-iqa", "run_dir": "/gone/.."}, report) is None
    status, why = verify_record({"task_id": "../ldct-iqa", "run_dir": "/gone/x"}, {}, report, None)
    assert status == "unverified" and "not a task of this version" in why
