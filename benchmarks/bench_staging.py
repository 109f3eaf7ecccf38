"""What staging a run costs (runtime/staging.py): rename the run's folders into a neutral stage, build the
hard-link tree of the task's public folder, and undo it all afterwards.

For each task given (default: every implemented task), its synthetic twin's public folder is staged for a
fresh run folder on the same filesystem, ``--repeat`` times; the best time in and out is printed with the
folder's file count and size. A synthetic twin is small; the cost grows with the number of files (one
``link()`` each), never with their size.

    python benchmarks/bench_staging.py [--repeat 5] [--files N] [--copy] [TASK ...]

``--files N`` adds a made-up public folder of N small files in 100 folders (a prepared challenge's scale).
``--copy`` stages the data as a copy (``cp --reflink=auto``) instead of hard links: what Landlock as the
harness's own uid pays so that its agent's chmod/utime/chown never reach the cache's inodes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_rexmle.data.synthetic import ensure_synthetic  # noqa: E402
from pytest_rexmle.runtime import staging  # noqa: E402
from pytest_rexmle.runtime.base import RunSpec  # noqa: E402
from pytest_rexmle.task import registry  # noqa: E402


def folder_size(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def stage_once(public: Path, base: Path, copy: bool = False) -> tuple[float, float]:
    run = Path(tempfile.mkdtemp(dir=base))
    for sub in ("workspace", "submission", "logs"):
        (run / sub).mkdir()
    (run / "instructions.md").write_text("do it\n")
    logs = [run / "logs" / "agent.stdout.log", run / "logs" / "agent.stderr.log"]
    for log in logs:
        log.touch()
    spec = RunSpec("bench", [], {}, public, run / "workspace", run / "submission", run / "logs",
                   run / "instructions.md", 60)
    start = time.perf_counter()
    with staging.staged(spec, logs=logs, copy_data=copy) as view:
        inside = time.perf_counter() - start
        assert view.details["host_paths_hidden"], view.details
        out = time.perf_counter()
    return inside, time.perf_counter() - out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", nargs="*")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--files", type=int, default=0)
    parser.add_argument("--copy", action="store_true", help="copy the data into the stage instead of linking it")
    args = parser.parse_args()
    tasks = [registry().get(t) for t in args.tasks] or [t for t in registry() if t.implemented]
    base = Path(tempfile.mkdtemp(prefix="bench-staging-"))
    print(f"{'task':<24} {'files':>6} {'MiB':>8} {'stage in ms':>12} {'back ms':>8}")
    for task in tasks:
        public = ensure_synthetic(task, seed=0).public
        files, size = folder_size(public)
        runs = [stage_once(public, base, args.copy) for _ in range(args.repeat)]
        print(f"{task.id:<24} {files:>6} {size / 2**20:>8.1f} {min(r[0] for r in runs) * 1e3:>12.2f} "
              f"{min(r[1] for r in runs) * 1e3:>8.2f}")
    if args.files:
        public = base / "many" / "public"
        for i in range(args.files):
            folder = public / f"case{i % 100:03d}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"image{i:06d}.nii.gz").write_bytes(b"x" * 64)
        runs = [stage_once(public, base, args.copy) for _ in range(args.repeat)]
        print(f"{'made-up':<24} {args.files:>6} {'-':>8} {min(r[0] for r in runs) * 1e3:>12.2f} "
              f"{min(r[1] for r in runs) * 1e3:>8.2f}")
    staging.remove_tree(base)
    return 0


if __name__ == "__main__":
    sys.exit(main())
