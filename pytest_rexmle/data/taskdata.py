"""Finding a task's public/private folders, prepared or synthetic."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..documents import Document
from ..errors import DataNotPreparedError
from ..paths import Entry
from ..task import Task

MANIFEST = "prepare_manifest.json"


class DataManifest(Document):
    """``private/prepare_manifest.json``: what a data folder holds and how it was made.

    Both kinds record the task, the rule that made the data and a SHA-256 per file; prepared data adds
    the source, counts and sizes (``rexmle prepare``), a synthetic twin its seed or secret and the
    fingerprint of the generator it came from (a changed generator makes a new twin).
    """

    project_id: str
    kind: Literal["prepared", "synthetic"]
    rule_version: str
    task_version: int
    files: dict[str, str]
    # synthetic twins
    seed: int | None = None
    answers_id: str | None = None
    answers_reproducible: bool | None = None
    fingerprint: str | None = None
    # prepared data
    reference_id: str | None = None
    prepared_at: str | None = None
    seconds: float | None = None
    source: dict[str, Any] | None = None
    counts: dict[str, Any] | None = None
    bytes: int = 0
    resampled_labels: list[dict[str, Any]] = []
    warnings: list[str] = []
    notes: dict[str, Any] = {}
    file_sizes: dict[str, int] = {}

    @classmethod
    def read(cls, root: Path) -> DataManifest | None:
        """The manifest of the data folder ``root``; None when it is missing or not a manifest (the folder is
        then prepared or generated again)."""
        try:
            return cls.check(json.loads((Path(root) / "private" / MANIFEST).read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return None


@dataclass(frozen=True)
class TaskData:
    task_id: str
    kind: str  # "prepared" or "synthetic"
    root: Path
    #: what the private answers depend on besides the task: ``seed-<n>`` / ``secret-<hash>`` for twins,
    #: ``manifest-<hash>`` for prepared data (part of the resume key)
    answers_id: str | None = None
    public = Entry("public")
    private = Entry("private")


def prepared_data(task: Task, data_dir: Path) -> TaskData:
    root = data_dir / task.id
    if not (root / "private" / MANIFEST).is_file():
        command = f"rexmle prepare {task.id} --data-dir {data_dir}"
        raise DataNotPreparedError(
            f"{task.id}: data not prepared in {data_dir}; run `{command}` (or use --rexmle-data=synthetic)", command)
    return TaskData(task.id, "prepared", root, f"manifest-{sha256_file(root / 'private' / MANIFEST)[:16]}")


def copy_task_documents(task: Task, public: Path) -> None:
    """What the task folder gives the agent: description.md and the task's declared public files."""
    if task.description_path.is_file():
        shutil.copyfile(task.description_path, public / "description.md")
    for name in task.public_files:
        shutil.copyfile(task.folder / name, public / name)


def sha256_file(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def inventory(root: Path) -> tuple[dict[str, str], dict[str, int]]:
    """SHA-256 and size of every file under a task folder except the manifest: what a manifest lists."""
    hashes, sizes = {}, {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if rel == f"private/{MANIFEST}":
            continue
        hashes[rel] = sha256_file(path)
        sizes[rel] = path.stat().st_size
    return hashes, sizes
