#!/usr/bin/env bash
# gpu_check.sh: the GPU path end to end, for the day a GPU machine is at hand (issue 28, item 5).
#
# What it needs (no Docker, no network; under 10 minutes on one GPU):
#   - this checkout, installed (`pip install --no-deps -e .`): the runtimes are found through their entry
#     points (where the package itself is not importable from the work folder, the checkout is put first
#     on PYTHONPATH);
#   - PYTHON: an interpreter holding the project's dependencies (pytest, numpy, nibabel, nvidia-ml-py, ...)
#     (default: .venv/bin/python in the checkout if present, else python3);
#   - the agent's PyTorch: AGENT_ENV, a venv or conda prefix with torch, given to the agent as
#     `--agent-option env=` (read-only inside the sandbox, first on PATH); or AGENT_PYTHON, a system
#     interpreter with torch (under /usr or /opt, which the sandbox shows anyway). Default: PYTHON's own prefix
#     when PYTHON is a venv, else PYTHON itself. Packages under a home folder (pip --user) are hidden by design;
#   - bubblewrap: on PATH, or BWRAP=/path/to/bwrap (a binary carried in with the checkout is fine);
#   - the NVIDIA driver (libnvidia-ml.so.1, /dev/nvidia*); GPU (default 0) names the GPU to use.
#
# What it checks (exit status non-zero on any failure; a summary for the README's GPU section at the end):
#   1. a pytest session with --agent=command runs benchmarks/gpu_agent.py, which trains a small 3-D U-Net on
#      the synthetic twins of TASKS (default isles22 and topcow-cta-seg) on the GPU inside the sandbox, writes
#      predictions, and both runs are graded `ok`;
#   2. the two runs share --rexmle-gpus=GPU and so run one after the other: their run.json start/finish
#      times do not overlap;
#   3. each run.json carries real NVML telemetry (gpu_telemetry.available, utilisation_mean > 0,
#      memory_peak_bytes > 0) and a compute record naming the GPU (compute.gpu_model);
#   4. inside the sandbox torch.cuda.is_available() is true and names the device, and nothing else of the
#      host shows: /root and /home are absent or empty, the host's /tmp (a marker file placed there) is not
#      the sandbox's, and /dev holds only the standard nodes and the GPU's (nvidia*, dri).
#
# GPU_CHECK_STANDIN=1: the same script on a machine without a GPU (this project's CI, tests/schedule/
# test_gpu_check.py): gcc builds the stand-in NVML of tests/schedule/nvml_standin.c, whose readings stand in
# for the driver's (LD_LIBRARY_PATH, NVML_STANDIN_DIR, NVML_STANDIN_COUNT=1, NVML_STANDIN_NAME), so the
# telemetry and compute checks read what NVML reports through the real nvidia-ml-py binding; check 4 then
# expects no CUDA (the agent falls back to numpy where its stack has no torch) and the rest is unchanged.
# GPU_CHECK_STANDIN_READINGS=FILE replaces the stand-in's readings (lines "util_% memory_bytes power_mW"),
# e.g. an idle card, which the telemetry check must then fail.
#
# Other settings: WORK (a fresh folder, default mktemp -d), TRAIN_SECONDS (default 45; 2 with the stand-in),
# REXMLE_CACHE_DIR (where the synthetic twins are cached; default under WORK), REXMLE_GPU_SAMPLE_SECONDS
# (default 1; 0.1 with the stand-in).
set -eu
set -o pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
STANDIN=${GPU_CHECK_STANDIN:-0}
GPU=${GPU:-0}
TASKS=${TASKS:-"isles22 or topcow-cta-seg"}
WORK=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")}
if [ -z "${PYTHON:-}" ]; then
    if [ -x "$REPO/.venv/bin/python" ]; then PYTHON=$REPO/.venv/bin/python; else PYTHON=$(command -v python3); fi
fi
if [ "$STANDIN" = 1 ]; then TRAIN_SECONDS=${TRAIN_SECONDS:-2}; else TRAIN_SECONDS=${TRAIN_SECONDS:-45}; fi
export REXMLE_CACHE_DIR=${REXMLE_CACHE_DIR:-$WORK/cache}
if [ "$STANDIN" = 1 ]; then SAMPLE=0.1; else SAMPLE=1; fi  # the stand-in's runs last a second or two
export REXMLE_GPU_SAMPLE_SECONDS=${REXMLE_GPU_SAMPLE_SECONDS:-$SAMPLE}
[ -n "${BWRAP:-}" ] && export PATH="$(cd "$(dirname "$BWRAP")" && pwd):$PATH"

fail() { echo "gpu_check: FAIL: $*" >&2; exit 1; }
say() { echo "gpu_check: $*"; }

# the checks count the runs under WORK: an earlier session's there would be counted with this one's
[ -e "$WORK/session/.rexmle" ] && fail "$WORK already holds a session: give WORK a fresh folder"
mkdir -p "$WORK/session"
command -v bwrap >/dev/null || fail "bubblewrap not found: put it on PATH or set BWRAP=/path/to/bwrap"
# this checkout's package, whether installed from it (pip install --no-deps -e .) or put on PYTHONPATH here;
# asked from the work folder, where the session runs: `python -c` in the checkout would find it in the cwd
(cd "$WORK" && "$PYTHON" -c 'import os, sys, pytest_rexmle as p; sys.exit(not p.__file__.startswith(sys.argv[1] + os.sep))' \
    "$REPO") 2>/dev/null || export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
"$PYTHON" -c 'import pytest_rexmle.plugin, pynvml' || fail "$PYTHON cannot import the project and nvidia-ml-py"
"$PYTHON" -c 'from importlib.metadata import entry_points as e
raise SystemExit(not any(p.name == "local" for p in e(group="rexmle.runtimes")))' \
    || fail "no runtime is registered for $PYTHON: install this checkout (pip install --no-deps -e .)"
# the plugin by name only where no installed entry point loads it already (loading it twice is an error)
PLUGIN=$("$PYTHON" -c 'from importlib.metadata import entry_points as e
print("" if any(p.value == "pytest_rexmle.plugin" for p in e(group="pytest11")) else "-p pytest_rexmle.plugin")')

# The agent's stack: a prefix for env=, or a system interpreter the sandbox shows anyway.
if [ -z "${AGENT_ENV:-}" ] && [ -z "${AGENT_PYTHON:-}" ]; then
    read -r PREFIX BASE EXE <<EOF
$("$PYTHON" -c 'import sys; print(sys.prefix, sys.base_prefix, sys.executable)')
EOF
    # a venv outside the system folders goes in as env=; one under them (/opt/torch/.venv) the sandbox shows anyway
    case "$PREFIX" in /usr/*|/bin/*|/lib/*|/lib64/*|/opt/*) SYSTEM=1 ;; *) SYSTEM=0 ;; esac
    if [ "$PREFIX" != "$BASE" ] && [ "$SYSTEM" = 0 ]; then AGENT_ENV=$PREFIX; else AGENT_PYTHON=$EXE; fi
fi
if [ -n "${AGENT_ENV:-}" ]; then
    STACK=("--agent-option=env=$AGENT_ENV"); AGENT_CMD=python; PROBE=$AGENT_ENV/bin/python
else
    STACK=(); AGENT_CMD=$AGENT_PYTHON; PROBE=$AGENT_PYTHON
fi
if [ "$STANDIN" != 1 ]; then
    "$PROBE" -c 'import torch' || fail "the agent's Python ($PROBE) has no torch: set AGENT_ENV or AGENT_PYTHON"
fi

if [ "$STANDIN" = 1 ]; then
    command -v gcc >/dev/null || fail "GPU_CHECK_STANDIN=1 needs gcc to build the stand-in NVML"
    mkdir -p "$WORK/nvml/readings"
    gcc -shared -fPIC -O1 -Wall -Wl,-soname,libnvidia-ml.so.1 -o "$WORK/nvml/libnvidia-ml.so.1" \
        "$REPO/tests/schedule/nvml_standin.c"
    # utilisation %, memory used (bytes), power (mW): a busy card, alternating samples
    if [ -n "${GPU_CHECK_STANDIN_READINGS:-}" ]; then
        cp "$GPU_CHECK_STANDIN_READINGS" "$WORK/nvml/readings/gpu0"
    else
        printf '55 2147483648 180000\n85 3221225472 240000\n' > "$WORK/nvml/readings/gpu0"
    fi
    export LD_LIBRARY_PATH="$WORK/nvml${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export NVML_STANDIN_DIR=$WORK/nvml/readings NVML_STANDIN_COUNT=1
    export NVML_STANDIN_NAME=${NVML_STANDIN_NAME:-"NVIDIA stand-in (gpu_check)"}
fi

# A marker in the host's /tmp: the agent must not see it.
MARKER=$(mktemp /tmp/gpu-check-host-marker.XXXXXX)
trap 'rm -f "$MARKER"' EXIT

say "work folder $WORK; harness $PYTHON; agent ${AGENT_ENV:+env=$AGENT_ENV}${AGENT_PYTHON:-}; GPU $GPU;" \
    "tasks: $TASKS; stand-in NVML: $STANDIN"
START_NS=$(date +%s%N)
set +e
(cd "$WORK/session" && "$PYTHON" -m pytest $PLUGIN -p no:cacheprovider -q --rexmle-data=synthetic \
    --agent=command "--agent-option=dir=$REPO/benchmarks" \
    "--agent-option=cmd=GPU_CHECK_TRAIN_SECONDS=$TRAIN_SECONDS $AGENT_CMD gpu_agent.py" ${STACK[@]+"${STACK[@]}"} \
    "--rexmle-gpus=$GPU" -k "$TASKS") > "$WORK/session.log" 2>&1
STATUS=$?
set -e
SESSION_S=$(( ($(date +%s%N) - START_NS) / 1000000 ))  # milliseconds
tail -n 15 "$WORK/session.log"
[ "$STATUS" = 0 ] || fail "the pytest session exited with $STATUS (log: $WORK/session.log)"

GPU_CHECK_STANDIN=$STANDIN SESSION_S=$SESSION_S MARKER=$MARKER GPU=$GPU AGENT_ENV=${AGENT_ENV:-} "$PYTHON" - "$WORK/session/.rexmle" <<'EOF'
"""The checks on what the session left: run.json, result.json, the agent's log."""
import json, os, sys
from datetime import datetime
from pathlib import Path

root, standin = Path(sys.argv[1]), os.environ["GPU_CHECK_STANDIN"] == "1"
failures = []

def check(ok, what):
    print(("  ok    " if ok else "  FAIL  ") + what)
    if not ok:
        failures.append(what)

runs = sorted(p.parent for p in (root / "runs").glob("*/*/*/run.json"))
metas = [(p, json.loads((p / "run.json").read_text())) for p in runs]
check(len(metas) == 2, f"two runs ({len(metas)} found)")
STANDARD_DEV = {"null", "zero", "full", "random", "urandom", "tty", "console", "pts", "ptmx", "shm", "fd",
                "stdin", "stdout", "stderr", "core", "mqueue", "hugepages"}
host_tmp = set(os.listdir("/tmp"))


def stack_entries(folder):
    """The names under ``folder`` the sandbox shows because the agent's env= stack lies beneath them."""
    if not os.environ.get("AGENT_ENV"):
        return set()
    from pytest_rexmle.agents.software import software_of
    return {r.relative_to(folder).parts[0] for r in software_of(os.environ["AGENT_ENV"]).roots
            if r.is_relative_to(folder) and r != Path(folder)}


lines = []
for path, meta in metas:
    task = meta["task"]
    result = json.loads((path / "result.json").read_text())
    check(result["status"] == "ok", f"{task}: graded ok ({result['status']}: {result.get('reason')})")
    check(meta["gpus"] == [os.environ["GPU"]], f"{task}: ran on GPU {meta['gpus']}")
    tele, compute = meta["gpu_telemetry"], meta["compute"]
    check(tele.get("available") is True, f"{task}: NVML telemetry available ({tele.get('reason')})")
    check((tele.get("utilisation_mean") or 0) > 0, f"{task}: utilisation_mean {tele.get('utilisation_mean')} > 0")
    check((tele.get("memory_peak_bytes") or 0) > 0, f"{task}: memory_peak_bytes {tele.get('memory_peak_bytes')} > 0")
    check(compute.get("gpu_model") is not None, f"{task}: compute.gpu_model {compute.get('gpu_model')!r}")
    log = (path / "logs" / "agent.stdout.log").read_text(errors="replace")
    view_lines = [l for l in log.splitlines() if l.startswith("GPU_CHECK_VIEW ")]
    check(len(view_lines) == 1, f"{task}: the agent reported its view")
    if not view_lines:
        continue
    view = json.loads(view_lines[0].split(" ", 1)[1])
    if standin:
        check(view["cuda"] is False, f"{task}: no CUDA inside with the stand-in (torch {view['torch']})")
    else:
        check(view["cuda"] is True and bool(view["device_name"]),
              f"{task}: CUDA visible inside: {view['cuda']}, device {view['device_name']!r}")
    for folder in ("/root", "/home"):  # absent, or only the way to the agent's own stack (env=)
        seen = view[folder] if isinstance(view[folder], list) else []
        check(set(seen) <= stack_entries(folder), f"{task}: {folder} inside: {view[folder]}")
    inside_tmp = view["/tmp"] if isinstance(view["/tmp"], list) else []
    check(os.path.basename(os.environ["MARKER"]) not in inside_tmp and not (set(inside_tmp) & host_tmp) - stack_entries("/tmp"),
          f"{task}: the host's /tmp not visible (inside: {inside_tmp[:5]})")
    extra = [d for d in (view["/dev"] if isinstance(view["/dev"], list) else ["?"])
             if d not in STANDARD_DEV and not d.startswith(("nvidia", "dri"))]
    check(not extra, f"{task}: /dev holds only standard and GPU nodes (others: {extra})")
    gpu_nodes = [d for d in view["/dev"] if d.startswith(("nvidia", "dri"))] if isinstance(view["/dev"], list) else []
    trained = next((l for l in log.splitlines() if l.startswith("trained")), "no training line")
    lines.append((meta, tele, compute, view, gpu_nodes, trained, result))

spans = sorted((datetime.fromisoformat(m["started"]), datetime.fromisoformat(m["finished"]), m["task"]) for _, m in metas)
for (s1, f1, t1), (s2, f2, t2) in zip(spans, spans[1:]):
    check(f1 <= s2, f"one after the other: {t1} finished {f1.time()} <= {t2} started {s2.time()}")

print("\n--- GPU check summary (paste into the README's GPU section) ---")
if lines:
    c = lines[0][2]
    print(f"GPU: {c.get('gpu_model')} (driver {c.get('driver_version')}, CUDA {c.get('cuda_version')});"
          f" CPU: {c.get('cpu_model')}, {c.get('cpu_cores')} cores;{' STAND-IN NVML, no GPU' if standin else ''}")
    print(f"session: {int(os.environ['SESSION_S']) / 1000:.1f} s wall for {len(lines)} runs on GPU {os.environ['GPU']}")
for meta, tele, compute, view, gpu_nodes, trained, result in lines:
    print(f"{meta['task']}: {meta['started'][11:19]}-{meta['finished'][11:19]} UTC, agent {meta['duration']:.1f} s;"
          f" util mean {tele.get('utilisation_mean')} % peak {tele.get('utilisation_peak')} %,"
          f" memory peak {(tele.get('memory_peak_bytes') or 0) / 2**30:.2f} GiB,"
          f" power mean {tele.get('power_mean_watts')} W, {tele.get('samples')} samples;"
          f" {compute.get('gpu_hours')} GPU-h")
    print(f"  inside: torch {view['torch']}, cuda {view['cuda']}, {view['device_name']}; GPU nodes {gpu_nodes};"
          f" {trained}; metrics {dict(list((result.get('metrics') or {}).items())[:2])}")
print(f"checks: {'all passed' if not failures else str(len(failures)) + ' FAILED'}")
sys.exit(1 if failures else 0)
EOF
