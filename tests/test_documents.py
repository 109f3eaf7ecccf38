"""The typed documents together: every model is fully defined, errors name the document and the field,
and a data manifest written by its model reads back the same."""

from __future__ import annotations

import json

import pytest

from pytest_rexmle.capability.schema import AgentCapability, CapabilityRun, SessionCapability
from pytest_rexmle.capability.stages import StageScores
from pytest_rexmle.data.taskdata import MANIFEST, DataManifest
from pytest_rexmle.documents import DocumentError, explain, field_name, json_numbers, number
from pytest_rexmle.report.merge import MergedReport
from pytest_rexmle.report.model import SessionReport
from pytest_rexmle.runtime.record import RunRecord
from pytest_rexmle.task import Task

MODELS = [Task, RunRecord, SessionReport, MergedReport, CapabilityRun, AgentCapability, SessionCapability,
          StageScores, DataManifest]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_model_is_fully_defined(model):
    model.model_rebuild(raise_errors=True)  # raises on a name the module forgot to import
    assert model.__pydantic_complete__


def test_field_names_read_like_paths():
    assert field_name(("metrics", 1, "direction")) == "metrics[1].direction"
    assert field_name(("agents", 0, "challenges", 2)) == "agents[0].challenges[2]"
    assert field_name(()) == ""


def test_non_finite_numbers_round_trip_through_strings():
    assert json_numbers({"a": [float("inf"), -float("inf"), 1.5]}) == {"a": ["inf", "-inf", 1.5]}
    assert number("-inf") == -float("inf") and number(2) == 2 and number("x") == "x"


def _manifest(**over) -> dict:
    return {"project_id": "isles22", "kind": "synthetic", "rule_version": "synthetic-3", "task_version": 1,
            "files": {"public/a.nii.gz": "ab" * 32}, "seed": 7, "answers_id": "seed-7", **over}


def test_manifest_written_by_its_model_reads_back(tmp_path):
    DataManifest.check(_manifest()).write(tmp_path / "private" / MANIFEST)
    on_disk = json.loads((tmp_path / "private" / MANIFEST).read_text())
    assert on_disk == _manifest()                      # only the keys that were set, under their JSON names
    assert DataManifest.read(tmp_path).seed == 7


def test_bad_manifest_names_the_field_and_reads_as_absent(tmp_path):
    with pytest.raises(DocumentError) as info:
        DataManifest.check(_manifest(kind="downloaded"), "prepare_manifest.json")
    assert str(info.value).startswith("prepare_manifest.json: field 'kind' must be 'prepared' or 'synthetic'")
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / MANIFEST).write_text(json.dumps(_manifest(task_version="one")))
    assert DataManifest.read(tmp_path) is None         # the folder is then prepared or generated again


def test_explain_counts_further_problems():
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as info:
        RunRecord.model_validate({"task": 1})
    message = explain(info.value, "run.json")
    assert message.startswith("run.json: ") and "more problem(s)" in message
