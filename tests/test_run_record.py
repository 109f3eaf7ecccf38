"""run.json through RunRecord: a bad file names the file and the field; writing keeps only set keys."""

from __future__ import annotations

import json

import pytest

from pytest_rexmle.documents import DocumentError
from pytest_rexmle.runtime.record import RunRecord, write_run_record

START = {"task": "isles22", "agent": "sample", "agent_options": {}, "runtime": "local", "data": "synthetic",
         "time_limit": 60, "gpus": [], "key": {"task": "isles22"}, "started": "2026-11-26T10:00:00+00:00"}


def test_bad_run_json_names_the_file_and_the_field(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({**START, "time_limit": "a day"}))
    with pytest.raises(DocumentError) as info:
        RunRecord.read(path)
    assert str(info.value) == f"{path}: field 'time_limit' must be a valid number, unable to parse string as a " \
                              f"number, got 'a day'"
    path.write_text(json.dumps({k: v for k, v in START.items() if k != "started"}))
    with pytest.raises(ValueError) as info:
        RunRecord.read(path)
    assert str(info.value) == f"{path}: missing required field 'started'"


def test_written_record_keeps_set_and_foreign_keys_only(tmp_path):
    path = tmp_path / "run.json"
    write_run_record(path, {**START, "job_id": "42"})
    on_disk = json.loads(path.read_text())
    assert on_disk == {**START, "time_limit": 60.0, "job_id": "42"}
    assert "finished" not in on_disk               # `rexmle status` reads its absence as "still running"
    assert RunRecord.read(path).finished is None
    with pytest.raises(DocumentError, match="field 'exit_code'"):
        write_run_record(path, {**START, "exit_code": "crashed"})
    assert json.loads(path.read_text()) == on_disk  # a refused record leaves the file as it was


def test_a_resubmitted_slurm_job_adds_to_run_json_through_the_record(tmp_path):
    from pytest_rexmle.runtime.base import RunSpec
    from pytest_rexmle.runtime.slurm import _append_run_record

    write_run_record(tmp_path / "run.json", {**START, "reattached": True})
    spec = RunSpec("isles22", ["true"], {}, tmp_path / "data", tmp_path / "workspace", tmp_path / "submission",
                   tmp_path / "logs", tmp_path / "instructions.md", 60)
    _append_run_record(spec, {"requeued_after": "PREEMPTED", "slurm": {"job_id": "43", "attempts": 2}})
    assert json.loads((tmp_path / "run.json").read_text()) == {
        **START, "time_limit": 60.0, "reattached": True, "requeued_after": "PREEMPTED",
        "slurm": {"job_id": "43", "attempts": 2}}
