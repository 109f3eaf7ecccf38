"""The compute record describes the machine that ran the run: a Slurm node's own hardware, not the login node's."""

from __future__ import annotations

from pytest_rexmle import compute

NODE = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 1, "driver_version": "580.159.04", "cuda_version": "13.0",
        "cpu_model": "the node's CPU", "cpu_cores": 32, "memory_bytes": 1 << 40}


def test_a_nodes_own_hardware_is_the_record_not_the_submitting_hosts():
    record = compute.compute_record({"gpus": ["0"], "duration": 3600.0, "runtime": "slurm", "node_hardware": NODE})
    assert {k: record[k] for k in NODE} == NODE
    assert record["gpu_hours"] == 1.0 and "gpu_unavailable" not in record


def test_without_a_node_the_record_is_this_machines():
    record = compute.compute_record({"gpus": [], "duration": 10.0, "runtime": "local"})
    assert record["cpu_model"] == compute.cpu_model() and record["cpu_cores"] == compute.cpu_cores()
    assert record["memory_bytes"] == compute.memory_bytes() and record["gpu_count"] == 0


def test_the_runs_limits_still_bound_cores_and_memory():
    record = compute.compute_record({"gpus": ["0"], "node_hardware": NODE, "limits": {"cpus": 4, "memory": 2 << 30}})
    assert record["cpu_cores"] == 4 and record["memory_bytes"] == 2 << 30


def test_machine_facts_say_why_gpu_facts_are_missing():
    facts = compute.machine_facts(["0"])
    assert facts["gpu_count"] == 1 and facts["gpu_model"] is None and facts["gpu_unavailable"]  # no driver here
