"""Preparing one task: locked, idempotent, atomic.

The sequence is: take the task's file lock; if a manifest exists and the files it lists are intact,
return at once (a second run touches nothing); otherwise make the raw parts present (under the raw
source's own lock), build ``public/`` and ``private/`` in a temporary folder next to the final one,
write ``private/prepare_manifest.json`` last, and rename the folder into place. A crash at any point
leaves either the previous state or a hidden ``.prepare-*`` folder that the next run deletes; never a
``<task>/`` folder with a manifest that is not true.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from filelock import FileLock

from ...task import Task, get_task, resolve
from ..taskdata import MANIFEST, DataManifest, TaskData, copy_task_documents, inventory, sha256_file
from .errors import PrepareError
from .sources import ensure_raw, part_done, part_record, parts_for, raw_dir

#: bump when a preparer's output changes; prepared folders of another version are rebuilt
#: (prepare-2: PANTHER answers hold the tumour, label 1, only; prepare-3: 3-D NIfTI files with qform = sform)
RULE_VERSION = "prepare-3"
LOCKS = ".locks"

def load_preparer(task: Task):
    """The preparer named in task.yaml (``prepare: <competition>:<function>``, in the competition's ``prepare.py``)."""
    if task.prepare is None:
        raise PrepareError(f"{task.id}: no preparer for this task")

    return resolve(task, "prepare")


def manifest_ok(task: Task, root: Path, full: bool = False) -> bool:
    """The prepared folder matches its manifest (sizes always; SHA-256 too when ``full``)."""
    data = DataManifest.read(root)
    if data is None or data.project_id != task.id or data.kind != "prepared" \
            or data.rule_version != RULE_VERSION or data.task_version != task.version:
        return False
    files, sizes = data.files, data.file_sizes
    if set(files) != set(sizes):
        return False
    for rel, size in sizes.items():
        path = root / rel
        try:
            if path.stat().st_size != size:
                return False
        except OSError:
            return False
        if full and sha256_file(path) != files[rel]:
            return False
    return True


def _refresh_description(task: Task, root: Path) -> None:
    """Keep public/description.md in step with the task folder without rebuilding the data."""
    if not task.description_path.is_file():
        return
    target = root / "public" / "description.md"
    data = DataManifest.read(root)
    current = sha256_file(task.description_path)
    if data is None or data.files.get("public/description.md") == current and target.is_file():
        return
    tmp = target.with_name(".description.md.tmp")
    shutil.copyfile(task.description_path, tmp)
    os.replace(tmp, target)
    data.files["public/description.md"] = current
    data.file_sizes["public/description.md"] = target.stat().st_size
    data.write(root / "private" / MANIFEST)


def prepare_task(task: Task | str, data_dir: Path, raw_archive: Path | Sequence[Path] | None = None,
                 progress: bool = True, *, verify: bool = False, keep_archives: bool = False) -> TaskData:
    """Prepare ``task`` under ``data_dir`` (download, extract, split, write); idempotent and locked.

    ``raw_archive``: file(s) downloaded by hand (required for Google Drive sources). ``verify``: re-hash
    every prepared file instead of comparing sizes. ``keep_archives``: keep downloads after extraction.
    """
    if isinstance(task, str):
        task = get_task(task)
    data_dir = Path(data_dir).expanduser().absolute()
    archives = [] if raw_archive is None else [Path(raw_archive)] if isinstance(raw_archive, (str, Path)) \
        else [Path(p) for p in raw_archive]
    final = data_dir / task.id
    (data_dir / LOCKS).mkdir(parents=True, exist_ok=True)
    with FileLock(str(data_dir / LOCKS / f"{task.id}.lock")):
        if manifest_ok(task, final, full=verify):
            _refresh_description(task, final)
            return TaskData(task.id, "prepared", final)
        for stale in data_dir.glob(f".prepare-{task.id}.*"):
            shutil.rmtree(stale, ignore_errors=True)
        if final.exists():  # incomplete, stale or tampered: out of sight first, then rebuilt
            aside = Path(tempfile.mkdtemp(prefix=f".prepare-{task.id}.old.", dir=data_dir))
            os.replace(final, aside / "old")
            shutil.rmtree(aside, ignore_errors=True)
        from .layout import Context  # NumPy and SimpleITK: only when something is prepared (not for `rexmle info`)

        preparer = load_preparer(task)
        raw = ensure_raw(task, data_dir, archives, progress, keep_archives)
        tmp = Path(tempfile.mkdtemp(prefix=f".prepare-{task.id}.", dir=data_dir))
        try:
            ctx = Context(task, raw, tmp / "public", tmp / "private", tmp / ".scratch")
            for folder in (ctx.public, ctx.private, ctx.scratch):
                folder.mkdir(parents=True)
            started = time.time()
            counts = preparer(ctx)
            shutil.rmtree(ctx.scratch)
            copy_task_documents(task, ctx.public)
            _check_layout(task, tmp)
            hashes, sizes = inventory(tmp)
            DataManifest(
                project_id=task.id, reference_id=task.reference_id, kind="prepared",
                rule_version=RULE_VERSION, task_version=task.version,
                prepared_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                seconds=round(time.time() - started, 1),
                source=_source_record(task, raw), counts=counts,
                bytes=sum(sizes.values()), resampled_labels=ctx.resampled, warnings=ctx.warnings,
                notes=ctx.notes, files=hashes, file_sizes=sizes,
            ).write(ctx.private / MANIFEST)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return TaskData(task.id, "prepared", final)


def _check_layout(task: Task, root: Path) -> None:
    """The minimum every prepared task must have; a preparer bug must not ship a partial task."""
    required = ["public/sample_submission.csv", "private/answers.csv", "private/split.json"]
    missing = [r for r in required if not (root / r).is_file()]
    if missing:
        raise PrepareError(f"{task.id}: preparer did not write {missing}")


def _source_record(task: Task, raw: Path) -> dict[str, Any]:
    parts = {part.name: part_record(raw, part) for part in parts_for(task)}
    return {**{k: v for k, v in task.source.items() if k in ("raw", "type", "record_id", "article_id", "file_id")},
            "parts": parts}


def data_status(task: Task, data_dir: Path) -> dict[str, Any]:
    """Where a task's data stands: "prepared" (with counts and bytes), "raw" or "not downloaded"."""
    data_dir = Path(data_dir).expanduser().absolute()
    root = data_dir / task.id
    raw = raw_dir(task, data_dir)
    parts = {p.name: part_done(raw, p) for p in parts_for(task)}
    command = f"rexmle prepare {task.id} --data-dir {data_dir}"
    info = DataManifest.read(root)
    if info is not None and manifest_ok(task, root):
        return {"status": "prepared", "path": str(root), "counts": info.counts, "files": len(info.files),
                "bytes": info.bytes, "rule_version": info.rule_version, "raw": str(raw), "raw_parts": parts}
    raw_bytes = 0
    for part in parts_for(task):
        try:
            raw_bytes += sum(f["bytes"] for f in (part_record(raw, part) or {})["files"])
        except (KeyError, TypeError):
            pass
    return {"status": "raw" if parts and all(parts.values()) else "not downloaded", "path": str(raw),
            "raw_parts": parts, "bytes": raw_bytes, "counts": None, "prepare": command}
