"""The task registry: one folder per challenge under ``tasks/<id>/``.

A task folder is declarative: ``task.yaml`` (identity, markers, source facts, budget, metrics and the
dotted names of its grader and synthetic-data generator), ``leaderboard.csv`` (the human top-N) and
``description.md`` (what the agent reads). Code never hard-codes per-task facts that belong there.

task.yaml fields (all required unless marked optional):

* ``id`` (str): project id, e.g. ``topcow-cta-det``; must equal the folder name.
* ``reference_id`` (str): the id in the reference implementation and its leaderboards, e.g.
  ``topcow-track1-task2``; accepted wherever a task id is.
* ``aliases`` (list[str], optional): further accepted ids (paper names in lower case).
* ``name``, ``paper_name``, ``competition`` (str); ``paper_names`` (list, optional).
* ``modality`` (one of ``MODALITIES``), ``task_type`` (one of ``TASK_TYPES``), ``markers`` (list).
* ``source`` (mapping with at least ``raw``: the raw-data folder name the competition's tasks share).
* ``time_limit_hours`` (number > 0, default budget 24), ``gpus`` (int >= 0), ``version`` (int >= 1).
* ``id_column`` (str): the case-id column of ``submission.csv``.
* ``metrics`` (list of ``{key, direction: higher_better|lower_better, ranks: bool}``). Ranking metrics
  must be exactly the metric columns of ``leaderboard.csv``.
* ``public_files`` (list[str], optional): files of the task folder the agent gets in ``public/`` next to
  ``description.md`` (e.g. TopBrain's valid-neighbour table, which its ``neighbor_error`` metric uses).
* ``limits`` (mapping, optional): per-run resource limits over the project-wide defaults of
  :class:`pytest_rexmle.runtime.sandbox.limits.Limits`, e.g. ``{memory: 32G, processes: 1024, disk: 200G,
  tmp: 50G, file_size: 64G}``; ``--rexmle-limit`` overrides them.
* ``grader`` / ``synthetic`` / ``prepare`` (optional ``<challenge>:<attribute>``): the grader class, the
  synthetic-twin generator and the real-data preparer, found in the challenge's folder
  ``pytest_rexmle/challenges/<challenge>/`` (``grade.py``, ``synthetic.py``, ``prepare.py``; see
  :func:`resolve`). A task without a grader yet is collected and skipped with that reason.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationInfo, field_validator

from .documents import parse
from .errors import TaskConfigError, UnknownTaskError
from .paths import Entry

TASK_TYPES = ("segmentation", "detection", "classification", "quality_assessment", "enhancement")
MODALITIES = ("ultrasound", "ct", "cta", "mra", "mri", "xray", "pathology", "microscopy")


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
    modality: Literal[MODALITIES]  # type: ignore[valid-type]
    task_type: Literal[TASK_TYPES]  # type: ignore[valid-type]
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
    #: runtime.sandbox.limits.Limits: task.yaml's ``limits:`` over the project defaults
    limits: Any = Field(default=None, validate_default=True)

    @field_validator("id")
    @classmethod
    def _named_like_folder(cls, value: str, info: ValidationInfo) -> str:
        folder = info.data.get("folder")
        if folder is not None and value != folder.name:
            raise ValueError(f"is {value!r} but the folder is named {folder.name!r}")
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
    def _challenge_name(cls, value: str | None) -> str | None:
        if value is not None and ":" not in value:
            raise ValueError(f"must look like 'challenge:attribute', got {value!r}")
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
        from .runtime.sandbox.limits import LimitError, Limits

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


def read_yaml(path: Path) -> Any:
    """``yaml.safe_load`` of a file (libyaml's parser when PyYAML has it: the same documents, faster)."""
    import yaml

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
    from .leaderboard import metric_columns

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


def tasks_root() -> Path:
    """Where task folders live: ``$REXMLE_TASKS_DIR``, the source checkout, or the installed copy."""
    env = os.environ.get("REXMLE_TASKS_DIR")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "tasks", here / "_tasks"):
        if candidate.is_dir():
            return candidate
    raise TaskConfigError(f"no task folders found next to {here}; set REXMLE_TASKS_DIR")


class TaskRegistry:
    """All task folders under one root, with alias lookup."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._tasks: dict[str, Task] = {}
        self._aliases: dict[str, str] = {}
        for folder in sorted(p for p in root.iterdir() if (p / "task.yaml").is_file()):
            task = load_task(folder)
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
    return _registry_for(str(root or tasks_root()))


def get_task(name: str) -> Task:
    return registry().get(name)


#: task.yaml field → the module of the challenge folder whose attribute it names
CHALLENGE_MODULES = {"grader": "grade", "synthetic": "synthetic", "prepare": "prepare"}


def challenge_module(task: Task, field: str, module: str | None = None) -> str:
    """The dotted module a task.yaml name lives in: ``grader: topcow:Segmentation`` →
    ``pytest_rexmle.challenges.topcow.grade``; ``module`` names another module of the same folder
    (``source``). Only names are built here, so listing tasks imports no challenge code."""
    value = getattr(task, field)
    if value is None:
        raise TaskConfigError(f"{task.id}: no {field} declared in {task.folder / 'task.yaml'}")
    challenge = value.partition(":")[0]
    return f"{__package__}.challenges.{challenge}.{module or CHALLENGE_MODULES[field]}"


def resolve(task: Task, field: str) -> Any:
    """The object task.yaml's ``grader``, ``synthetic`` or ``prepare`` names, imported on first use."""
    import importlib

    attr = getattr(task, field) and getattr(task, field).partition(":")[2]
    try:
        return getattr(importlib.import_module(challenge_module(task, field)), attr)
    except (ImportError, AttributeError) as exc:
        raise TaskConfigError(f"{task.folder / 'task.yaml'}: field {field!r} {getattr(task, field)!r} cannot be "
                              f"loaded: {exc}") from exc
