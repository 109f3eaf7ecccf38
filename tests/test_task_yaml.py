"""task.yaml read through the Task model: the parser's documents, a changed file read again, errors that
name the file and the field, and a registry that loads without the numerical stack."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pytest_rexmle.errors import TaskConfigError
from pytest_rexmle.task import TaskRegistry, competitions_root, read_yaml


@pytest.fixture
def tasks_copy(tmp_path):
    root = tmp_path / "checkout" / "competitions"
    shutil.copytree(competitions_root(), root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_changed_file_is_read_again(tasks_copy):
    assert TaskRegistry(tasks_copy).get("isles22").name != "Renamed"
    path = tasks_copy / "isles22" / "tasks" / "isles22" / "task.yaml"
    data = yaml.safe_load(path.read_text())
    data["name"] = "Renamed"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert TaskRegistry(tasks_copy).get("isles22").name == "Renamed"


def test_invalid_yaml_names_the_file(tasks_copy):
    path = tasks_copy / "isles22" / "tasks" / "isles22" / "task.yaml"
    path.write_text("id: [unclosed\n")
    with pytest.raises(TaskConfigError, match="not valid YAML") as info:
        TaskRegistry(tasks_copy)
    assert str(path) in str(info.value)


def test_wrong_field_type_names_the_file_the_field_and_the_value(tasks_copy):
    path = tasks_copy / "isles22" / "tasks" / "isles22" / "task.yaml"
    data = yaml.safe_load(path.read_text())
    data["metrics"][0]["direction"] = "upwards"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(TaskConfigError) as info:
        TaskRegistry(tasks_copy)
    message = str(info.value)
    assert message.startswith(f"{path}: field 'metrics[0].direction' must be ")
    assert "'higher_better'" in message and message.endswith("got 'upwards'")


def test_registry_loads_without_numpy(tmp_path):
    code = "import sys; from pytest_rexmle.task import registry; registry(); print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, REXMLE_CACHE_DIR=str(tmp_path)),
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_libyaml_and_python_loaders_agree_on_every_task():
    for path in sorted(Path(competitions_root()).glob("*/tasks/*/task.yaml")):
        text = path.read_text(encoding="utf-8")
        assert yaml.load(text, Loader=yaml.SafeLoader) == read_yaml(path), path
