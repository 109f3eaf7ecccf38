"""Synthetic twins: small, deterministic datasets in exactly the prepared layout of each task.

They let the whole pipeline (agent contract, validation, grading, ranking, reports) run on a laptop
without the real releases. Each generator is ``generate(task, public, private, rng)`` in a module of
this package, named by ``synthetic:`` in task.yaml. Generation goes to a temporary folder that is
renamed into place under a file lock, so parallel workers and interrupted runs never see half a dataset.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from filelock import FileLock

from ...errors import TaskConfigError
from ...paths import synthetic_cache_dir
from ...result import write_json_atomic
from ...task import Task
from ..store import MANIFEST, TaskData, copy_task_documents, inventory

Generator = Callable[[Task, Path, Path, "np.random.Generator"], None]
GENERATOR_VERSION = 1


def load_generator(task: Task) -> Generator:
    if task.synthetic is None:
        raise TaskConfigError(f"{task.id}: no synthetic generator declared in {task.folder / 'task.yaml'}")
    module_name, _, attr = task.synthetic.partition(":")
    try:
        return getattr(importlib.import_module(f"{__name__}.{module_name}"), attr)
    except (ImportError, AttributeError) as exc:
        raise TaskConfigError(f"{task.folder / 'task.yaml'}: field 'synthetic' {task.synthetic!r} cannot be loaded: {exc}") from exc


def seed_for(task: Task, seed: int) -> int:
    """A per-task seed so two tasks of one family do not produce identical volumes."""
    digest = hashlib.sha256(f"{task.id}/{seed}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def generate(task: Task, out: Path, seed: int = 0) -> TaskData:
    """Generate a task's twin into ``out`` (public/, private/ and a manifest)."""
    public, private = out / "public", out / "private"
    public.mkdir(parents=True, exist_ok=True)
    private.mkdir(parents=True, exist_ok=True)
    import numpy as np

    load_generator(task)(task, public, private, np.random.default_rng(seed_for(task, seed)))
    copy_task_documents(task, public)
    write_json_atomic(private / MANIFEST, {
        "project_id": task.id, "kind": "synthetic", "seed": seed, "rule_version": f"synthetic-{GENERATOR_VERSION}",
        "task_version": task.version, "fingerprint": fingerprint(task), "files": inventory(out)[0],
    })
    return TaskData(task.id, "synthetic", out)


def ensure_synthetic(task: Task, cache_dir: Path | None = None, seed: int = 0) -> TaskData:
    """Return the cached twin, generating it once (locked, atomic) if needed."""
    base = (cache_dir or synthetic_cache_dir()) / f"v{GENERATOR_VERSION}-seed{seed}"
    final = base / task.id
    if (final / "private" / MANIFEST).is_file() and _fresh(task, final):
        return TaskData(task.id, "synthetic", final)
    base.mkdir(parents=True, exist_ok=True)
    with FileLock(str(base / f".{task.id}.lock")):
        if (final / "private" / MANIFEST).is_file() and _fresh(task, final):
            return TaskData(task.id, "synthetic", final)
        tmp = Path(tempfile.mkdtemp(prefix=f".{task.id}.", dir=base))
        try:
            generate(task, tmp, seed)
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return TaskData(task.id, "synthetic", final)


def fingerprint(task: Task) -> str:
    """Changes whenever the task folder or its generator's code changes, so caches never go stale."""
    digest = hashlib.sha256()
    # the generator's source file, found without importing it (NumPy, SimpleITK, SciPy: seconds per
    # worker for the 20 generators when every twin is already cached)
    spec = importlib.util.find_spec(f"{__name__}.{task.synthetic.partition(':')[0]}")
    for path in (task.folder / "task.yaml", task.description_path, Path(spec.origin), Path(__file__)):
        digest.update(path.read_bytes() if path.is_file() else b"-")
    return digest.hexdigest()[:16]


def _fresh(task: Task, root: Path) -> bool:
    import json

    try:
        return json.loads((root / "private" / MANIFEST).read_text()).get("fingerprint") == fingerprint(task)
    except (OSError, ValueError):
        return False
