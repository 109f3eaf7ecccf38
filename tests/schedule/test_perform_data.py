"""A run's own process: its data step under ``--rexmle-prepare`` (a source that needs a manual download
skips the item), and what it imports."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_rexmle.data.prepare import ManualDownloadRequired
from pytest_rexmle.errors import DataNotPreparedError
from pytest_rexmle.schedule import perform


def test_manual_download_becomes_a_skip_reason_with_the_prepare_command(tmp_path, monkeypatch):
    task = SimpleNamespace(id="panther-t1")
    settings = SimpleNamespace(prepare=True, data_dir=tmp_path)

    def not_prepared(settings, task):
        raise DataNotPreparedError("not prepared", "rexmle prepare panther-t1")

    def needs_click(task, data_dir, progress):
        raise ManualDownloadRequired("download part1.zip from https://drive.example/page by hand")

    monkeypatch.setattr(perform, "task_data", not_prepared)
    monkeypatch.setattr("pytest_rexmle.data.prepare.prepare_task", needs_click)
    with pytest.raises(DataNotPreparedError) as info:
        perform._data(settings, task)
    assert "part1.zip" in str(info.value)
    assert info.value.command == f"rexmle prepare panther-t1 --data-dir {tmp_path}"


def test_a_runs_process_loads_without_pytest():
    """Each run has a process of its own that reads the session's Settings: importing pytest there
    was the largest part of a run's start (README, "Where a run's overhead goes")."""
    import subprocess
    import sys

    code = ("import sys, pytest_rexmle.schedule.perform, pytest_rexmle.settings, pytest_rexmle.run.begin, "
            "pytest_rexmle.run.launch, pytest_rexmle.runtime.local; print(sorted({'pytest', '_pytest'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
