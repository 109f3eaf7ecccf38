"""Sealed results: ``--rexmle-resume`` reports only what grading wrote (issue 23.3).

Unit level: a seal verifies only for the same bytes, the same run folder and the same run key, and its
key lives 0600 in the cache. Session level: a result rewritten after grading (percentile 100) is not
reported by a resumed session; the task runs again, with a warning.
"""

from __future__ import annotations

import json
import os
import shutil
import stat

import pytest

from pytest_rexmle.scoring.seal import KEY_FILE, SealError, seal_path, seal_result, verify_result

from .conftest import report_json, run_folders

KEY = {"task": "ldct-iqa", "agent": "sample", "time_limit": 600.0, "settings": {"network": "gateway"}}


def _graded(tmp_path, name="run"):
    folder = tmp_path / "runs" / name
    folder.mkdir(parents=True)
    path = folder / "result.json"
    path.write_text(json.dumps({"task_id": "ldct-iqa", "status": "ok", "percentile": 37.5}, indent=2))
    return path


def test_seal_verifies_the_result_grading_wrote(tmp_path):
    path = _graded(tmp_path)
    seal_result(path, KEY, tmp_path / "cache")
    assert json.loads(verify_result(path, KEY, tmp_path / "cache"))["percentile"] == 37.5
    key_file = tmp_path / "cache" / KEY_FILE
    assert stat.S_IMODE(os.lstat(key_file).st_mode) == 0o600 and len(key_file.read_bytes()) == 32
    assert key_file.read_bytes().hex() not in seal_path(path).read_text()


def test_rewritten_result_does_not_verify(tmp_path):
    path = _graded(tmp_path)
    seal_result(path, KEY, tmp_path / "cache")
    path.write_text(path.read_text().replace("37.5", "100.0"))
    with pytest.raises(SealError, match="does not match"):
        verify_result(path, KEY, tmp_path / "cache")


def test_seal_binds_the_folder_the_key_and_the_cache(tmp_path):
    path = _graded(tmp_path)
    seal_result(path, KEY, tmp_path / "cache")
    with pytest.raises(SealError, match="does not match"):  # run.json's key edited to another setting
        verify_result(path, {**KEY, "time_limit": 86400.0}, tmp_path / "cache")
    with pytest.raises(SealError, match="does not match"):  # another cache, another key
        verify_result(path, KEY, tmp_path / "other-cache")
    copy = _graded(tmp_path, "thief")  # a sealed result copied, seal and all, into another run folder
    shutil.copy(path, copy)
    shutil.copy(seal_path(path), seal_path(copy))
    with pytest.raises(SealError, match="does not match"):
        verify_result(copy, KEY, tmp_path / "cache")


def test_missing_forged_or_special_seal_is_refused(tmp_path):
    path = _graded(tmp_path)
    with pytest.raises(SealError, match="no seal"):
        verify_result(path, KEY, tmp_path / "cache")
    seal_path(path).write_text("rexmle-seal/1 " + "0" * 64 + "\n")
    with pytest.raises(SealError, match="does not match"):
        verify_result(path, KEY, tmp_path / "cache")
    seal_path(path).write_text("anything\n")
    with pytest.raises(SealError, match="malformed"):
        verify_result(path, KEY, tmp_path / "cache")
    seal_path(path).unlink()
    os.mkfifo(seal_path(path))  # never blocks on a FIFO the agent left
    with pytest.raises(SealError, match="unreadable"):
        verify_result(path, KEY, tmp_path / "cache")


@pytest.mark.slow  # two sessions; the seal's logic is tested above
def test_resume_rejects_a_result_rewritten_after_grading(bench, needs_bwrap):
    first = bench("--agent=sample", "-k", "ldct-iqa", "--rexmle-resume")
    first.assert_outcomes(passed=1)
    (folder,) = run_folders(bench.path, "ldct-iqa")
    graded = report_json(bench.path)["tasks"][0]
    assert graded["percentile"] < 100
    assert (folder / "result.json.seal").is_file()
    result = folder / "result.json"
    forged = json.loads(result.read_text())
    forged.update(percentile=100.0, medal="gold")
    result.write_text(json.dumps(forged, indent=2))

    again = bench("--agent=sample", "-k", "ldct-iqa", "--rexmle-resume")
    again.assert_outcomes(passed=1)
    again.stdout.fnmatch_lines(["*not resuming*result.json*seal does not match*runs again*"])
    assert len(run_folders(bench.path, "ldct-iqa")) == 2, "a result that fails its seal must be re-run"
    record = report_json(bench.path)["tasks"][0]
    assert record["percentile"] == graded["percentile"] and record["run_dir"] != str(folder)
    # the fresh run's result is sealed and reused by the next resumed session
    third = bench("--agent=sample", "-k", "ldct-iqa", "--rexmle-resume")
    third.assert_outcomes(passed=1)
    assert len(run_folders(bench.path, "ldct-iqa")) == 2
