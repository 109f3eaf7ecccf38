"""Typed documents: the base of the pydantic models of every file the harness reads or writes (task.yaml,
run.json, result.json, reports, capability and stage documents, data manifests), and the one place that
turns a validation failure into a message naming the file and the field.

Each model lives with the code that builds its document (``task.Task``, ``result.TaskResult``,
``report.model.SessionReport``, ...), so a field is declared once, where it is filled in; this module only
gives them a common reading and error style. Errors subclass ``ValueError`` as well as the project's
error types, so callers that caught the hand validators' ``ValueError`` keep working.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from .errors import RexmleError
from .jsonfile import write_json_atomic


class DocumentError(RexmleError, ValueError):
    """A document does not fit its schema; the message names the file (or document) and the field."""


class Document(BaseModel):
    """Unknown keys are kept (an older or newer harness may add some) and written back unchanged."""

    model_config = ConfigDict(extra="allow")

    @classmethod
    def check(cls, doc: Any, where: str | Path | None = None):
        """``doc`` (a parsed JSON document) as this model; :class:`DocumentError` names the first problem."""
        return parse(cls, doc, where or cls.__name__)

    def write(self, path: Path) -> Path:
        """Atomically, with the keys that were set (and the unknown ones kept), under their JSON names."""
        return write_json_atomic(path, self.model_dump(mode="json", by_alias=True, exclude_unset=True))


D = TypeVar("D")


def json_numbers(value: Any) -> Any:
    """Strict JSON has no infinities or NaN: they are written as the strings "inf", "-inf" and "nan"
    (pydantic's float fields read those strings back as numbers)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: json_numbers(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_numbers(v) for v in value]
    return value


def number(value: Any) -> Any:
    """The inverse of :func:`json_numbers` for one value read from a document."""
    return float(value) if value in ("inf", "-inf", "nan") else value


#: schema 2 of each document says ``task_id`` where schema 1 said ``challenge_id`` (one word for a task)
RENAMED_SCHEMAS = {f"rexmle-{name}/1": f"rexmle-{name}/2" for name in
                   ("report", "merged-report", "capability", "capability-run", "capability-agent", "stages")}


#: the keys schema 1 named after a "challenge" where a task is meant
RENAMED_KEYS = {"challenge_id": "task_id", "challenges": "tasks", "n_challenges": "n_tasks"}


def upgrade(value: Any) -> Any:
    """A document written before schema 2 (or a ``result.json`` of then) in today's words, so files of an
    earlier version still read: ``challenge_id`` becomes ``task_id``, ``challenges`` ``tasks`` and the schema 1
    names become 2."""
    if isinstance(value, dict):
        return {RENAMED_KEYS.get(k, k):
                RENAMED_SCHEMAS.get(v, v) if k == "schema" and isinstance(v, str) else upgrade(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [upgrade(v) for v in value]
    return value


@functools.cache
def _adapter(kind: type) -> TypeAdapter:
    return TypeAdapter(kind)


def field_name(loc: tuple[Any, ...]) -> str:
    """pydantic's location as a reader writes it: ``metrics[1].direction``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def explain(error: ValidationError, where: str) -> str:
    """The first problem in the words of the old hand validators: ``<file>: field 'x' must be ...``."""
    problems = error.errors(include_url=False)
    first = problems[0]
    field = field_name(first["loc"])
    more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
    if first["type"] == "missing":
        return f"{where}: missing required field '{field}'{more}"
    message = str(first["msg"]).removeprefix("Value error, ").replace("Input should be", "must be")
    got = "" if first["type"] == "value_error" else f", got {first.get('input')!r}"
    return (f"{where}: field '{field}' {message}{got}" if field else f"{where}: {message}") + more


def parse(model: type[D], data: Any, where: str | Path, error: type[Exception] = DocumentError,
          context: dict[str, Any] | None = None) -> D:
    """``model`` (a pydantic model or dataclass) validated from ``data``; ``error`` (e.g. TaskConfigError)
    carries :func:`explain`'s message."""
    try:
        kind: type = model   # a type is Hashable, which functools.cache needs; mypy cannot see it for type[D]
        return _adapter(kind).validate_python(data, context=context)
    except ValidationError as exc:
        raise error(explain(exc, str(where))) from None


def read(model: type[D], path: Path, error: type[Exception] = DocumentError) -> D:
    """A JSON document from disk; unreadable or invalid JSON is reported like a schema error."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise error(f"{path}: not a readable JSON document: {exc}") from None
    return parse(model, data, path, error)
