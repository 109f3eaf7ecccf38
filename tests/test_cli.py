"""The ``rexmle`` command, run as a subprocess (``python -m pytest_rexmle``).

Exit codes: 0 success, 1 the checked thing is bad (invalid submission), 2 usage error with one clear line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC
from pathlib import Path

import pytest

ALL_IDS = sorted([
    "usenhance", "ldct-iqa", "panther-t1", "panther-t2", "seg-a", "dentex", "topcow-cta-seg", "topcow-cta-det",
    "topcow-cta-cls", "topcow-mra-seg", "topcow-mra-det", "topcow-mra-cls", "puma-t1-tissue-seg",
    "puma-t1-nuclei-det", "puma-t2-tissue-seg", "puma-t2-nuclei-det", "isles22", "cellseg", "topbrain-cta-seg",
    "topbrain-mra-seg",
])


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("rexmle-cli-cache")


@pytest.fixture(scope="module")
def rexmle(cache_dir):
    env = {k: v for k, v in os.environ.items() if k not in ("REXMLE_DATA_DIR", "REXMLE_TASK", "XDG_CACHE_HOME")}
    env["REXMLE_CACHE_DIR"] = str(cache_dir)

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pytest_rexmle", *args], capture_output=True, text=True,
                              env=env, timeout=120)

    run.env = env
    return run


def assert_usage_error(proc, *fragments: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("rexmle: error: "), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr, proc.stderr


# -- rank ------------------------------------------------------------------------------------------------

def test_rank_worked_example_json(rexmle):
    proc = rexmle("rank", "topcow-cta-det", "--metrics", '{"iou": 0.6707, "boundary_iou": 0.611}', "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    # the report guide's worked example: positions iou 7, boundary_iou 5; mean 6.0; percentile 1 - 5/8 = 0.375; N = 8
    assert doc == {"task": "topcow-cta-det", "positions": {"boundary_iou": 5, "iou": 7}, "mean_position": 6.0,
                   "percentile": 0.375, "n_humans": 8}
    assert list(doc) == ["task", "positions", "mean_position", "percentile", "n_humans"]


def test_rank_text_output(rexmle):
    proc = rexmle("rank", "topcow-track1-task2", "--metrics", '{"iou": 0.6707, "boundary_iou": 0.611}')
    assert proc.returncode == 0, proc.stderr
    assert "iou: position 7 of 9" in proc.stdout
    assert "boundary_iou: position 5 of 9" in proc.stdout
    assert "37.5%" in proc.stdout


def test_rank_accepts_inf_as_in_result_records(rexmle):
    # usenhance: psnr "inf" -> 1; lncc .9065 -> 2 (only .908 above); ssim .7576 ties NCIA's best -> 1
    # mean 4/3; percentile 1 - (1/3)/10 = 29/30
    proc = rexmle("rank", "usenhance", "--metrics", '{"lncc": 0.9065, "ssim": 0.7576, "psnr": "inf"}', "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["positions"] == {"lncc": 2, "ssim": 1, "psnr": 1}
    assert doc["percentile"] == pytest.approx(29 / 30)


def test_rank_missing_metric(rexmle):
    proc = rexmle("rank", "topcow-cta-det", "--metrics", '{"iou": 0.6707}', "--json")
    assert_usage_error(proc, "missing ranking metric", "boundary_iou")
    assert proc.stdout == ""


def test_rank_unknown_metric(rexmle):
    proc = rexmle("rank", "topcow-cta-det", "--metrics", '{"iou": 0.6707, "boundary_iou": 0.611, "dice": 1}')
    assert_usage_error(proc, "unknown metric", "'dice'")


def test_rank_bad_json(rexmle):
    proc = rexmle("rank", "topcow-cta-det", "--metrics", "{iou: 0.6707}")
    assert_usage_error(proc, "--metrics is not valid JSON")


def test_rank_json_not_an_object(rexmle):
    proc = rexmle("rank", "topcow-cta-det", "--metrics", "[0.6707, 0.611]")
    assert_usage_error(proc, "JSON object")


def test_rank_non_numeric_value(rexmle):
    # a value that is not a number is a usage error (exit 2, one line), not a Python traceback
    proc = rexmle("rank", "topcow-cta-det", "--metrics", '{"iou": "high", "boundary_iou": 0.611}')
    assert_usage_error(proc, "iou")


def test_rank_unknown_task(rexmle):
    proc = rexmle("rank", "topcow-cta-dett", "--metrics", "{}")
    assert_usage_error(proc, "unknown task 'topcow-cta-dett'", "topcow-cta-det,")


# -- list / info -----------------------------------------------------------------------------------------

def test_list(rexmle):
    proc = rexmle("list")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 20
    assert [line.split()[0] for line in lines] == ALL_IDS


def test_list_json(rexmle):
    proc = rexmle("list", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [d["id"] for d in doc] == ALL_IDS
    by_id = {d["id"]: d for d in doc}
    assert by_id["cellseg"]["reference_id"] == "neurips-cellseg"
    assert by_id["ldct-iqa"]["task_type"] == "quality_assessment" and by_id["ldct-iqa"]["modality"] == "ct"


def test_info_isles22_json(rexmle, cache_dir):
    proc = rexmle("info", "isles22", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["id"] == "isles22" and doc["reference_id"] == "isles22"
    assert doc["task_type"] == "segmentation" and doc["modality"] == "mri"
    assert sorted(doc["markers"]) == ["mri", "segmentation"]
    assert doc["n_humans"] == 10
    assert doc["time_limit_hours"] == 24.0
    # best human per metric from leaderboard.csv: dice max .7869, lesion_f1 max .8246,
    # lesion_count_diff min 2.0667, abs_volume_diff min 4.6982
    assert [(m["key"], m["direction"], m["human_best"]) for m in doc["metrics"]] == [
        ("dice", "higher_better", 0.7869), ("lesion_f1", "higher_better", 0.8246),
        ("lesion_count_diff", "lower_better", 2.0667), ("abs_volume_diff", "lower_better", 4.6982)]
    # nothing downloaded under the fresh cache: status names the prepare command
    assert doc["data"]["status"] == "not downloaded"
    assert doc["data"]["prepare"].startswith("rexmle prepare isles22 --data-dir ")
    assert str(cache_dir) in doc["data"]["prepare"]


@pytest.mark.parametrize("alias, task_id", [("topcow-track1-task2", "topcow-cta-det"), ("seg_a", "seg-a"),
                                            ("neurips-cellseg", "cellseg")])
def test_info_accepts_alias(rexmle, alias, task_id):
    proc = rexmle("info", alias, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["id"] == task_id


def test_info_text(rexmle):
    proc = rexmle("info", "topcow-track1-task2")
    assert proc.returncode == 0, proc.stderr
    assert "topcow-cta-det" in proc.stdout and "n_humans: 8" in proc.stdout


def test_info_unknown_task(rexmle):
    assert_usage_error(rexmle("info", "ravir"), "unknown task 'ravir'")


# -- synth / grade / validate on LDCT-IQA ----------------------------------------------------------------

@pytest.fixture(scope="module")
def ldct(rexmle, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ldct") / "twin"
    proc = rexmle("synth", "ldct-iqa", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert (out / "private" / "answers.csv").is_file()
    assert (out / "public" / "sample_submission.csv").is_file()
    return out


def _perfect(ldct: Path, folder: Path) -> Path:
    folder.mkdir()
    shutil.copyfile(ldct / "private" / "answers.csv", folder / "submission.csv")
    return folder


def _missing_one(ldct: Path, folder: Path) -> tuple[Path, str]:
    folder.mkdir()
    lines = (ldct / "private" / "answers.csv").read_text(encoding="utf-8").splitlines()
    dropped = lines.pop()  # last test case
    (folder / "submission.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder, dropped.split(",")[0]


@pytest.fixture(scope="module")
def ldct_runs(rexmle, ldct, tmp_path_factory):
    """The grade/validate calls on the LDCT-IQA twin, run concurrently: each imports scipy (~1.5 s of CPU),
    so they are kept few; finer format rules are covered in test_submission.py."""
    root = tmp_path_factory.mktemp("ldct-subs")
    perfect = _perfect(ldct, root / "perfect")
    missing, dropped = _missing_one(ldct, root / "missing")
    (root / "empty").mkdir()
    answers, public = str(ldct / "private"), str(ldct / "public")
    calls = {
        "grade_perfect": ("grade", "ldct-iqa", "--submission", str(perfect), "--answers", answers, "--json"),
        "grade_missing": ("grade", "ldct-iqa", "--submission", str(missing), "--answers", answers, "--json"),
        "grade_empty": ("grade", "ldct-iqa", "--submission", str(root / "empty"), "--answers", answers, "--json"),
        "validate_ok": ("validate", "--task", "ldct-iqa", "--data", public, "--submission", str(perfect)),
        "validate_missing": ("validate", "--task", "ldct-iqa", "--data", public, "--submission", str(missing)),
    }
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        results = dict(zip(calls, pool.map(lambda name: rexmle(*calls[name]), calls), strict=True))
    results["dropped"] = dropped
    results["n_test"] = len((ldct / "private" / "answers.csv").read_text().splitlines()) - 1
    return results


def test_grade_perfect_submission(ldct_runs):
    proc = ldct_runs["grade_perfect"]
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["status"] == "ok" and doc["task"] == "ldct-iqa"
    # prediction == truth: |PLCC| = |SROCC| = |KROCC| = 1 -> score 3.0 > best human 2.7427 -> position 1,
    # percentile 1 - 0/6 = 1.0
    assert doc["metrics"]["score"] == pytest.approx(3.0, abs=1e-9)
    assert doc["metrics"]["plcc"] == pytest.approx(1.0, abs=1e-9)
    assert doc["positions"] == {"score": 1}
    assert doc["mean_position"] == 1.0
    assert doc["percentile"] == 1.0
    assert doc["n_humans"] == 6


def test_grade_missing_id_is_invalid(ldct_runs):
    proc = ldct_runs["grade_missing"]
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    doc = json.loads(proc.stdout)
    assert set(doc) == {"status", "reason"}
    assert doc["status"] == "invalid"
    assert "missing test case" in doc["reason"] and repr(ldct_runs["dropped"]) in doc["reason"]


def test_grade_without_submission_csv(ldct_runs):
    proc = ldct_runs["grade_empty"]
    assert proc.returncode == 1
    assert json.loads(proc.stdout) == {"status": "missing", "reason": "no submission.csv in the submission folder"}


def test_validate_ok(ldct_runs):
    proc = ldct_runs["validate_ok"]
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert proc.stdout.startswith(f"OK: {ldct_runs['n_test']} test case(s)")


def test_validate_invalid(ldct_runs):
    proc = ldct_runs["validate_missing"]
    assert proc.returncode == 1
    assert proc.stdout.startswith("INVALID: ")
    assert "missing test case" in proc.stdout and repr(ldct_runs["dropped"]) in proc.stdout


def test_validate_needs_task_and_data(rexmle, tmp_path):
    assert_usage_error(rexmle("validate", "--submission", str(tmp_path)), "--task", "--data")


def test_status_shows_running_and_finished_runs(tmp_path, rexmle):
    """A run with run.json only is running (elapsed from its start); one with result.json shows its status."""
    import json as _json
    from datetime import datetime, timedelta

    from pytest_rexmle.status import collect

    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    running = tmp_path / "isles22" / "sample-abc" / "20260101T110000-1"
    running.mkdir(parents=True)
    (running / "run.json").write_text(_json.dumps({"task": "isles22", "agent": "sample", "time_limit": 86400,
                                                   "gpus": ["1"], "started": (now - timedelta(minutes=90)).isoformat()}))
    done = tmp_path / "ldct-iqa" / "sample-abc" / "20260101T100000-1"
    done.mkdir(parents=True)
    (done / "run.json").write_text(_json.dumps({"task": "ldct-iqa", "agent": "sample", "time_limit": 60,
                                                "started": now.isoformat(), "finished": now.isoformat()}))
    (done / "result.json").write_text(_json.dumps({"status": "timeout", "percentile": 0.0,
                                                   "timings": {"agent_seconds": 60.4}}))
    rows = {r["task"]: r for r in collect(tmp_path, now=now)}
    assert rows["isles22"]["state"] == "running" and rows["isles22"]["elapsed"] == 5400.0
    assert rows["ldct-iqa"]["state"] == "timeout" and rows["ldct-iqa"]["elapsed"] == 60.4
    out = rexmle("status", "--runs-dir", str(tmp_path), "--running")
    assert out.returncode == 0, out.stderr
    assert "isles22" in out.stdout and " running " in out.stdout and "/ 24:00:00  gpu 1" in out.stdout
    assert "ldct-iqa" not in out.stdout


def test_grade_and_validate_word_a_missing_folder_the_same(rexmle, tmp_path):
    """Before: grade said "missing: no submission.csv ...", validate "INVALID: sample_submission.csv is missing"."""
    gone = tmp_path / "no-such-submission"
    (tmp_path / "public").mkdir()
    grade = rexmle("grade", "ldct-iqa", "--submission", str(gone), "--answers", str(tmp_path))
    validate = rexmle("validate", "--task", "ldct-iqa", "--data", str(tmp_path / "public"), "--submission", str(gone))
    expected = f"rexmle: error: submission folder {gone} does not exist"
    assert (grade.returncode, grade.stderr.strip()) == (2, expected)
    assert (validate.returncode, validate.stderr.strip()) == (2, expected)
    no_data = rexmle("validate", "--task", "ldct-iqa", "--data", str(tmp_path / "nope"), "--submission", str(tmp_path))
    assert no_data.returncode == 2 and f"public data folder {tmp_path / 'nope'} does not exist" in no_data.stderr


def test_grade_without_answers_suggests_the_cli_flag(rexmle, tmp_path):
    """Before: the hint was pytest's --rexmle-data=synthetic, which `rexmle grade` rejects."""
    proc = rexmle("grade", "ldct-iqa", "--submission", str(tmp_path), "--data-dir", str(tmp_path / "empty"))
    assert proc.returncode == 2
    assert "--data synthetic" in proc.stderr and "--rexmle-data" not in proc.stderr
    assert f"rexmle prepare ldct-iqa --data-dir {tmp_path / 'empty'}" in proc.stderr


@pytest.mark.parametrize(("argv", "collector_on"), [(["grade", "--help"], False), (["list"], False),
                                                    (["prepare", "--help"], True)])
def test_the_entry_point_runs_bounded_commands_without_the_cyclic_collector(monkeypatch, argv, collector_on):
    # `rexmle` / `python -m pytest_rexmle` go through cli.entry; main() itself, called in-process, never touches gc
    import gc

    from pytest_rexmle import cli

    seen = []
    monkeypatch.setattr(sys, "argv", ["rexmle", *argv])
    monkeypatch.setattr(cli, "main", lambda: seen.append(gc.isenabled()) or 3)
    try:
        with pytest.raises(SystemExit) as exit_:
            cli.entry()
        frozen = gc.get_freeze_count()
    finally:
        gc.unfreeze()
        gc.enable()
    assert exit_.value.code == 3 and seen == [collector_on] and frozen > 0


def test_main_called_in_process_leaves_the_collector_alone(capsys):
    import gc

    from pytest_rexmle.cli import main

    assert main(["list"]) == 0 and gc.isenabled() and gc.get_freeze_count() == 0
    assert "topcow-cta-seg" in capsys.readouterr().out


def test_fetch_routes_name_what_was_asked_for():
    """``rexmle images build`` when the engine cannot fetch a recipe's FROM: the ways on (no engine needed here;
    tests/docker/test_image_build_cli.py runs the real build)."""
    from pytest_rexmle.agents.image_build import fetch_routes

    torch = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
    for_aide = fetch_routes(torch, ["aide"])
    assert for_aide.splitlines()[0] == f"this Docker engine does not have {torch} and could not fetch it (above); ways on:"
    assert "--agent aide --base IMAGE" in for_aide and "rexmle images export --agent aide FILE" in for_aide
    assert f"docker pull MIRROR/{torch}" in for_aide
    base_only = fetch_routes(torch, ["base"])
    assert "--build-arg TORCH_IMAGE=IMAGE" in base_only and "images export" not in base_only
    assert len(base_only.splitlines()) == 4 and len(for_aide.splitlines()) == 5
