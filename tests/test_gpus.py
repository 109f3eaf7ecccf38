"""GPU lists and their assignment to xdist workers."""

from __future__ import annotations

import json

import pytest

from pytest_rexmle.gpus import detect_gpus, parse_gpus, share_for_worker, worker_index

from .conftest import run_folders


def test_parse_gpus(monkeypatch):
    assert parse_gpus("0,1, 3") == ["0", "1", "3"]
    assert parse_gpus("none") == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert parse_gpus(None) == ["2", "5"] == detect_gpus()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert parse_gpus(None) == []


@pytest.mark.parametrize("gpus, n_workers, expected", [
    (["0", "1", "2", "3"], 4, [["0"], ["1"], ["2"], ["3"]]),   # one GPU per worker
    (["0", "1"], 4, [["0"], ["1"], ["0"], ["1"]]),             # more workers than GPUs: round-robin sharing
    (["0", "1", "2", "3"], 2, [["0", "2"], ["1", "3"]]),       # fewer workers: each takes a slice
    ([], 3, [[], [], []]),
])
def test_share_for_worker(gpus, n_workers, expected):
    assert [share_for_worker(gpus, i, n_workers) for i in range(n_workers)] == expected


def test_worker_index():
    assert worker_index("gw0") == 0 and worker_index("gw11") == 11 and worker_index("master") == 0


def test_xdist_workers_get_distinct_gpus(bench, needs_bwrap):
    cmd = "echo $CUDA_VISIBLE_DEVICES > $REXMLE_WORKSPACE/gpu.txt; cp $REXMLE_DATA_DIR/sample_submission.csv $REXMLE_SUBMISSION_DIR/submission.csv"
    result = bench("--agent=command", f"--agent-option=cmd={cmd}", "-n", "2", "--rexmle-gpus=0,1",
                   "-k", "ldct-iqa or topcow-cta-det or isles22 or topcow-mra-det")
    seen, recorded = set(), set()
    for task_id in ("ldct-iqa", "topcow-cta-det", "isles22", "topcow-mra-det"):
        run = run_folders(bench.path, task_id)[-1]
        seen.add((run / "workspace" / "gpu.txt").read_text().strip())
        recorded.add(json.loads((run / "result.json").read_text())["gpu"])
    assert seen == {"0", "1"} == recorded, "each worker must see only its own GPU, and the result must record it"
    del result


def test_auto_workers_follow_gpus(bench, needs_bwrap):
    result = bench("--agent=sample", "-n", "auto", "--rexmle-gpus=0,1,2", "-k", "ldct-iqa", "-v")
    result.stdout.fnmatch_lines(["*created: 3/3 workers*"])


def test_pool_gives_own_gpu_first_and_borrows_free_ones(tmp_path):
    from pytest_rexmle.gpus import GpuPool

    pool = GpuPool(tmp_path, ["0", "1", "2"], poll_seconds=0.01)
    with pool.hold(["1"], 1) as gpus:
        assert gpus == ["1"]
    other = GpuPool(tmp_path, ["0", "1", "2"], poll_seconds=0.01)
    with other.hold(["0"], 1) as busy:                 # another worker's run holds GPU 0
        assert busy == ["0"]
        with pool.hold(["1"], 2) as gpus:
            assert gpus == ["1", "2"]                   # own first, then the free one
        with pytest.raises(TimeoutError, match="no 3 free GPU"):
            with pool.hold(["1"], 3, timeout=0.05):
                pass
    with pool.hold(["1"], 3) as gpus:                   # all free again
        assert gpus == ["1", "0", "2"]


def test_pool_is_all_or_nothing(tmp_path):
    """A run that cannot get all it needs holds none, so another run can proceed meanwhile."""
    from filelock import FileLock

    from pytest_rexmle.gpus import GpuPool

    pool = GpuPool(tmp_path, ["0", "1"], poll_seconds=0.01)
    with FileLock(str(tmp_path / "gpu-1.lock")):
        with pytest.raises(TimeoutError):
            with pool.hold(["0"], 2, timeout=0.05):
                pass
        assert FileLock(str(tmp_path / "gpu-0.lock")).acquire(timeout=0)  # GPU 0 was released


def test_pool_rejects_more_gpus_than_the_session_has(tmp_path):
    from pytest_rexmle.errors import RexmleError
    from pytest_rexmle.gpus import GpuPool

    with pytest.raises(RexmleError, match="needs 3 GPU"):
        with GpuPool(tmp_path, ["0", "1"]).hold(["0"], 3):
            pass


def test_two_gpu_task_takes_both_gpus_and_runs_alone(bench, needs_bwrap, tmp_path, monkeypatch):
    from .test_plugin import _tasks_copy

    monkeypatch.setenv("REXMLE_TASKS_DIR", str(_tasks_copy(tmp_path, **{"ldct-iqa": {"gpus": 2},
                                                                       "isles22": {"gpus": 2}})))
    cmd = ("echo $CUDA_VISIBLE_DEVICES > $REXMLE_WORKSPACE/gpu.txt; date +%s.%N > $REXMLE_WORKSPACE/start; "
           "sleep 1; date +%s.%N > $REXMLE_WORKSPACE/end")
    bench("--agent=command", f"--agent-option=cmd={cmd}", "-n", "2", "--rexmle-gpus=0,1", "-k", "ldct-iqa or isles22")
    spans = []
    for task_id in ("ldct-iqa", "isles22"):
        run = run_folders(bench.path, task_id)[-1]
        assert sorted((run / "workspace" / "gpu.txt").read_text().strip().split(",")) == ["0", "1"]
        assert sorted(json.loads((run / "result.json").read_text())["gpu"].split(",")) == ["0", "1"]
        spans.append((float((run / "workspace" / "start").read_text()), float((run / "workspace" / "end").read_text())))
    (a0, a1), (b0, b1) = sorted(spans)
    assert a1 <= b0, f"two runs that each need both GPUs overlapped: {spans}"
