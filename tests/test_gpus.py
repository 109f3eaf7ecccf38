"""GPU lists, and runs on distinct GPUs whatever the number of xdist workers."""

from __future__ import annotations

import json

import pytest

from pytest_rexmle.gpus import detect_gpus, parse_gpus

from .conftest import run_folders
from .test_gpu_devices import fake_dev  # noqa: F401  (the fixture)


def test_parse_gpus(monkeypatch):
    assert parse_gpus("0,1, 3") == ["0", "1", "3"]
    assert parse_gpus("none") == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert parse_gpus(None) == ["2", "5"] == detect_gpus()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert parse_gpus(None) == []


@pytest.mark.slow  # an xdist session of sandboxed runs
def test_xdist_workers_get_distinct_gpus(bench, needs_bwrap, fake_dev):  # noqa: F811
    """On the faked 8-GPU machine (GPU 0 is /dev/nvidia3, GPU 1 /dev/nvidia5), each run's sandbox shows its own node."""
    cmd = ("ls /dev | grep -E '^nvidia[0-9]+$' > $REXMLE_WORKSPACE/gpu.txt; "
           "cp $REXMLE_DATA_DIR/sample_submission.csv $REXMLE_SUBMISSION_DIR/submission.csv")
    result = bench("--agent=command", f"--agent-option=cmd={cmd}", "-n", "2", "--rexmle-gpus=0,1",
                   "-k", "ldct-iqa or topcow-cta-det or isles22 or topcow-mra-det")
    seen, recorded = set(), set()
    for task_id in ("ldct-iqa", "topcow-cta-det", "isles22", "topcow-mra-det"):
        run = run_folders(bench.path, task_id)[-1]
        seen.add((run / "workspace" / "gpu.txt").read_text().strip())
        recorded.add(json.loads((run / "result.json").read_text())["gpu"])
    assert seen == {"nvidia3", "nvidia5"} and recorded == {"0", "1"}, \
        "each run must see only its own GPU, and the result must record it"
    del result


@pytest.mark.slow  # an xdist session of sandboxed runs
def test_auto_workers_follow_gpus(bench, needs_bwrap):
    result = bench("--agent=sample", "-n", "auto", "--rexmle-gpus=0,1,2", "-k", "ldct-iqa", "-v")
    result.stdout.fnmatch_lines(["*created: 3/3 workers*"])


@pytest.mark.slow  # a session of sandboxed runs that wait for GPUs
def test_two_gpu_task_takes_both_gpus_and_runs_alone(bench, needs_bwrap, tmp_path, monkeypatch):
    from .test_plugin import _competitions_copy

    monkeypatch.setenv("REXMLE_COMPETITIONS_DIR", str(_competitions_copy(tmp_path, **{"ldct-iqa": {"gpus": 2},
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
