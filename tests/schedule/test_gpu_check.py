"""benchmarks/gpu_check.sh on this GPU-less machine: its stand-in mode (GPU_CHECK_STANDIN=1) runs the whole GPU
path (a command agent on two synthetic twins sharing GPU 0, the sandbox's view, NVML telemetry through the
real nvidia-ml-py binding over tests/schedule/nvml_standin.c) so the script is known to work the day a GPU
machine is at hand."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from ..conftest import REPO, require_service

SCRIPT = REPO / "benchmarks" / "gpu_check.sh"


def gpu_check(tmp_path: Path, cache: Path, **extra: str) -> subprocess.CompletedProcess:
    require_service(shutil.which("gcc") is not None, "REXMLE_REQUIRE_GCC", "gcc (to build the stand-in NVML library)")
    env = {**os.environ, "GPU_CHECK_STANDIN": "1", "PYTHON": sys.executable, "WORK": str(tmp_path / "work"),
           "REXMLE_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO), **extra}
    for name in ("NVML_STANDIN_DIR", "NVML_STANDIN_COUNT", "CUDA_VISIBLE_DEVICES", "AGENT_ENV", "AGENT_PYTHON", "TASKS",
                 "REXMLE_GPU_SAMPLE_SECONDS", "TRAIN_SECONDS", "GPU"):
        env.pop(name, None)
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=600)


def test_the_gpu_check_passes_on_the_stand_in_and_prints_its_summary(tmp_path, shared_cache, needs_bwrap):
    done = gpu_check(tmp_path, shared_cache)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    summary = out.split("--- GPU check summary", 1)[1]
    assert "GPU: NVIDIA stand-in (gpu_check) (driver 550.54.15, CUDA 12.4)" in summary and "STAND-IN NVML" in summary
    assert re.search(r"session: [0-9.]+ s wall for 2 runs on GPU 0", summary), summary
    for task in ("isles22", "topcow-cta-seg"):
        line = re.search(rf"^{task}: \S+-\S+ UTC, agent [0-9.]+ s; util mean ([0-9.]+) % peak 85.0 %, "
                         r"memory peak 3.00 GiB, power mean [0-9.]+ W, (\d+) samples", summary, re.M)
        assert line, summary
        assert 55 <= float(line[1]) <= 85 and int(line[2]) >= 2  # the stand-in alternates 55 % and 85 %
    # the agent's stack is this venv: the U-Net on the CPU where it holds torch, else the numpy fallback
    trained = "trained on cpu: " if importlib.util.find_spec("torch") else "trained nearest centroids with numpy"
    assert "cuda False" in summary and summary.count(trained) == 2, summary
    assert not re.search(r"^  FAIL  |gpu_check: FAIL", out, re.M) and summary.rstrip().endswith("checks: all passed")
    assert "one after the other: isles22 finished" in out or "one after the other: topcow-cta-seg finished" in out


def test_an_idle_card_fails_the_telemetry_check(tmp_path, shared_cache, needs_bwrap):
    idle = tmp_path / "idle"
    idle.write_text("0 0 30000\n")  # NVML answers, but the card never worked and holds nothing
    done = gpu_check(tmp_path, shared_cache, GPU_CHECK_STANDIN_READINGS=str(idle))
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "FAIL  isles22: utilisation_mean 0.0 > 0" in out and "FAIL  isles22: memory_peak_bytes 0 > 0" in out
    assert "checks: 4 FAILED" in out


def test_a_sandbox_showing_the_hosts_home_or_devices_fails_the_view_check(tmp_path, shared_cache, needs_bwrap):
    """A bubblewrap that shows more than the harness asks (a folder on /home, a device node it did not
    list): the agent reports it and the script fails, naming both."""
    home = tmp_path / "home"
    (home / "someone").mkdir(parents=True)
    leaky = tmp_path / "leaky" / "bwrap"
    leaky.parent.mkdir()
    leaky.write_text("#!/bin/bash\n"  # the harness's options come before "--" (a probe may have none)
                     'head=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do head+=("$1"); shift; done\n'
                     f'[ $# -gt 0 ] || exec {needs_bwrap} "${{head[@]}}"\n'
                     f'exec {needs_bwrap} --ro-bind {home} /home "${{head[@]}}" '
                     '--dev-bind /dev/null /dev/host-leak "$@"\n')
    leaky.chmod(0o755)
    done = gpu_check(tmp_path, shared_cache, BWRAP=str(leaky))
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "2 passed" in out  # the runs themselves were graded: only the view check fails
    assert "FAIL  isles22: /home inside: ['someone']" in out
    assert "FAIL  topcow-cta-seg: /dev holds only standard and GPU nodes (others: ['host-leak'])" in out
    assert "checks: 4 FAILED" in out


def test_a_work_folder_holding_an_earlier_session_is_refused(tmp_path, shared_cache):
    # the checks count every run under WORK: a reused folder would count an earlier session's runs as this one's
    (tmp_path / "work" / "session" / ".rexmle" / "runs").mkdir(parents=True)
    done = gpu_check(tmp_path, shared_cache)
    assert done.returncode == 1
    assert f"gpu_check: FAIL: {tmp_path / 'work'} already holds a session: give WORK a fresh folder" in done.stderr
