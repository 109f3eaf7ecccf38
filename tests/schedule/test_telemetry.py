"""GPU telemetry through the real nvidia-ml-py binding, loaded with a stand-in NVML library (no GPU here)."""

from __future__ import annotations

import json
import math

import pytest

from pytest_rexmle.compute import cpu_model
from pytest_rexmle.report.junit import read_cases
from pytest_rexmle.schedule.telemetry import _thin

from ..conftest import report_json, run_folders
from .conftest import COPY_BASELINE, baseline_agent

GPU0 = [(20, 1_000_000_000, 50_000), (60, 3_000_000_000, 150_000)]  # alternating samples
GPU1 = [(70, 6_000_000_000, 250_000)]
GPU_NAME = "NVIDIA H100 80GB HBM3 (stand-in)"


@pytest.fixture
def standin_gpus(nvml_standin, tmp_path, monkeypatch):
    readings = tmp_path / "nvml"
    readings.mkdir()
    for index, lines in enumerate((GPU0, GPU1)):
        (readings / f"gpu{index}").write_text("".join(f"{u} {m} {p}\n" for u, m, p in lines))
    monkeypatch.setenv("LD_LIBRARY_PATH", str(nvml_standin))
    monkeypatch.setenv("NVML_STANDIN_DIR", str(readings))
    monkeypatch.setenv("NVML_STANDIN_COUNT", "2")
    monkeypatch.setenv("NVML_STANDIN_NAME", GPU_NAME)
    monkeypatch.setenv("REXMLE_GPU_SAMPLE_SECONDS", "0.1")
    return readings


def test_each_run_gets_its_own_gpus_samples_and_the_session_its_busy_fraction(bench, needs_bwrap, standin_gpus):
    cmd = f"sleep 1.5; {COPY_BASELINE}"
    agent = baseline_agent(bench.path, ["isles22", "ldct-iqa"])
    bench("--agent=command", f"--agent-option=cmd={cmd}", f"--agent-option=dir={agent}", "--rexmle-gpus=0,1",
          "--junitxml=junit.xml", "-k", "isles22 or ldct-iqa").assert_outcomes(passed=2)
    campaign = report_json(bench.path)["campaign"]
    by_gpu = {}
    for run in campaign["runs"]:
        meta = json.loads((run_folders(bench.path, run["task"])[-1] / "run.json").read_text())
        telemetry = meta["gpu_telemetry"]
        assert telemetry == run["telemetry"]  # run.json and the report carry the same record
        assert telemetry["available"] is True and telemetry["source"] == "nvml", telemetry
        assert telemetry["gpus"] == run["gpus"] and len(run["gpus"]) == 1
        assert telemetry["gpu_hours"] == pytest.approx(telemetry["seconds"] / 3600, abs=1e-6)
        by_gpu[run["gpus"][0]] = telemetry
        # the compute record: the GPU as NVML names it, the telemetry's GPU-hours, this machine's CPU
        compute = meta["compute"]
        assert (compute["gpu_model"], compute["gpu_count"], compute["driver_version"], compute["cuda_version"]) == \
            (GPU_NAME, 1, "550.54.15", "12.4")
        assert compute["gpu_hours"] == telemetry["gpu_hours"] and compute["wall_seconds"] == round(meta["duration"], 3)
        assert compute["cpu_model"] == cpu_model() and compute["runtime"] == "local"
        assert compute["mechanism"] == meta["sandbox"] and compute["tokens"] == 0
        timeline = telemetry["timeline"][0]
        assert timeline["gpu"] == run["gpus"][0] and len(timeline["utilisation"]) == telemetry["samples"]
        assert max(timeline["utilisation"]) == telemetry["utilisation_peak"]
    for case in read_cases(bench.path / "junit.xml").values():
        assert (case["compute.gpu_model"], case["compute.cuda_version"]) == (GPU_NAME, "12.4")
    assert sorted(by_gpu) == ["0", "1"]
    one = by_gpu["1"]
    assert (one["utilisation_mean"], one["utilisation_peak"], one["memory_peak_bytes"], one["power_mean_watts"]) == \
        (70, 70, 6_000_000_000, 250)
    zero = by_gpu["0"]
    n = zero["samples"]
    assert n >= 5, zero  # 1.5 s at 0.1 s
    expected_mean = (20 * math.ceil(n / 2) + 60 * (n // 2)) / n  # the stand-in alternates, starting at 20 %
    assert zero["utilisation_mean"] == pytest.approx(expected_mean, abs=1e-3)
    assert zero["utilisation_peak"] == 60 and zero["memory_peak_bytes"] == 3_000_000_000
    busy = sum(t["utilisation_mean"] / 100 * t["seconds"] for t in by_gpu.values()) / (2 * campaign["makespan_s"])
    assert campaign["gpu_busy_fraction"] == pytest.approx(busy, abs=1e-3)
    assert 0 < campaign["gpu_busy_fraction"] < campaign["gpu_allocated_fraction"] <= 1


@pytest.mark.slow  # a session; the other test covers the sampling
def test_without_a_driver_the_fields_say_so(bench, needs_bwrap, nvml_standin, monkeypatch):
    """The library is found but NVML cannot start (as on a machine whose driver is not loaded)."""
    monkeypatch.setenv("LD_LIBRARY_PATH", str(nvml_standin))
    monkeypatch.delenv("NVML_STANDIN_DIR", raising=False)
    bench("--agent=sample", "--rexmle-gpus=0", "-k", "ldct-iqa").assert_outcomes(passed=1)
    meta = json.loads((run_folders(bench.path, "ldct-iqa")[-1] / "run.json").read_text())
    telemetry = meta["gpu_telemetry"]
    assert telemetry["available"] is False and telemetry["reason"].startswith("NVML unavailable"), telemetry
    assert "utilisation_mean" not in telemetry and "memory_peak_bytes" not in telemetry
    campaign = report_json(bench.path)["campaign"]
    assert campaign["gpu_busy_fraction"] is None and "ldct-iqa" in campaign["gpu_busy_reason"]


def test_the_timeline_keeps_at_most_its_points_as_stretch_means():
    assert _thin([1.0, 2.0, 3.0]) == [1.0, 2.0, 3.0]
    thinned = _thin([float(i % 2) for i in range(240)], points=120)
    assert thinned == [0.5] * 120
    assert _thin(list(range(1000)), points=10) == [49, 149, 249, 349, 449, 549, 649, 749, 849, 949]
