"""Task registry: the 20 task folders, their identities and markers (grading rules: the tasks), alias lookup,
and the validation of malformed ``task.yaml`` files (the error names the file and the field)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from pytest_rexmle.errors import TaskConfigError, UnknownTaskError
from pytest_rexmle.leaderboard import metric_columns
from pytest_rexmle.task import TaskRegistry, competitions_root, load_task, registry

from .reference import metric_directions

# the benchmark's task list, row by row: project id -> (reference id, task marker, modality marker, N,
# paper names of the "paper name" column).
TABLE = {
    "usenhance": ("usenhance", "enhancement", "ultrasound", 10, ["USenhance"]),
    "ldct-iqa": ("ldct-iqa", "quality_assessment", "ct", 6, ["LDCTIQA2023", "LDCT-IQA"]),
    "panther-t1": ("panther-task1", "segmentation", "mri", 10, ["PANTHER-T1"]),
    "panther-t2": ("panther-task2", "segmentation", "mri", 10, ["PANTHER-T2"]),
    "seg-a": ("seg_a", "segmentation", "cta", 10, ["SEG.A"]),
    "dentex": ("dentex", "detection", "xray", 10, ["DENTEX"]),
    "topcow-cta-seg": ("topcow-track1-task1", "segmentation", "cta", 10, ["TopCoW-CTA-Seg"]),
    "topcow-cta-det": ("topcow-track1-task2", "detection", "cta", 8, ["TopCoW-CTA-Det"]),
    "topcow-cta-cls": ("topcow-track1-task3", "classification", "cta", 6, ["TopCoW-CTA-Cls"]),
    "topcow-mra-seg": ("topcow-track2-task1", "segmentation", "mra", 10, ["TopCoW-MRA-Seg"]),
    "topcow-mra-det": ("topcow-track2-task2", "detection", "mra", 7, ["TopCoW-MRA-Det"]),
    "topcow-mra-cls": ("topcow-track2-task3", "classification", "mra", 6, ["TopCoW-MRA-Cls"]),
    "puma-t1-tissue-seg": ("puma-track1-task1", "segmentation", "pathology", 10,
                           ["PUMA-Track1-TissueSeg", "PUMA-T1-Seg"]),
    "puma-t1-nuclei-det": ("puma-track1-task2", "detection", "pathology", 10,
                           ["PUMA-Track1-NucleiDet", "PUMA-T1-Det"]),
    "puma-t2-tissue-seg": ("puma-track2-task1", "segmentation", "pathology", 10,
                           ["PUMA-Track2-TissueSeg", "PUMA-T2-Seg"]),
    "puma-t2-nuclei-det": ("puma-track2-task2", "detection", "pathology", 10,
                           ["PUMA-Track2-NucleiDet", "PUMA-T2-Det"]),
    "isles22": ("isles22", "segmentation", "mri", 10, ["ISLES'22"]),
    "cellseg": ("neurips-cellseg", "segmentation", "microscopy", 10, ["CellSeg", "NeurIPS-CellSeg"]),
    "topbrain-cta-seg": ("topbrain-track1", "segmentation", "cta", 10, ["TopBrain-CTA-Seg", "TopBrain-CTA"]),
    "topbrain-mra-seg": ("topbrain-track2", "segmentation", "mra", 10, ["TopBrain-MRA-Seg", "TopBrain-MRA"]),
}
IDS = sorted(TABLE)


@pytest.fixture(scope="module")
def reg() -> TaskRegistry:
    return registry()


# -- the 20 real tasks -----------------------------------------------------------------------------------

def test_all_twenty_tasks_load(reg):
    assert len(reg.ids) == 20
    assert reg.ids == IDS
    assert [t.id for t in reg] == IDS  # iteration is sorted by id


def test_fresh_registry_from_the_competitions_root_matches(reg):
    fresh = TaskRegistry(competitions_root())
    assert fresh.ids == reg.ids


def test_each_task_lives_in_its_competition_folder(reg):
    """One folder per competition: ``competitions/<name>/tasks/<id>/``, next to the code task.yaml names."""
    for task in reg:
        assert task.folder.parent.name == "tasks"
        assert task.folder.parent.parent.parent == competitions_root()
        assert task.competition_name == task.folder.parent.parent.name == task.grader.partition(":")[0]
        assert (task.folder.parent.parent / "grade.py").is_file()


@pytest.mark.parametrize("task_id", IDS)
def test_identity_and_markers_follow_the_table(reg, task_id):
    reference_id, task_marker, modality_marker, _n, paper_names = TABLE[task_id]
    task = reg.get(task_id)
    assert task.id == task_id
    assert task.folder.name == task_id
    assert task.reference_id == reference_id
    assert task.task_type == task_marker
    assert task.modality == modality_marker
    # exactly one task-type marker and one modality marker
    assert sorted(task.markers) == sorted([task_marker, modality_marker])
    assert [m for m in task.markers if m in reg.task_types] == [task_marker]
    assert [m for m in task.markers if m in reg.modalities] == [modality_marker]
    assert task.paper_name in paper_names
    assert set(paper_names) <= set(task.extra.get("paper_names", []))


def test_marker_vocabulary_is_read_from_the_tasks(reg):
    assert reg.task_types == ["classification", "detection", "enhancement", "quality_assessment", "segmentation"]
    assert reg.modalities == ["ct", "cta", "microscopy", "mra", "mri", "pathology", "ultrasound", "xray"]


@pytest.mark.parametrize("task_id", IDS)
def test_time_limit_defaults_to_24_hours(reg, task_id):
    task = reg.get(task_id)
    assert task.time_limit_hours == 24.0
    assert task.time_limit_seconds == 86400.0  # 24 * 3600


@pytest.mark.parametrize("task_id", IDS)
def test_ranking_metrics_equal_leaderboard_metric_columns(reg, task_id):
    task = reg.get(task_id)
    ranking = [m.key for m in task.ranking_metrics]
    columns = metric_columns(task.leaderboard_path)
    assert sorted(ranking) == sorted(columns)
    assert len(ranking) == len(set(ranking)) >= 1
    for metric in task.metrics:
        assert metric.direction in ("higher_better", "lower_better")


@pytest.mark.parametrize("task_id", IDS)
def test_directions_agree_with_shared_metric_config(reg, task_id):
    """Directions come from each task's metric_config.json of the reference data (shipped in tests/reference)."""
    task = reg.get(task_id)
    directions = metric_directions(task.reference_id)
    for metric in task.ranking_metrics:
        assert directions[metric.key] == metric.direction, metric.key


def test_sega_std_keys_never_rank(reg):
    # SEG.A's hd_std/dsc_std are in metric_config but not leaderboard columns.
    task = reg.get("seg-a")
    assert [m.key for m in task.ranking_metrics] == ["hd_50pc", "dsc_50pc"]
    assert {m.key: m.direction for m in task.ranking_metrics} == {"hd_50pc": "lower_better",
                                                                   "dsc_50pc": "higher_better"}


# -- aliases ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("task_id", IDS)
def test_reference_id_is_an_alias(reg, task_id):
    assert reg.get(TABLE[task_id][0]).id == task_id


@pytest.mark.parametrize("alias, task_id", [
    ("topcow-track1-task2", "topcow-cta-det"),
    ("topcow-track2-task3", "topcow-mra-cls"),
    ("neurips-cellseg", "cellseg"),
    ("seg_a", "seg-a"),
    ("seg.a", "seg-a"),
    ("panther-task2", "panther-t2"),
    ("ldctiqa2023", "ldct-iqa"),
    ("puma-t1-seg", "puma-t1-tissue-seg"),
    ("puma-track2-nucleidet", "puma-t2-nuclei-det"),
    ("topbrain-mra", "topbrain-mra-seg"),
    ("topbrain-track1", "topbrain-cta-seg"),
])
def test_aliases_resolve(reg, alias, task_id):
    assert reg.get(alias).id == task_id


def test_no_alias_is_shared_between_tasks(reg):
    owner: dict[str, str] = {}
    for task in reg:
        for name in {task.id, task.reference_id, *task.aliases}:
            assert owner.setdefault(name, task.id) == task.id, name


def test_unknown_id_lists_known_ids(reg):
    with pytest.raises(UnknownTaskError) as info:
        reg.get("topcow-cta-dett")
    message = str(info.value)
    assert "'topcow-cta-dett'" in message
    for task_id in IDS:
        assert task_id in message


# -- malformed task folders ------------------------------------------------------------------------------

SOURCE_TASK = "topcow-cta-det"


def _copy_task(root: Path, task_id: str = SOURCE_TASK, folder_name: str | None = None) -> Path:
    """The task's folder copied into a competitions root, ``root/<competition>/tasks/<folder_name>``."""
    source = registry().get(task_id).folder
    folder = root / source.parent.parent.name / "tasks" / (folder_name or task_id)
    shutil.copytree(source, folder)
    return folder


def _edit(folder: Path, change) -> Path:
    path = folder / "task.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _expect_config_error(folder: Path, field: str, *more: str) -> str:
    with pytest.raises(TaskConfigError) as info:
        load_task(folder)
    message = str(info.value)
    assert str(folder / "task.yaml") in message, message
    assert f"'{field}'" in message, message
    for text in more:
        assert text in message, message
    return message


def test_unchanged_copy_loads(tmp_path):
    folder = _copy_task(tmp_path)
    task = load_task(folder)
    assert task.id == SOURCE_TASK
    assert task.folder == folder
    assert [m.key for m in task.ranking_metrics] == ["boundary_iou", "iou"]
    reg = TaskRegistry(tmp_path)
    assert reg.ids == [SOURCE_TASK]
    assert reg.get("topcow-track1-task2").id == SOURCE_TASK


@pytest.mark.parametrize("field", ["reference_id", "id", "name", "paper_name", "competition", "modality",
                                   "task_type", "markers", "source", "time_limit_hours", "gpus", "version",
                                   "id_column"])
def test_missing_field(tmp_path, field):
    folder = _copy_task(tmp_path)
    _edit(folder, lambda d: d.pop(field))
    _expect_config_error(folder, field, "missing")


@pytest.mark.parametrize("field, value", [
    ("gpus", "one"),
    ("gpus", True),            # a bool is not an int here
    ("gpus", 1.5),
    ("time_limit_hours", "24h"),
    ("version", "1"),
    ("reference_id", 7),
    ("markers", "detection"),
    ("source", "topcow"),
    ("id_column", ["image_id"]),
])
def test_wrong_type(tmp_path, field, value):
    folder = _copy_task(tmp_path)
    _edit(folder, lambda d: d.__setitem__(field, value))
    _expect_config_error(folder, field, "must be")


@pytest.mark.parametrize("field, value", [("time_limit_hours", 0), ("time_limit_hours", -1), ("gpus", -1),
                                          ("version", 0)])
def test_out_of_range_number(tmp_path, field, value):
    folder = _copy_task(tmp_path)
    _edit(folder, lambda d: d.__setitem__(field, value))
    _expect_config_error(folder, field)


def _set(key: str, value):
    return lambda d: d.__setitem__(key, value)


def _set_metric(index: int, key: str, value):
    return lambda d: d["metrics"][index].__setitem__(key, value)


def _add_metric(key: str, ranks: bool):
    return lambda d: d["metrics"].append({"key": key, "direction": "higher_better", "ranks": ranks})


#: one edit of an otherwise valid task.yaml -> the field its error names, and what else the message says
ONE_BAD_EDIT = {
    "missing-metrics": (lambda d: d.pop("metrics"), "metrics", ()),
    "bad-direction": (_set_metric(1, "direction", "higher"), "metrics[1].direction", ("'higher'",)),
    "ranks-must-be-bool": (_set_metric(0, "ranks", "yes"), "metrics[0].ranks", ()),
    "repeated-metric-key": (_add_metric("iou", ranks=False), "metrics", ("iou",)),
    "bad-modality": (_set("modality", "MR angiography"), "modality", ("'MR angiography'", "lower-case")),
    "bad-task-type": (_set("task_type", "Registration"), "task_type", ("'Registration'", "lower-case")),
    "grader-of-another-competition": (_set("grader", "ldct:QualityScore"), "grader",
                                      ("'ldct'", "'topcow'", "competition folder")),
    "markers-must-contain-type-and-modality": (_set("markers", ["detection"]), "markers", ("'cta'",)),
    "source-needs-raw": (lambda d: d["source"].pop("raw"), "source.raw", ()),
    "ranking-metric-not-a-leaderboard-column": (_add_metric("dice", ranks=True), "metrics",
                                                ("leaderboard.csv", "dice")),
    # iou no longer ranks
    "leaderboard-column-not-ranked": (_set_metric(1, "ranks", False), "metrics", ("leaderboard.csv", "iou")),
    "bad-grader-reference": (_set("grader", "topcow.BoxDetection"), "grader", ("competition:attribute",)),
    "aliases-must-be-strings": (_set("aliases", ["ok", 3]), "aliases[1]", ("got 3",)),
}


@pytest.mark.parametrize("case", list(ONE_BAD_EDIT))
def test_one_bad_edit_is_named(tmp_path, case):
    change, field, more = ONE_BAD_EDIT[case]
    folder = _copy_task(tmp_path)
    _edit(folder, change)
    _expect_config_error(folder, field, *more)


def test_id_must_equal_folder_name(tmp_path):
    folder = _copy_task(tmp_path, folder_name="topcow-cta-detection")
    message = _expect_config_error(folder, "id", "'topcow-cta-det'", "'topcow-cta-detection'")
    assert "folder" in message


def test_missing_leaderboard_file(tmp_path):
    folder = _copy_task(tmp_path)
    (folder / "leaderboard.csv").unlink()
    with pytest.raises(TaskConfigError, match=re.escape(str(folder / "leaderboard.csv"))):
        load_task(folder)


@pytest.mark.parametrize("text", ["id: [topcow-cta-det\n", "id: topcow-cta-det\n  name: : x\n\t- bad"])
def test_invalid_yaml(tmp_path, text):
    folder = _copy_task(tmp_path)
    (folder / "task.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(TaskConfigError) as info:
        load_task(folder)
    assert str(folder / "task.yaml") in str(info.value)
    assert "YAML" in str(info.value)


def test_top_level_not_a_mapping(tmp_path):
    folder = _copy_task(tmp_path)
    (folder / "task.yaml").write_text("- id\n- name\n", encoding="utf-8")
    with pytest.raises(TaskConfigError, match="mapping"):
        load_task(folder)


def test_duplicate_alias_between_tasks(tmp_path):
    _copy_task(tmp_path, "topcow-cta-det")
    other = _copy_task(tmp_path, "topcow-mra-det")
    # topcow-mra-det now also claims the reference id of topcow-cta-det
    _edit(other, lambda d: d.__setitem__("aliases", ["topcow-track2-task2", "topcow-track1-task2"]))
    with pytest.raises(TaskConfigError) as info:
        TaskRegistry(tmp_path)
    message = str(info.value)
    assert "'topcow-track1-task2'" in message
    assert "task.yaml" in message
    assert "topcow-cta-det" in message and "topcow-mra-det" in message


def test_registry_surfaces_a_broken_folder(tmp_path):
    _copy_task(tmp_path, "topcow-cta-det")
    broken = _copy_task(tmp_path, "ldct-iqa")
    _edit(broken, lambda d: d.__setitem__("modality", "CT"))
    with pytest.raises(TaskConfigError) as info:
        TaskRegistry(tmp_path)
    assert str(broken / "task.yaml") in str(info.value)
    assert "'modality'" in str(info.value)


def test_public_files_reach_the_agent_and_must_exist(tmp_path, shared_cache):
    """TopBrain's neighbour table is part of what the agent gets; a missing declared file is a config error."""
    import shutil

    import yaml

    from pytest_rexmle.data.synthetic import ensure_synthetic
    from pytest_rexmle.errors import TaskConfigError
    from pytest_rexmle.task import load_task, registry

    task = registry().get("topbrain-mra-seg")
    assert task.public_files == ("valid_neighbors_mr_all.json",)
    twin = ensure_synthetic(task, shared_cache)
    assert (twin.public / "valid_neighbors_mr_all.json").read_bytes() == \
        (task.folder / "valid_neighbors_mr_all.json").read_bytes()
    folder = tmp_path / "topbrain-mra-seg"
    shutil.copytree(task.folder, folder)
    data = yaml.safe_load((folder / "task.yaml").read_text())
    data["public_files"] = ["missing.json"]
    (folder / "task.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(TaskConfigError, match=r"task.yaml: field 'public_files' names 'missing.json'"):
        load_task(folder)


def test_a_new_task_type_and_modality_are_data(tmp_path):
    """Task types and modalities are open: a new one is a task.yaml value, listed by the registry."""
    folder = _copy_task(tmp_path)
    _edit(folder, lambda d: d.update(task_type="registration", modality="oct",
                                     markers=["registration", "oct"]))
    reg = TaskRegistry(tmp_path)
    assert reg.get(SOURCE_TASK).task_type == "registration" and reg.get(SOURCE_TASK).modality == "oct"
    assert reg.task_types == ["registration"] and reg.modalities == ["oct"]


def test_the_same_task_id_in_two_competitions(tmp_path):
    _copy_task(tmp_path)
    twin = tmp_path / "elsewhere" / "tasks" / SOURCE_TASK
    shutil.copytree(registry().get(SOURCE_TASK).folder, twin)
    for field in ("grader", "synthetic", "prepare"):
        _edit(twin, lambda d, f=field: d.__setitem__(f, "elsewhere:" + d[f].partition(":")[2]))
    with pytest.raises(TaskConfigError, match=f"task id '{SOURCE_TASK}' is also the id of"):
        TaskRegistry(tmp_path)


def test_the_old_tasks_variable_is_refused_with_its_replacement(monkeypatch, tmp_path):
    monkeypatch.setenv("REXMLE_TASKS_DIR", str(tmp_path))
    with pytest.raises(TaskConfigError, match="REXMLE_TASKS_DIR is no longer read.*REXMLE_COMPETITIONS_DIR"):
        competitions_root()


def test_the_wheel_holds_every_file_of_every_task(tmp_path):
    """A non-editable install reads the tasks from the package: every tracked task file is in the wheel, where
    the registry looks for it (``pytest_rexmle/competitions/<name>/tasks/<id>/``)."""
    import subprocess
    import sys
    import zipfile

    repo = Path(__file__).resolve().parents[1]
    if not (repo / ".git").exists():
        pytest.skip("needs the source checkout")
    tracked = subprocess.run(["git", "ls-files", "pytest_rexmle/competitions/*/tasks/*"], cwd=repo,
                             capture_output=True, text=True, check=True).stdout.split()
    assert len([n for n in tracked if n.endswith("/task.yaml")]) == 20
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(repo)],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    [wheel] = tmp_path.glob("pytest_rexmle-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert sorted(set(tracked) - names) == []
    assert "pytest_rexmle/py.typed" in names   # PEP 561: type checkers read the installed package's hints


def test_a_competition_folder_must_be_a_package_name(tmp_path):
    folder = _copy_task(tmp_path)
    folder.parent.parent.rename(tmp_path / "top-cow")
    with pytest.raises(TaskConfigError, match="must be an identifier .* got 'top-cow'"):
        TaskRegistry(tmp_path)
