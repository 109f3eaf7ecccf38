"""run.json's ``compute.memory_bytes`` is a number of bytes on every runtime, and old files that wrote it as
Docker's text ("2 GiB") still read as bytes (issue #40)."""

from __future__ import annotations

import json

from pytest_rexmle.compute import compute_record, memory_bytes, read_record
from pytest_rexmle.fixtures import run_facts
from pytest_rexmle.report.runpage import render_run_page

START = {"task": "isles22", "agent": "sample", "agent_options": {}, "runtime": "docker", "data": "synthetic",
         "time_limit": 60, "gpus": [], "started": "2026-11-26T10:00:00+00:00"}


def test_a_docker_run_records_its_memory_limit_in_bytes():
    # what DockerRuntime puts in run.json: ContainerLimits.describe(), sizes as text
    meta = {**START, "duration": 5.0, "limits": {"memory": "2 GiB", "cpus": 1.0, "pids": 8192}}
    record = compute_record(meta)
    assert record["memory_bytes"] == 2 << 30 and type(record["memory_bytes"]) is int
    assert compute_record({**meta, "limits": {"memory": "1.5 GiB"}})["memory_bytes"] == 3 << 29


def test_a_local_run_records_the_host_memory_in_bytes():
    record = compute_record({**START, "runtime": "local", "duration": 5.0})
    assert record["memory_bytes"] == memory_bytes() and type(record["memory_bytes"]) is int


def test_an_old_run_json_with_text_memory_reads_as_bytes(tmp_path):
    old = {**START, "compute": {"memory_bytes": "2 GiB", "cpu_cores": 1.0, "runtime": "docker", "gpu_count": 0}}
    (tmp_path / "run.json").write_text(json.dumps(old))
    assert run_facts(tmp_path)["compute"]["memory_bytes"] == 2 << 30
    assert "2147483648" in render_run_page(tmp_path) and "2 GiB" not in render_run_page(tmp_path)
    # text that is no size at all is dropped, not passed on as if it were bytes
    assert read_record({"memory_bytes": "lots", "cpu_cores": 2})["memory_bytes"] is None
    assert read_record({"memory_bytes": 4096})["memory_bytes"] == 4096 and read_record("junk") is None
