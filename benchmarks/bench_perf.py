"""Performance budget of grading, commands and the harness, as ratios measured in one run.

Run ``python benchmarks/bench_perf.py`` (``--quick`` skips the 20-challenge session; ``--root DIR``
measures another checkout of the package, e.g. an older commit unpacked with ``git archive``).
Every number is the best of ``--repeats`` runs of a fresh process, so a busy machine inflates less;
the ratios compare quantities measured side by side in this run, never against a stored number:

* ``grade / decode floor``: ``rexmle grade topcow-cta-seg`` of one TopCoW-size case (512×512×256,
  13 labels, 0.4×0.4×0.6 mm, gzip NIfTI) against a fresh Python that only decodes the two volumes
  with SimpleITK (goal ≤ 2.5), plus the peak RSS of the grade over the two decoded volumes (≤ 4);
* the same ratio for every pixel grader on one case of its real release's size (``grader_cases.py``:
  TopCoW, TopBrain, ISLES'22, PANTHER, SEG.A and a 5000×5000 CellSeg image; goal ≤ 2.5 each;
  ``--grader TASK`` measures only those, ``--no-graders`` none);
* ``rexmle list / info / rank / validate`` start-to-exit times (goal ≤ 0.3 s each), next to a bare
  ``python -c pass`` for scale;
* ``pytest --collect-only`` of the 20 items with the plugin (goal ≤ 1 s);
* the 20-challenge ``sample`` session with ``-n 2`` (goal ≤ 10 s) and its per-item harness overhead:
  the item's time minus the agent's own time and minus grading (re-graded here in a warm process)
  (goal ≤ 0.3 s); where a cgroup-v1 ``cpuacct`` group can be created (root), also the CPU seconds of
  the whole session *with* the sandboxed agents, which rusage misses (the least noisy session number
  on a busy machine).

Not a test: pytest never collects it (outside ``tests/``, not named ``test_*``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # grader_cases, bench_grading
SPACING = (0.4, 0.4, 0.6)
SHAPE = (256, 512, 512)            # (z, y, x): 512×512×256 in SimpleITK order


def timed(cmd: list[str], cwd: Path, env: dict[str, str], check: bool = True) -> dict:
    """Like :func:`run` but with the child's own rusage (os.wait4), so CPU and RSS are per process."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{stderr[-3000:]}{stdout[-2000:]}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024,
            "stdout": stdout, "stderr": stderr, "rc": proc.returncode}


CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def timed_in_cpuacct(cmd: list[str], cwd: Path, env: dict[str, str]) -> dict:
    """:func:`timed`, plus ``cpu_all``: CPU seconds of every process the command started, sandboxed agents
    included, from a cgroup-v1 ``cpuacct`` group of its own (None where there is none to create).

    rusage cannot see the agents: bubblewrap's PID-namespace init is re-parented away from the harness,
    so its children's CPU is never added to the session's. The harness moves agents between cgroup-v2
    (and v1 memory/pids) groups only, never between cpuacct groups, so this group keeps them all."""
    group = CPUACCT / f"rexmle-bench-{os.getpid()}"
    try:
        group.mkdir()
    except OSError:
        return dict(timed(cmd, cwd, env, check=False), cpu_all=None)
    try:
        procs = str(group / "cgroup.procs")
        wrapped = ["/bin/sh", "-c", f'echo $$ > "{procs}" && exec "$@"', "sh", *cmd]
        out = timed(wrapped, cwd, env, check=False)
        out["cpu_all"] = int((group / "cpuacct.usage").read_text()) / 1e9
    finally:
        for _ in range(50):  # the last reaped processes may still be leaving the group
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)
    return out


def best(cmd: list[str], cwd: Path, env: dict[str, str], repeats: int, check: bool = True) -> dict:
    runs = [timed(cmd, cwd, env, check) for _ in range(repeats)]
    out = min(runs, key=lambda r: r["wall"])
    out["cpu"] = min(r["cpu"] for r in runs)
    out["rss_mb"] = max(r["rss_mb"] for r in runs)
    return out


def build_topcow_case(folder: Path, quick: bool) -> int:
    """answers/ and sub/ folders of one TopCoW-size case; returns the bytes of one decoded volume."""
    sys.path.insert(0, str(HERE))
    import SimpleITK as sitk
    from bench_grading import build_case

    shape = (128, 256, 256) if quick else SHAPE
    truth, pred = build_case(shape)
    (folder / "answers").mkdir(parents=True)
    (folder / "sub" / "predictions").mkdir(parents=True)
    for arr, path in ((truth, folder / "answers" / "case_001.nii.gz"),
                      (pred, folder / "sub" / "predictions" / "case_001.nii.gz")):
        img = sitk.GetImageFromArray(arr)
        img.SetSpacing(SPACING)
        sitk.WriteImage(img, str(path), useCompression=True)
    (folder / "answers" / "answers.csv").write_text("image_id,label_path\ncase_001,case_001.nii.gz\n")
    (folder / "sub" / "submission.csv").write_text(
        "image_id,predicted_mask_path\ncase_001,predictions/case_001.nii.gz\n")
    return int(truth.nbytes)


def write_twin_submissions(root: Path, work: Path, env: dict[str, str]) -> None:
    """Synthetic twins and baseline submissions of two tasks for ``rexmle validate``, in a child process
    so that this process never imports the measured package."""
    code = (
        "import sys\nfrom pathlib import Path\n"
        "from pytest_rexmle.task import get_task\nfrom pytest_rexmle.data.synthetic import generate\n"
        "from pytest_rexmle.graders.base import load_grader\n"
        "work = Path(sys.argv[1])\n"
        "for tid in ('ldct-iqa', 'topcow-cta-seg'):\n"
        "    task = get_task(tid)\n"
        "    data = generate(task, work / tid)\n"
        "    load_grader(task).write_baseline(data.public, work / (tid + '-sub'))\n")
    timed([sys.executable, "-c", code, str(work)], work, env)


def session(root: Path, work: Path, env: dict[str, str]) -> dict:
    """The 20-challenge sample session with -n 2 (second run: twins cached), and per-item overhead.

    ``perf_probe`` (beside this file) records, per item and where it ran, the item's time, the agent's
    own time and the grading time; the harness overhead is the item's time minus the other two.
    """
    probe = work / "probe.jsonl"
    env = dict(env, REXMLE_PERF_PROBE=str(probe), PYTHONPATH=str(HERE) + os.pathsep + env.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "pytest", "-q", "--agent=sample", "--rexmle-data=synthetic", "-n", "2",
           "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "perf_probe",
           f"--rexmle-runs-dir={work / 'runs'}", f"--rexmle-report-dir={work / 'report'}"]
    timed(cmd, work, env, check=False)                  # warm: synthetic twins generated once
    probe.unlink(missing_ok=True)
    result = timed_in_cpuacct(cmd, work, env)
    rows = [json.loads(line) for line in probe.read_text().splitlines() if line.strip()]
    overhead = {r["task"]: r["item"] - r["agent"] - r["grade"] for r in rows}
    return {"wall": result["wall"], "cpu": result["cpu"], "cpu_all": result["cpu_all"], "passed": result["stdout"].strip().splitlines()[-1:],
            "items": {r["task"]: r["item"] for r in rows}, "rows": rows, "overhead": overhead}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=str(HERE.parent), help="checkout whose pytest_rexmle is measured")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="quarter-size case, no sample session")
    parser.add_argument("--json", help="also write the numbers to this file")
    parser.add_argument("--grader", action="append", default=None, metavar="TASK",
                        help="measure only these graders' release-size cases (repeatable), then stop")
    parser.add_argument("--no-graders", action="store_true", help="skip the release-size grader cases")
    parser.add_argument("--keep-bytecode-setting", action="store_true",
                        help="keep PYTHONDONTWRITEBYTECODE if set (every process then recompiles every module "
                             "and pytest re-rewrites every plugin module: not how an installed package runs)")
    args = parser.parse_args(argv)
    root = Path(args.root).resolve()
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("REXMLE_COMPETITIONS_DIR", None)  # the measured checkout's own tasks
    if not args.keep_bytecode_setting:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    py = sys.executable
    r = args.repeats
    numbers: dict[str, float] = {}
    cpu: dict[str, float] = {}          # CPU seconds (user + sys) of the same runs: less inflated by a busy machine
    if args.grader:
        with tempfile.TemporaryDirectory(prefix="rexmle-perf-") as tmp:
            env["REXMLE_CACHE_DIR"] = str(Path(tmp) / "cache")
            graders = grader_ratios(args.grader, Path(tmp), env, r)
        print_graders(root, r, graders)
        if args.json:
            Path(args.json).write_text(json.dumps(graders, indent=2))
        return 0
    graders = {}
    with tempfile.TemporaryDirectory(prefix="rexmle-perf-") as tmp:
        work = Path(tmp)
        env["REXMLE_CACHE_DIR"] = str(work / "cache")
        if not args.no_graders and not args.quick:
            from grader_cases import CASES

            graders = grader_ratios(list(CASES), work / "graders", env, r)
        volume_bytes = build_topcow_case(work / "case", args.quick)
        case = work / "case"
        a, b = case / "answers" / "case_001.nii.gz", case / "sub" / "predictions" / "case_001.nii.gz"
        bare = best([py, "-c", "pass"], work, env, r)
        floor = best([py, "-c", f"import SimpleITK as s; s.ReadImage({str(a)!r}); s.ReadImage({str(b)!r})"],
                     work, env, r)
        grade = best([py, "-m", "pytest_rexmle", "grade", "topcow-cta-seg", "--submission", "sub",
                      "--answers", "answers", "--json"], case, env, r)
        if json.loads(grade["stdout"])["status"] != "ok":
            raise RuntimeError(f"grade did not succeed: {grade['stdout']}")
        cpu.update(python_start_s=bare["cpu"], decode_floor_s=floor["cpu"], grade_s=grade["cpu"])
        numbers.update(python_start_s=bare["wall"], decode_floor_s=floor["wall"], grade_s=grade["wall"],
                       grade_cpu_s=grade["cpu"], decode_floor_cpu_s=floor["cpu"],
                       grade_over_floor=grade["wall"] / floor["wall"],
                       grade_rss_mb=grade["rss_mb"], decoded_volumes_mb=2 * volume_bytes / 2**20,
                       rss_over_volumes=grade["rss_mb"] / (2 * volume_bytes / 2**20))

        twins = work / "twins"
        twins.mkdir()
        write_twin_submissions(root, twins, env)
        commands = {
            "list": ["list"],
            "info": ["info", "topcow-cta-seg"],
            "rank": ["rank", "topcow-cta-det", "--metrics", '{"iou": 0.6707, "boundary_iou": 0.611}'],
            "validate_csv": ["validate", "--task", "ldct-iqa", "--data", str(twins / "ldct-iqa" / "public"),
                             "--submission", str(twins / "ldct-iqa-sub")],
            "validate_nifti": ["validate", "--task", "topcow-cta-seg", "--data",
                               str(twins / "topcow-cta-seg" / "public"), "--submission",
                               str(twins / "topcow-cta-seg-sub")],
        }
        for name, cmd in commands.items():
            out = best([py, "-m", "pytest_rexmle", *cmd], work, env, r)
            numbers[f"cmd_{name}_s"], cpu[f"cmd_{name}_s"] = out["wall"], out["cpu"]

        empty = work / "collect"
        empty.mkdir()
        collect_cmd = [py, "-m", "pytest", "--collect-only", "-q", "--agent=sample", "--rexmle-data=synthetic",
                       "-p", "no:cacheprovider"]
        out = best(collect_cmd, empty, env, r)
        numbers["collect_s"], cpu["collect_s"] = out["wall"], out["cpu"]
        # hypothesis (a dev extra) imports itself at every session's end; a user's install has no such plugin
        out = best([*collect_cmd, "-p", "no:hypothesispytest"], empty, env, r)
        numbers["collect_no_hypothesis_s"], cpu["collect_no_hypothesis_s"] = out["wall"], out["cpu"]
        if not args.quick:
            sess_dir = work / "session"
            sess_dir.mkdir()
            sess = session(root, sess_dir, env)
            numbers["session_s"], cpu["session_s"] = sess["wall"], sess["cpu"]
            if sess["cpu_all"] is not None:
                numbers["session_cpu_all_s"] = sess["cpu_all"]
            over = list(sess["overhead"].values())
            numbers["overhead_mean_s"] = statistics.mean(over) if over else float("nan")
            numbers["overhead_max_s"] = max(over) if over else float("nan")
            numbers["session_items"] = len(sess["items"])
            worst = sorted(sess["rows"], key=lambda row: -(row["item"] - row["agent"] - row["grade"]))[:3]

    print(f"measured: {root}  (best of {r}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    rows = [
        ("python -c pass", "python_start_s", "s", None),
        ("decode floor (fresh python, 2 volumes)", "decode_floor_s", "s", None),
        ("rexmle grade topcow-cta-seg", "grade_s", "s", None),
        ("  grade / decode floor", "grade_over_floor", "x", 2.5),
        ("  grade peak RSS", "grade_rss_mb", "MiB", None),
        ("  peak RSS / decoded volumes", "rss_over_volumes", "x", 4.0),
        *[(f"rexmle {k[4:-2].replace('_', ' ')}", k, "s", 0.3) for k in numbers if k.startswith("cmd_")],
        ("pytest --collect-only (20 items)", "collect_s", "s", 1.0),
        ("  without the hypothesis plugin", "collect_no_hypothesis_s", "s", 1.0),
    ]
    numbers["grade_cpu_over_floor_cpu"] = cpu["grade_s"] / cpu["decode_floor_s"]
    cpu["grade_over_floor"] = numbers["grade_cpu_over_floor_cpu"]
    if "session_s" in numbers:
        rows += [("sample session, 20 items, -n 2", "session_s", "s", 10.0),
                 *([("  CPU with the sandboxed agents", "session_cpu_all_s", "s", None)]
                   if "session_cpu_all_s" in numbers else []),
                 ("per-item harness overhead (mean)", "overhead_mean_s", "s", 0.3),
                 ("per-item harness overhead (max)", "overhead_max_s", "s", None)]
    print(f"{'quantity':42s} {'wall':>9s}      {'CPU':>7s}  {'goal':>6s}")
    for name, key, unit, goal in rows:
        value = numbers[key]
        mark = "" if goal is None else ("  ok" if value <= goal else "  OVER")
        used = f"{cpu[key]:7.3f}" if key in cpu else " " * 7
        print(f"{name:42s} {value:9.3f} {unit:3s}  {used}  {'' if goal is None else f'≤ {goal:g}':>6s}{mark}")
    numbers.update({f"cpu_{k}": v for k, v in cpu.items()})
    if "session_s" in numbers:
        print("largest per-item overheads (item = agent + grading + overhead, seconds):")
        for row in worst:
            print(f"  {row['task']:22s} item {row['item']:6.2f}  agent {row['agent']:6.2f}  grading {row['grade']:6.2f}"
                  f"  overhead {row['item'] - row['agent'] - row['grade']:6.2f}")
    if graders:
        print_graders(root, r, graders)
        numbers.update({f"grader_{task}_{key}": value for task, row in graders.items() for key, value in row.items()})
    if args.json:
        Path(args.json).write_text(json.dumps(numbers, indent=2))
    return 0


def grader_ratios(tasks: list[str], work: Path, env: dict[str, str], repeats: int) -> dict[str, dict[str, float]]:
    """Per task: build its release-size case (in a child process: this one never imports the measured
    package), then the best-of-``repeats`` wall and CPU of the decode floor and of ``rexmle grade``."""
    from grader_cases import CASES, floor_code

    py = sys.executable
    out = {}
    child_env = dict(env, PYTHONPATH=str(HERE) + os.pathsep + env.get("PYTHONPATH", ""))
    for task in tasks:
        folder = work / task
        folder.mkdir(parents=True)
        build = timed([py, "-c", "import sys, grader_cases; from pathlib import Path; "
                       "a, b = grader_cases.CASES[sys.argv[1]][0](Path(sys.argv[2])); print(a); print(b)",
                       task, str(folder)], folder, child_env)
        a, b = (Path(line) for line in build["stdout"].split())
        floor = best([py, "-c", floor_code(CASES[task][1], a, b)], folder, env, repeats)
        grade = best([py, "-m", "pytest_rexmle", "grade", task, "--submission", "sub", "--answers", "answers",
                      "--json"], folder, env, repeats)
        result = json.loads(grade["stdout"])
        if result["status"] != "ok":
            raise RuntimeError(f"{task}: grade did not succeed: {grade['stdout']}")
        out[task] = {"floor_s": floor["wall"], "grade_s": grade["wall"], "ratio": grade["wall"] / floor["wall"],
                     "floor_cpu_s": floor["cpu"], "grade_cpu_s": grade["cpu"], "cpu_ratio": grade["cpu"] / floor["cpu"],
                     "grade_rss_mb": grade["rss_mb"], "bytes": a.stat().st_size + b.stat().st_size}
    return out


def print_graders(root: Path, repeats: int, graders: dict[str, dict[str, float]]) -> None:
    print(f"graders on release-size cases: {root} (best of {repeats}; load average {os.getloadavg()[0]:.1f})")
    print(f"{'task':18s} {'floor':>8s} {'grade':>8s} {'ratio':>7s} {'CPU ratio':>9s} {'RSS MiB':>8s}  goal ≤ 2.5")
    for task, row in graders.items():
        mark = "ok" if row["ratio"] <= 2.5 else "OVER"
        print(f"{task:18s} {row['floor_s']:7.2f}s {row['grade_s']:7.2f}s {row['ratio']:6.2f}x {row['cpu_ratio']:8.2f}x "
              f"{row['grade_rss_mb']:8.0f}  {mark}")


if __name__ == "__main__":
    raise SystemExit(main())
