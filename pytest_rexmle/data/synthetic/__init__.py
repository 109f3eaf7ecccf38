"""Synthetic twins: small, deterministic datasets in exactly the prepared layout of each task.

They let the whole pipeline (agent contract, validation, grading, ranking, reports) run on a laptop
without the real releases. Unless a seed is pinned, each twin is keyed by the cache's secret
(:mod:`.secret`), so an agent that imports the generators cannot regenerate the answers. Each
generator is ``generate(task, public, private, rng)`` in a competition's ``synthetic.py``
(``pytest_rexmle/competitions/<competition>/``), named by ``synthetic:`` in task.yaml; the shared drawing and
writing helpers are :mod:`.common` and :mod:`.volumes`. Generation goes to a temporary folder that is
renamed into place under a file lock, so parallel workers and interrupted runs never see half a dataset.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from filelock import FileLock

from ...errors import TaskConfigError
from ...paths import synthetic_cache_dir
from ...task import Task, competition_module, resolve
from ..taskdata import MANIFEST, DataManifest, TaskData, copy_task_documents, inventory
from .secret import cache_secret, secret_id, secret_seed

if TYPE_CHECKING:
    import numpy as np  # start-up: numpy only where this runs

Generator = Callable[[Task, Path, Path, "np.random.Generator"], None]
GENERATOR_VERSION = 1


def load_generator(task: Task) -> Generator:
    """The generator named in task.yaml (``synthetic: <competition>:<function>``, in the competition's ``synthetic.py``)."""
    if task.synthetic is None:
        raise TaskConfigError(f"{task.id}: no synthetic generator declared in {task.folder / 'task.yaml'}")
    return resolve(task, "synthetic")


def seed_for(task: Task, seed: int | None, secret: bytes | None = None) -> int:
    """A per-task seed so two tasks of one family do not produce identical volumes.

    A pinned ``seed`` gives the same twin everywhere (a 64-bit hash of task and seed); without one the
    cache's ``secret`` keys a 256-bit seed (see :mod:`.secret`).
    """
    if seed is None:
        if secret is None:
            raise ValueError("an unpinned synthetic twin needs the cache's secret")
        return secret_seed(secret, task.id)
    digest = hashlib.sha256(f"{task.id}/{seed}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def answers_id(seed: int | None, secret: bytes | None) -> str:
    """What the twin's answers depend on besides the code: ``seed-<n>`` or ``secret-<hash>``."""
    return f"seed-{seed}" if seed is not None else f"secret-{secret_id(secret)}"  # type: ignore[arg-type]


def generate(task: Task, out: Path, seed: int | None = None, secret: bytes | None = None) -> TaskData:
    """Generate a task's twin into ``out`` (public/, private/ and a manifest).

    Without a pinned ``seed`` (and no ``secret`` given) the default cache's secret is used, so that
    ``rexmle synth`` writes the same twin a session would grade against.
    """
    if seed is None and secret is None:
        secret = cache_secret(synthetic_cache_dir())
    public, private = out / "public", out / "private"
    public.mkdir(parents=True, exist_ok=True)
    private.mkdir(parents=True, exist_ok=True)
    os.chmod(private, 0o700)  # the answers: for the harness only, whatever the umask
    import numpy as np  # start-up: numpy only where this runs

    load_generator(task)(task, public, private, np.random.default_rng(seed_for(task, seed, secret)))
    copy_task_documents(task, public)
    ident = answers_id(seed, secret)
    DataManifest(project_id=task.id, kind="synthetic", seed=seed, answers_id=ident,
                 answers_reproducible=seed is not None, rule_version=f"synthetic-{GENERATOR_VERSION}",
                 task_version=task.version, fingerprint=fingerprint(task), files=inventory(out)[0],
                 ).write(private / MANIFEST)
    return TaskData(task.id, "synthetic", out, ident)


def ensure_synthetic(task: Task, cache_dir: Path | None = None, seed: int | None = None) -> TaskData:
    """Return the cached twin, generating it once (locked, atomic) if needed.

    Pinned seeds live in ``v<version>-seed<n>/``; secret-keyed twins in ``v<version>-secret-<hash>/``
    next to the cache's ``.secret``.
    """
    cache = cache_dir or synthetic_cache_dir()
    secret = cache_secret(cache) if seed is None else None
    ident = answers_id(seed, secret)
    base = cache / (f"v{GENERATOR_VERSION}-seed{seed}" if seed is not None else f"v{GENERATOR_VERSION}-{ident}")
    final = base / task.id
    if _fresh(task, final):
        return TaskData(task.id, "synthetic", final, ident)
    base.mkdir(parents=True, exist_ok=True)
    with FileLock(str(base / f".{task.id}.lock")):
        if _fresh(task, final):
            return TaskData(task.id, "synthetic", final, ident)
        tmp = Path(tempfile.mkdtemp(prefix=f".{task.id}.", dir=base))
        # traversable (mkdtemp makes it 0700): a root harness's agent uid reads public/ under Landlock;
        # private/ stays 0700
        os.chmod(tmp, 0o755)
        try:
            generate(task, tmp, seed, secret)
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return TaskData(task.id, "synthetic", final, ident)



def fingerprint(task: Task) -> str:
    """Changes whenever the task folder or its generator's code changes, so caches never go stale."""
    digest = hashlib.sha256()
    # the generator's source file, found without importing it (NumPy, SimpleITK, SciPy: seconds per
    # worker for the 20 generators when every twin is already cached)
    module = competition_module(task, "synthetic")
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise TaskConfigError(f"{task.id}: its competition has no synthetic generator ({module})")
    for path in (task.folder / "task.yaml", task.description_path, Path(spec.origin), Path(__file__)):
        digest.update(path.read_bytes() if path.is_file() else b"-")
    return digest.hexdigest()[:16]


def _fresh(task: Task, root: Path) -> bool:
    """A complete twin (its manifest is written last) of the task's current generator."""
    manifest = DataManifest.read(root)
    return manifest is not None and manifest.fingerprint == fingerprint(task)
