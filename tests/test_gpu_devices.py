"""Each run opens only its own GPUs' device nodes (plus the driver's control nodes), on a faked 8-GPU machine.

The stand-in (``REXMLE_FAKE_GPU_DEV``) is a folder of ``nvidia*`` files and a driver listing whose PCI order
differs from the minors, so the tests see that GPU ids are placed by the driver's order, not by name.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from pytest_rexmle.runtime.sandbox.bwrap import bwrap_args
from pytest_rexmle.runtime.sandbox.gpu_devices import FAKE_ENV, driver_gpus, gpu_nodes, visible_inside

#: PCI bus id -> device minor: index 0 is minor 3, index 1 minor 5, ... (the driver's order, not the names')
BUSES = {"0000:18:00.0": 3, "0000:2a:00.0": 5, "0000:3a:00.0": 0, "0000:5d:00.0": 1, "0000:9a:00.0": 2,
         "0000:ab:00.0": 4, "0000:ba:00.0": 6, "0000:db:00.0": 7}
CONTROL = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")


@pytest.fixture
def fake_dev(monkeypatch) -> Path:
    """An 8-GPU /dev and driver listing every user can read (agents run under uids of their own)."""
    root = Path(tempfile.mkdtemp(prefix="rexmle-fake-dev-", dir="/var/tmp"))
    root.chmod(0o755)
    for name in (*(f"nvidia{m}" for m in range(8)), *CONTROL):
        (root / name).write_text(f"{name}\n")
        (root / name).chmod(0o666)
    for index, (bus, minor) in enumerate(BUSES.items()):
        folder = root / "driver-gpus" / bus
        folder.mkdir(parents=True)
        (folder / "information").write_text(f"Model: \t\t Stand-in GPU\nGPU UUID: \t GPU-fake-{index}\n"
                                            f"Device Minor: \t {minor}\nBus Location: \t {bus}\n")
    monkeypatch.setenv(FAKE_ENV, str(root))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_ids_are_placed_by_the_drivers_pci_order(fake_dev):
    assert [g.minor for g in driver_gpus(fake_dev / "driver-gpus")] == list(BUSES.values())
    nodes = gpu_nodes(("1",))
    assert [Path(p).name for p in nodes.paths] == ["nvidia-uvm", "nvidia-uvm-tools", "nvidia5", "nvidiactl"]
    assert nodes.binds()[2] == (str(fake_dev / "nvidia5"), "/dev/nvidia5") and nodes.note is None
    assert {Path(p).name for p in gpu_nodes(("GPU-fake-0", "7")).paths} >= {"nvidia3", "nvidia7"}
    assert visible_inside(("1",)) == "0" and visible_inside(("2", "6")) == "0,1"
    assert gpu_nodes(()) .paths == ()


def test_an_id_that_cannot_be_placed_gets_every_node_and_says_so(fake_dev):
    nodes = gpu_nodes(("MIG-1234",))
    assert sorted(Path(p).name for p in nodes.paths if Path(p).name[6:].isdigit()) == [f"nvidia{m}" for m in range(8)]
    assert "MIG-1234" in nodes.note and visible_inside(("MIG-1234",), nodes) == "MIG-1234"


def test_without_a_driver_listing_an_index_is_its_minor(fake_dev):
    shutil.rmtree(fake_dev / "driver-gpus")
    assert [Path(p).name for p in gpu_nodes(("2",)).paths if Path(p).name[6:].isdigit()] == ["nvidia2"]


def test_bubblewrap_binds_only_the_runs_nodes(fake_dev):
    args = bwrap_args(python_roots=[], binds=[], tmp=Path("/tmp/x"), hidden=(), env={}, gpus=("0", "1"), network=[],
                      user_namespace=False, seccomp_fd=None)
    bound = [args[i + 2] for i, a in enumerate(args) if a == "--dev-bind-try"]
    assert bound == ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia3", "/dev/nvidia5", "/dev/nvidiactl"]
    assert "--dev-bind-try" not in bwrap_args(python_roots=[], binds=[], tmp=Path("/tmp/x"), hidden=(), env={},
                                              gpus=(), network=[], user_namespace=False, seccomp_fd=None)
