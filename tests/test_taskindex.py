"""The compiled task.yaml index: same documents as the YAML parser, refreshed when a file changes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pytest_rexmle import taskindex
from pytest_rexmle.errors import TaskConfigError
from pytest_rexmle.task import TaskRegistry, tasks_root


@pytest.fixture
def indexed_tasks(tmp_path, monkeypatch):
    """A copy of the task folders that the index treats like a checkout (not a temporary folder)."""
    root = tmp_path / "checkout" / "tasks"
    shutil.copytree(tasks_root(), root)
    monkeypatch.setenv("REXMLE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(taskindex.tempfile, "gettempdir", lambda: str(tmp_path / "elsewhere"))
    monkeypatch.setattr(taskindex, "_loaded", {})
    return root


def test_index_holds_exactly_what_the_parser_returns(indexed_tasks):
    TaskRegistry(indexed_tasks)
    index = taskindex._index_file(indexed_tasks)
    entries = json.loads(index.read_text())["files"]
    assert sorted(entries) == sorted(p.parent.name for p in indexed_tasks.glob("*/task.yaml"))
    for name, entry in entries.items():
        assert entry["data"] == yaml.safe_load((indexed_tasks / name / "task.yaml").read_text())


def test_changed_file_is_parsed_again(indexed_tasks, monkeypatch):
    assert TaskRegistry(indexed_tasks).get("isles22").name != "Renamed"
    path = indexed_tasks / "isles22" / "task.yaml"
    data = yaml.safe_load(path.read_text())
    data["name"] = "Renamed"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    os.utime(path, ns=(1, 1))                      # a different stamp even on a coarse clock
    monkeypatch.setattr(taskindex, "_loaded", {})  # a new process
    assert TaskRegistry(indexed_tasks).get("isles22").name == "Renamed"


def test_damaged_index_is_ignored_and_rewritten(indexed_tasks, monkeypatch):
    TaskRegistry(indexed_tasks)
    index = taskindex._index_file(indexed_tasks)
    index.write_text('{"version": 1, "files": [1, 2')
    monkeypatch.setattr(taskindex, "_loaded", {})
    assert len(TaskRegistry(indexed_tasks)) == len(list(indexed_tasks.glob("*/task.yaml")))
    assert json.loads(index.read_text())["version"] == taskindex.INDEX_VERSION


def test_invalid_yaml_still_names_the_file(indexed_tasks):
    path = indexed_tasks / "isles22" / "task.yaml"
    path.write_text("id: [unclosed\n")
    with pytest.raises(TaskConfigError, match="not valid YAML") as info:
        TaskRegistry(indexed_tasks)
    assert str(path) in str(info.value)


def test_warm_start_imports_no_yaml(tmp_path):
    (tmp_path / "tmp").mkdir()   # TMPDIR elsewhere: the checkout may itself live in /tmp
    env = dict(os.environ, REXMLE_CACHE_DIR=str(tmp_path / "cache"), TMPDIR=str(tmp_path / "tmp"))
    code = "import sys; from pytest_rexmle.task import registry; registry(); print('yaml' in sys.modules)"
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert first.stdout.strip() == "True"          # cold: parsed and indexed
    assert second.stdout.strip() == "False"        # warm: the index alone


def test_libyaml_and_python_loaders_agree_on_every_task():
    for path in sorted(Path(tasks_root()).glob("*/task.yaml")):
        text = path.read_text(encoding="utf-8")
        assert yaml.load(text, Loader=yaml.SafeLoader) == taskindex.parse_yaml(path), path
