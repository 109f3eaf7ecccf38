"""A sandboxed run opens only its own GPU's device nodes, on the faked 8-GPU machine of tests/test_gpu_devices.py."""

from __future__ import annotations

from ..test_gpu_devices import CONTROL, fake_dev  # noqa: F401  (the fixture)
from .conftest import run_agent

NAMES = sorted([*(f"nvidia{m}" for m in range(8)), *CONTROL])
AGENT = """
import json, os
names = {names!r}
opened = []
for name in names:
    for path in ("/dev/" + name, {fake!r} + "/" + name):
        try:
            with open(path) as fh:
                fh.read()
        except OSError:
            continue
        opened.append(name)
        break
print(json.dumps({{"opened": opened, "cuda": os.environ.get("CUDA_VISIBLE_DEVICES")}}))
"""


def test_a_run_opens_only_its_own_gpu_under_each_mechanism(fake_dev, tmp_path, mechanism):  # noqa: F811
    """bubblewrap shows only the run's nodes; Landlock lets it open only them. An agent that ignores
    CUDA_VISIBLE_DEVICES still reaches no other run's GPU."""
    run = run_agent(tmp_path, mechanism, AGENT.format(fake=str(fake_dev), names=NAMES), gpus=("1",))
    report = run.report()
    assert report["opened"] == ["nvidia-uvm", "nvidia-uvm-tools", "nvidia5", "nvidiactl"], report
    assert report["cuda"] == "0"
