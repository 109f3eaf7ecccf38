"""Host-side reading of hostile agent leftovers: time and peak memory (issue 10, deliverable 5).

Each case runs in a fresh interpreter and reports its wall time and peak RSS (``ru_maxrss``), next to
the interpreter's floor after the same imports. Goals: the rules judge plus the stage scores of a run
with a 1 GiB model-calls record, 81 GiB of (sparse) code and logs, FIFOs and a 1,500-level folder finish
in < 10 s and < 300 MB; a NIfTI gzip bomb and a sparse header bomb are INVALID in well under a second and
100 MB above the floor.

    python benchmarks/bench_hostile.py [--keep]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.hostile.helpers import baseline_rss_mb, gzip_bomb, nifti_header, peak_rss_of, remove_tree, sparse_file  # noqa: E402
from tests.hostile.test_judge import hostile_layout  # noqa: E402


def hostile_run(root: Path) -> Path:
    run = root / "run"
    hostile_layout(run)
    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    floor = baseline_rss_mb()
    print(f"interpreter floor after imports: {floor:.0f} MB")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        run = hostile_run(root)
        out = peak_rss_of(f"""
            from pathlib import Path
            from pytest_rexmle.capability import get_judge
            from pytest_rexmle.capability.stages import stage_scores
            judge = get_judge("rules")
            judge.judge_run(Path({str(run)!r}), "isles22")
            stage_scores(Path({str(run)!r}), "isles22", None, judge)
        """, timeout=1800)
        print(f"rules judge + stages, 1 GiB of model calls, 81 GiB of code and logs: {out['seconds']:.2f} s wall, {out['cpu_seconds']:.2f} s CPU, "
              f"peak {out['peak_mb']:.0f} MB")
        for name, make in (("gzip bomb 4 MB -> 4 GiB", lambda p: gzip_bomb(p / "b.nii.gz", (2048, 2048, 1024))),
                           ("sparse 4 KB header, 4096^3", lambda p: sparse_file(p / "b.nii", 4096,
                                                                                 nifti_header((4096, 4096, 4096))))):
            path = make(root)
            out = peak_rss_of(f"""
                import SimpleITK as sitk
                from pathlib import Path
                from pytest_rexmle.errors import InvalidSubmission
                from pytest_rexmle.medimage.geometry import read_mask
                try:
                    read_mask(Path({str(path)!r}), sitk.Image([48, 40, 24], sitk.sitkUInt8), "c1")
                except InvalidSubmission as exc:
                    out["reason"] = str(exc)
            """)
            print(f"{name}: {out['seconds']:.3f} s wall, {out['cpu_seconds']:.3f} s CPU, peak {out['peak_mb']:.0f} MB, {out.get('reason', 'VALID?!')}")
        remove_tree(run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
