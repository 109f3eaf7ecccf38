"""The task registry: one folder per competition, ``competitions/<name>/``, holding its code and its tasks.

A competition folder (``pytest_rexmle/competitions/<name>/``) holds the competition's code (``grade.py``,
``synthetic.py``, ``prepare.py``, ``source.py``) and one folder per task it contributes, ``tasks/<id>/``.
The registry finds every ``competitions/*/tasks/*/task.yaml``; a task's competition is the folder it lives
in, so adding a competition is adding one folder (no table lists them).

A task folder is declarative: ``task.yaml`` (identity, markers, source facts, budget, metrics and the
names of its grader and synthetic-data generator), ``leaderboard.csv`` (the human top-N) and
``description.md`` (what the agent reads). Code never hard-codes per-task facts that belong there.

task.yaml fields (all required unless marked optional):

* ``id`` (str): project id, e.g. ``topcow-cta-det``; must equal the folder name.
* ``reference_id`` (str): the task's id in the ReX-MLE reference implementation, e.g.
  ``topcow-track1-task2``; accepted wherever a task id is.
* ``aliases`` (list[str], optional): further accepted ids (paper names in lower case).
* ``name``, ``paper_name``, ``competition`` (str); ``paper_names`` (list, optional).
* ``modality`` and ``task_type`` (lower-case identifiers, e.g. ``ct`` and ``segmentation``; a new one is
  just a new value, registered as a pytest marker from the tasks that use it), ``markers`` (list, which
  must contain both).
* ``source`` (mapping with at least ``raw``: the name of the release's folder under the raw-data root).
* ``time_limit_hours`` (number > 0, default budget 24), ``gpus`` (int >= 0), ``version`` (int >= 1).
* ``id_column`` (str): the case-id column of ``submission.csv``.
* ``metrics`` (list of ``{key, direction: higher_better|lower_better, ranks: bool}``). Ranking metrics
  must be exactly the metric columns of ``leaderboard.csv``.
* ``public_files`` (list[str], optional): files of the task folder the agent gets in ``public/`` next to
  ``description.md`` (e.g. TopBrain's valid-neighbour table, which its ``neighbor_error`` metric uses).
* ``limits`` (mapping, optional): per-run resource limits over the project-wide defaults of
  :class:`pytest_rexmle.limits.Limits`, e.g. ``{memory: 32G, processes: 1024, disk: 200G,
  tmp: 50G, file_size: 64G}``; ``--rexmle-limit`` overrides them.
* ``grader`` / ``synthetic`` / ``prepare`` (optional ``<competition>:<attribute>``): the grader class, the
  synthetic-twin generator and the real-data preparer, found in the competition's ``grade.py``,
  ``synthetic.py`` and ``prepare.py`` (see :func:`resolve`). ``<competition>`` must be the name of the
  folder the task lives in. A task without a grader yet is collected and skipped with that reason.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationInfo, field_validator

from .documents import parse
from .errors import TaskConfigError, UnknownTaskError
from .leaderboard import metric_columns
from .limits import LimitError, Limits
from .paths import Entry

#: a task type or modality: a lower-case identifier, so that it is also a valid pytest marker name
VOCABULARY_WORD = re.compile(r"[a-z][a-z0-9_]*")
#: the package's own competitions
PACKAGE_COMPETITIONS = Path(__file__).resolve().with_name("competitions")


class Metric(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True)

    key: StrictStr = Field(min_length=1)
    direction: Literal["higher_better", "lower_better"]
    ranks: StrictBool = True

    @property
    def higher_is_better(self) -> bool:
        return self.direction == "higher_better"


class Task(BaseModel):
    """One task folder's ``task.yaml`` (the folder itself is passed in, never read from the file)."""

    model_config = ConfigDict(frozen=True, extra="allow", arbitrary_types_allowed=True, ignored_types=(Entry,))

    folder: Path
    id: StrictStr
    reference_id: StrictStr
    name: StrictStr
    paper_name: StrictStr
    competition: StrictStr
    modality: StrictStr
    task_type: StrictStr
    markers: tuple[StrictStr, ...]
    source: dict[StrictStr, Any]
    time_limit_hours: float = Field(gt=0, strict=True)
    gpus: StrictInt = Field(ge=0)
    version: StrictInt = Field(ge=1)
    id_column: StrictStr
    metrics: tuple[Metric, ...] = Field(min_length=1)
    aliases: tuple[StrictStr, ...] = ()
    grader: StrictStr | None = None
    synthetic: StrictStr | None = None
    prepare: StrictStr | None = None
    public_files: tuple[StrictStr, ...] = ()
    url: StrictStr | None = None
    #: limits.Limits: task.yaml's ``limits:`` over the project defaults
    limits: Any = Field(default=None, validate_default=True)

    @field_validator("id")
    @classmethod
    def _named_like_folder(cls, value: str, info: ValidationInfo) -> str:
        folder = info.data.get("folder")
        if folder is not None and value != folder.name:
            raise ValueError(f"is {value!r} but the folder is named {folder.name!r}")
        return value

    @field_validator("modality", "task_type")
    @classmethod
    def _lower_case_word(cls, value: str) -> str:
        if not VOCABULARY_WORD.fullmatch(value):
            raise ValueError(f"must be a lower-case identifier (letters, digits, '_'), like 'ct' or "
                             f"'quality_assessment', got {value!r}")
        return value

    @field_validator("markers")
    @classmethod
    def _marks_type_and_modality(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        for marker in (info.data.get("task_type"), info.data.get("modality")):
            if marker is not None and marker not in value:
                raise ValueError(f"must contain {marker!r}")
        return value

    @field_validator("source")
    @classmethod
    def _names_raw_folder(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(value.get("raw"), str):
            raise ValueError("needs 'source.raw', the shared raw-data folder name, as a string")
        return value

    @field_validator("metrics")
    @classmethod
    def _unique_keys(cls, value: tuple[Metric, ...]) -> tuple[Metric, ...]:
        keys = [m.key for m in value]
        if len(set(keys)) != len(keys):
            raise ValueError(f"repeats a key: {keys}")
        return value

    @field_validator("aliases", "public_files", mode="before")
    @classmethod
    def _empty_list(cls, value: Any) -> Any:
        return () if value is None else value

    @field_validator("grader", "synthetic", "prepare")
    @classmethod
    def _competition_name(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        name, colon, attribute = value.partition(":")
        if not colon or not name or not attribute:
            raise ValueError(f"must look like 'competition:attribute', got {value!r}")
        folder: Path | None = info.data.get("folder")
        home = competition_of_folder(folder) if folder is not None else None
        if folder is not None and home is not None and name != home:
            raise ValueError(f"names the competition {name!r}, but the task lives in the competition folder "
                             f"{home!r} ({folder.parent.parent}); a task's code is its own competition's")
        return value

    @field_validator("public_files")
    @classmethod
    def _files_of_the_folder(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        folder = info.data.get("folder")
        for name in value:
            if "/" in name:
                raise ValueError(f"must name files in the task folder, got {name!r}")
            if folder is not None and not (folder / name).is_file():
                raise ValueError(f"names {name!r}, which is not in {folder}")
        return value

    @field_validator("limits")
    @classmethod
    def _over_defaults(cls, value: Any) -> Any:
        if value is None:
            return Limits()
        if isinstance(value, Limits):
            return value
        if not isinstance(value, dict):
            raise ValueError("must be a mapping like {memory: 32G}")
        try:
            return Limits().with_overrides(value)
        except LimitError as exc:
            raise ValueError(str(exc)) from None

    @property
    def extra(self) -> dict[str, Any]:
        """Informational keys the schema does not use (year, anatomy, ...)."""
        return dict(self.model_extra or {})

    description_path = Entry("description.md", root="folder")
    leaderboard_path = Entry("leaderboard.csv", root="folder")

    @property
    def ranking_metrics(self) -> tuple[Metric, ...]:
        return tuple(m for m in self.metrics if m.ranks)

    @property
    def time_limit_seconds(self) -> float:
        return self.time_limit_hours * 3600.0

    @property
    def implemented(self) -> bool:
        return self.grader is not None and self.synthetic is not None

    @property
    def competition_name(self) -> str | None:
        """The competition folder's name (``topcow``): the folder the task lives in, else the name task.yaml's
        ``grader`` (or ``synthetic``, ``prepare``) gives, for a task folder read on its own."""
        home = competition_of_folder(self.folder)
        if home is not None:
            return home
        named = self.grader or self.synthetic or self.prepare
        return named.partition(":")[0] if named else None


def competition_of_folder(folder: Path) -> str | None:
    """``<competition>`` of a task folder laid out as ``<competition>/tasks/<id>/``, else None."""
    return folder.parent.parent.name if folder.parent.name == "tasks" else None


def read_yaml(path: Path) -> Any:
    """``yaml.safe_load`` of a file (libyaml's parser when PyYAML has it: the same documents, faster)."""
    import yaml  # start-up: yaml only where this runs

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    except FileNotFoundError:
        raise TaskConfigError(f"{path}: file not found") from None
    except yaml.YAMLError as exc:
        raise TaskConfigError(f"{path}: not valid YAML: {exc}") from None


def load_task(folder: Path) -> Task:
    """Read and validate one task folder."""
    path = folder / "task.yaml"
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise TaskConfigError(f"{path}: top level must be a mapping")
    task = parse(Task, {**data, "folder": folder}, path, TaskConfigError)
    _check_leaderboard_columns(task)
    return task


def _check_leaderboard_columns(task: Task) -> None:
    path = task.leaderboard_path
    if not path.is_file():
        raise TaskConfigError(f"{path}: file not found")
    columns = metric_columns(path)
    ranking = [m.key for m in task.ranking_metrics]
    if sorted(columns) != sorted(ranking):
        raise TaskConfigError(
            f"{task.folder / 'task.yaml'}: field 'metrics' marks {ranking} as ranking but {path.name} has "
            f"metric columns {columns}"
        )


def competitions_root() -> Path:
    """Where competition folders live: the package's ``competitions/``, or ``$REXMLE_COMPETITIONS_DIR``, a
    folder laid out the same way (``<competition>/tasks/<id>/task.yaml``) whose task folders are read
    instead, e.g. a copy with one task.yaml changed. The competitions' code is always the package's."""
    if os.environ.get("REXMLE_TASKS_DIR"):
        raise TaskConfigError("REXMLE_TASKS_DIR is no longer read: tasks live in their competition's folder, "
                              "competitions/<competition>/tasks/<id>/; set REXMLE_COMPETITIONS_DIR to a folder "
                              "laid out like pytest_rexmle/competitions/ instead")
    env = os.environ.get("REXMLE_COMPETITIONS_DIR")
    return Path(env) if env else PACKAGE_COMPETITIONS


class TaskRegistry:
    """All task folders of the competitions under one root (``<competition>/tasks/<id>/``), with alias lookup."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._tasks: dict[str, Task] = {}
        self._aliases: dict[str, str] = {}
        if not root.is_dir():
            raise TaskConfigError(f"{root}: no such competitions folder")
        for path in sorted(root.glob("*/tasks/*/task.yaml")):
            competition = path.parents[2]
            if not competition.name.isidentifier():
                raise TaskConfigError(f"{competition}: a competition folder is a Python package, so its name must "
                                      f"be an identifier (letters, digits, '_'), got {competition.name!r}")
            task = load_task(path.parent)
            if task.id in self._tasks:
                raise TaskConfigError(f"{path}: task id {task.id!r} is also the id of "
                                      f"{self._tasks[task.id].folder}")
            self._tasks[task.id] = task
        for task in self._tasks.values():
            for name in {task.id, task.reference_id, *task.aliases}:
                owner = self._aliases.setdefault(name, task.id)
                if owner != task.id:
                    raise TaskConfigError(f"{task.folder / 'task.yaml'}: alias {name!r} is also used by {owner!r}")

    def __iter__(self):
        return iter(self._tasks[k] for k in sorted(self._tasks))

    @property
    def ids(self) -> list[str]:
        return sorted(self._tasks)

    @property
    def task_types(self) -> list[str]:
        """The task types the tasks use (a new one is a new value in a task.yaml)."""
        return sorted({t.task_type for t in self._tasks.values()})

    @property
    def modalities(self) -> list[str]:
        return sorted({t.modality for t in self._tasks.values()})

    def get(self, name: str) -> Task:
        """Look a task up by project id or alias."""
        try:
            return self._tasks[self._aliases[name]]
        except KeyError:
            raise UnknownTaskError(f"unknown task {name!r}; known tasks: {', '.join(self.ids)}") from None


@functools.lru_cache(maxsize=8)
def _registry_for(root: str) -> TaskRegistry:
    return TaskRegistry(Path(root))


def registry(root: Path | None = None) -> TaskRegistry:
    return _registry_for(str(root or competitions_root()))


def get_task(name: str) -> Task:
    return registry().get(name)


#: task.yaml field → the module of the competition folder whose attribute it names
COMPETITION_MODULES = {"grader": "grade", "synthetic": "synthetic", "prepare": "prepare"}


def competition_module(task: Task, field: str, module: str | None = None) -> str:
    """The dotted module a task.yaml name lives in: ``grader: topcow:Segmentation`` of a task in
    ``competitions/topcow/tasks/`` → ``pytest_rexmle.competitions.topcow.grade``; ``module`` names another
    module of the same folder (``source``). Only names are built here, so listing tasks imports no
    competition code."""
    if getattr(task, field) is None:
        raise TaskConfigError(f"{task.id}: no {field} declared in {task.folder / 'task.yaml'}")
    return f"{__package__}.competitions.{task.competition_name}.{module or COMPETITION_MODULES[field]}"


def resolve(task: Task, field: str) -> Any:
    """The object task.yaml's ``grader``, ``synthetic`` or ``prepare`` names, imported on first use."""
    import importlib  # start-up: importlib only where this runs

    attr = getattr(task, field) and getattr(task, field).partition(":")[2]
    try:
        return getattr(importlib.import_module(competition_module(task, field)), attr)
    except (ImportError, AttributeError) as exc:
        raise TaskConfigError(f"{task.folder / 'task.yaml'}: field {field!r} {getattr(task, field)!r} cannot be "
                              f"loaded: {exc}") from exc
