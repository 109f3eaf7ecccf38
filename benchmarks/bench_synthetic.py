"""Time and size of generating all synthetic twins from scratch (goal: < 30 s and < 50 MB for all 20).

Run: ``python benchmarks/bench_synthetic.py``. Each task is generated into a fresh temporary folder;
the table shows seconds and bytes per task and the totals.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from pytest_rexmle.data.synthetic import generate
from pytest_rexmle.task import registry


def folder_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    total_s = total_b = 0.0
    print(f"{'task':<22}{'seconds':>9}{'KiB':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for task in registry():
            if task.synthetic is None:
                print(f"{task.id:<22}{'-':>9}{'-':>9}  (no generator)")
                continue
            out = Path(tmp) / task.id
            start = time.perf_counter()
            generate(task, out)
            seconds = time.perf_counter() - start
            size = folder_bytes(out)
            total_s, total_b = total_s + seconds, total_b + size
            print(f"{task.id:<22}{seconds:>9.2f}{size / 1024:>9.0f}")
    print(f"{'total':<22}{total_s:>9.2f}{total_b / 1024:>9.0f}   (goal: < 30 s, < 51200 KiB)")


if __name__ == "__main__":
    main()
