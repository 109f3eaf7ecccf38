"""The task registry: one folder per challenge under ``tasks/<id>/``.

A task folder is declarative: ``task.yaml`` (identity, markers, source facts, budget, metrics and the
dotted names of its grader and synthetic-data generator), ``leaderboard.csv`` (the human top-N) and
``description.md`` (what the agent reads). Code never hard-codes per-task facts that belong there.

task.yaml fields (all required unless marked optional):

* ``id`` (str): project id, e.g. ``topcow-cta-det``; must equal the folder name.
* ``reference_id`` (str): the id in the reference implementation and ``shared/reference-data``, e.g.
  ``topcow-track1-task2``; accepted wherever a task id is.
* ``aliases`` (list[str], optional): further accepted ids (paper names in lower case).
* ``name``, ``paper_name``, ``competition`` (str); ``paper_names`` (list, optional).
* ``modality`` (one of ``MODALITIES``), ``task_type`` (one of ``TASK_TYPES``), ``markers`` (list).
* ``source`` (mapping with at least ``raw``: the shared raw-data folder name of §0.2).
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from .errors import TaskConfigError, UnknownTaskError
from .taskindex import read_task_yaml

TASK_TYPES = ("segmentation", "detection", "classification", "quality_assessment", "enhancement")
MODALITIES = ("ultrasound", "ct", "cta", "mra", "mri", "xray", "pathology", "microscopy")
DIRECTIONS = ("higher_better", "lower_better")


@dataclass(frozen=True)
class Metric:
    key: str
    direction: str
    ranks: bool

    @property
    def higher_is_better(self) -> bool:
        return self.direction == "higher_better"


@dataclass(frozen=True)
class Task:
    id: str
    reference_id: str
    folder: Path
    name: str
    paper_name: str
    competition: str
    modality: str
    task_type: str
    markers: tuple[str, ...]
    source: dict[str, Any]
    time_limit_hours: float
    gpus: int
    version: int
    id_column: str
    metrics: tuple[Metric, ...]
    aliases: tuple[str, ...] = ()
    grader: str | None = None
    synthetic: str | None = None
    prepare: str | None = None
    public_files: tuple[str, ...] = ()
    limits: Any = None  # runtime.sandbox.limits.Limits: task.yaml's ``limits:`` over the project defaults
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


    @property
    def ranking_metrics(self) -> tuple[Metric, ...]:
        return tuple(m for m in self.metrics if m.ranks)

    @property
    def time_limit_seconds(self) -> float:
        return self.time_limit_hours * 3600.0

    @property
    def description_path(self) -> Path:
        return self.folder / "description.md"

    @property
    def leaderboard_path(self) -> Path:
        return self.folder / "leaderboard.csv"

    @property
    def implemented(self) -> bool:
        return self.grader is not None and self.synthetic is not None


def _require(data: dict[str, Any], key: str, kind: type | tuple[type, ...], path: Path) -> Any:
    if key not in data:
        raise TaskConfigError(f"{path}: missing required field '{key}'")
    value = data[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind in (int, float, (int, float)):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise TaskConfigError(f"{path}: field '{key}' must be {names}, got {value!r}")
    return value


def _parse_metrics(raw: Any, path: Path) -> tuple[Metric, ...]:
    if not isinstance(raw, list) or not raw:
        raise TaskConfigError(f"{path}: field 'metrics' must be a non-empty list")
    metrics = []
    for i, entry in enumerate(raw):
        where = f"metrics[{i}]"
        if not isinstance(entry, dict):
            raise TaskConfigError(f"{path}: field '{where}' must be a mapping")
        key = entry.get("key")
        if not isinstance(key, str) or not key:
            raise TaskConfigError(f"{path}: field '{where}.key' must be a non-empty string")
        direction = entry.get("direction")
        if direction not in DIRECTIONS:
            raise TaskConfigError(f"{path}: field '{where}.direction' must be one of {DIRECTIONS}, got {direction!r}")
        ranks = entry.get("ranks", True)
        if not isinstance(ranks, bool):
            raise TaskConfigError(f"{path}: field '{where}.ranks' must be true or false")
        metrics.append(Metric(key, direction, ranks))
    keys = [m.key for m in metrics]
    if len(set(keys)) != len(keys):
        raise TaskConfigError(f"{path}: field 'metrics' repeats a key: {keys}")
    return tuple(metrics)


def load_task(folder: Path) -> Task:
    """Read and validate one task folder."""
    path = folder / "task.yaml"
    try:
        data = read_task_yaml(path)  # the parsed YAML, from a compiled index while the file is unchanged
    except FileNotFoundError:
        raise TaskConfigError(f"{path}: file not found") from None
    if not isinstance(data, dict):
        raise TaskConfigError(f"{path}: top level must be a mapping")
    task_id = _require(data, "id", str, path)
    if task_id != folder.name:
        raise TaskConfigError(f"{path}: field 'id' is {task_id!r} but the folder is named {folder.name!r}")
    modality = _require(data, "modality", str, path)
    if modality not in MODALITIES:
        raise TaskConfigError(f"{path}: field 'modality' must be one of {MODALITIES}, got {modality!r}")
    task_type = _require(data, "task_type", str, path)
    if task_type not in TASK_TYPES:
        raise TaskConfigError(f"{path}: field 'task_type' must be one of {TASK_TYPES}, got {task_type!r}")
    markers = _require(data, "markers", list, path)
    for marker in (task_type, modality):
        if marker not in markers:
            raise TaskConfigError(f"{path}: field 'markers' must contain {marker!r}")
    source = _require(data, "source", dict, path)
    if not isinstance(source.get("raw"), str):
        raise TaskConfigError(f"{path}: field 'source.raw' must be a string")
    hours = _require(data, "time_limit_hours", (int, float), path)
    if hours <= 0:
        raise TaskConfigError(f"{path}: field 'time_limit_hours' must be > 0")
    gpus = _require(data, "gpus", int, path)
    if gpus < 0:
        raise TaskConfigError(f"{path}: field 'gpus' must be >= 0")
    version = _require(data, "version", int, path)
    if version < 1:
        raise TaskConfigError(f"{path}: field 'version' must be >= 1")
    aliases = data.get("aliases") or []
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise TaskConfigError(f"{path}: field 'aliases' must be a list of strings")
    for key in CHALLENGE_MODULES:
        value = data.get(key)
        if value is not None and (not isinstance(value, str) or ":" not in value):
            raise TaskConfigError(f"{path}: field '{key}' must look like 'challenge:attribute', got {value!r}")
    public_files = data.get("public_files") or []
    if not isinstance(public_files, list) or not all(isinstance(f, str) and "/" not in f for f in public_files):
        raise TaskConfigError(f"{path}: field 'public_files' must be a list of file names in the task folder")
    for name in public_files:
        if not (folder / name).is_file():
            raise TaskConfigError(f"{path}: field 'public_files' names {name!r}, which is not in {folder}")
    known = {"id", "reference_id", "aliases", "public_files", "name", "paper_name", "competition", "modality", "task_type", "markers",
             "source", "time_limit_hours", "gpus", "version", "id_column", "metrics", "grader", "synthetic", "prepare",
             "limits"}
    task = Task(
        id=task_id,
        reference_id=_require(data, "reference_id", str, path),
        folder=folder,
        name=_require(data, "name", str, path),
        paper_name=_require(data, "paper_name", str, path),
        competition=_require(data, "competition", str, path),
        modality=modality,
        task_type=task_type,
        markers=tuple(markers),
        source=source,
        time_limit_hours=float(hours),
        gpus=gpus,
        version=version,
        id_column=_require(data, "id_column", str, path),
        metrics=_parse_metrics(data.get("metrics"), path),
        aliases=tuple(aliases),
        grader=data.get("grader"),
        synthetic=data.get("synthetic"),
        prepare=data.get("prepare"),
        public_files=tuple(public_files),
        limits=_parse_limits(data.get("limits"), path),
        extra={k: v for k, v in data.items() if k not in known},
    )
    _check_leaderboard_columns(task)
    return task


def _parse_limits(raw: Any, path: Path):
    from .runtime.sandbox.limits import LimitError, Limits

    if raw is None:
        return Limits()
    if not isinstance(raw, dict):
        raise TaskConfigError(f"{path}: field 'limits' must be a mapping like {{memory: 32G}}")
    try:
        return Limits().with_overrides(raw)
    except LimitError as exc:
        raise TaskConfigError(f"{path}: field 'limits': {exc}") from None


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

    def __len__(self) -> int:
        return len(self._tasks)

    @property
    def ids(self) -> list[str]:
        return sorted(self._tasks)

    def get(self, name: str) -> Task:
        """Look a task up by project id or alias."""
        try:
            return self._tasks[self._aliases[name]]
        except KeyError:
            raise UnknownTaskError(f"unknown task {name!r}; known tasks: {', '.join(self.ids)}") from None

    def select(self, names: Iterable[str]) -> list[Task]:
        return [self.get(n) for n in names]


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
