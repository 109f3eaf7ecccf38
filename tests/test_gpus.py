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
