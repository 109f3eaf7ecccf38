"""scrub_run_folder: nothing setuid/setgid or device-like survives in a run folder, and nothing is followed."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import sys

import pytest

from pytest_rexmle.agent_output import scrub_run_folder

from .helpers import deep_folder, remove_tree

ROOT = os.geteuid() == 0


def test_special_files_and_outward_links_are_removed(tmp_path):
    ws = tmp_path / "run" / "workspace"
    ws.mkdir(parents=True)
    os.mkfifo(ws / "rexmle-usage.json")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(ws / "agent.sock"))
    (ws / "zero").symlink_to("/dev/zero")
    (ws / "up").symlink_to("../../..")
    (ws / "dot-up").symlink_to("./x/../..")
    (ws / "model").mkdir()
    (ws / "model" / "best.pt").write_text("weights")
    (ws / "latest").symlink_to("model/best.pt")  # only descends: kept
    report = scrub_run_folder(tmp_path / "run")
    assert sorted(os.listdir(ws)) == ["latest", "model"]
    assert report.complete and report.n_removed == 5
    assert any("workspace/rexmle-usage.json (a FIFO)" == r for r in report.removed)
    assert any(r.startswith("workspace/zero (symbolic link to '/dev/zero')") for r in report.removed)
    assert (ws / "latest").read_text() == "weights"


def test_setuid_and_setgid_bits_are_cleared(tmp_path):
    ws = tmp_path / "workspace"
    ws.mkdir()
    binary = ws / "rootshell"
    shutil.copyfile(sys.executable if not os.path.islink(sys.executable) else os.path.realpath(sys.executable), binary)
    if ROOT:
        os.chown(binary, 0, 0)
    os.chmod(binary, 0o6755)
    (ws / "shared").mkdir()
    os.chmod(ws / "shared", 0o2775)
    report = scrub_run_folder(tmp_path)
    assert stat.S_IMODE(os.lstat(binary).st_mode) == 0o755
    assert stat.S_IMODE(os.lstat(ws / "shared").st_mode) == 0o775
    assert report.n_neutralised == 2


def test_a_hard_linked_setuid_file_is_unlinked_never_chmodded(tmp_path):
    """Its inode may be a host file (a hard link to /usr/bin/passwd): the link goes, the inode's mode stays."""
    outside = tmp_path / "host-file"
    outside.write_text("host")
    os.chmod(outside, 0o4755)
    run = tmp_path / "run"
    run.mkdir()
    os.link(outside, run / "link")
    report = scrub_run_folder(run)
    assert not (run / "link").exists()
    assert stat.S_IMODE(os.lstat(outside).st_mode) == 0o4755
    assert report.removed == ["link (setuid file with 2 hard links)"]


@pytest.mark.skipif(not ROOT, reason="creating device nodes needs root")
def test_device_nodes_are_removed(tmp_path):
    ws = tmp_path / "workspace"
    ws.mkdir()
    os.mknod(ws / "sda", 0o600 | stat.S_IFBLK, os.makedev(8, 0))
    os.mknod(ws / "mem", 0o600 | stat.S_IFCHR, os.makedev(1, 1))
    report = scrub_run_folder(tmp_path)
    assert os.listdir(ws) == []
    assert sorted(report.removed) == ["workspace/mem (a character device)", "workspace/sda (a block device)"]


def test_1500_levels_are_scrubbed_to_the_bottom(tmp_path):
    run = tmp_path / "run"
    bottom = str(deep_folder(run / "workspace", 1500))
    try:
        os.mkfifo(os.path.join(bottom, "fifo"))
        with open(os.path.join(bottom, "suid"), "w"):
            pass
        os.chmod(os.path.join(bottom, "suid"), 0o4755)
        report = scrub_run_folder(run)
        assert report.complete and report.entries == 1 + 1500 + 2
        assert report.n_removed == 1 and report.n_neutralised == 1
        assert sorted(os.listdir(bottom)) == ["suid"]
        assert stat.S_IMODE(os.stat(os.path.join(bottom, "suid")).st_mode) == 0o755
    finally:
        remove_tree(run)


def test_an_unreadable_folder_is_opened_and_scrubbed(tmp_path):
    hidden = tmp_path / "workspace" / "locked"
    hidden.mkdir(parents=True)
    os.mkfifo(hidden / "fifo")
    os.chmod(hidden, 0)
    try:
        report = scrub_run_folder(tmp_path)
        assert report.complete and report.n_removed == 1
    finally:
        os.chmod(hidden, 0o755)


def test_the_budget_stops_the_walk_and_says_so(tmp_path):
    for i in range(50):
        (tmp_path / f"f{i}").touch()
    report = scrub_run_folder(tmp_path, max_entries=10)
    assert not report.complete and report.note == "stopped after 10 entries"


def test_a_run_is_scrubbed_before_the_host_reads_it(tmp_path):
    """Through run.launch and run.finish with a real local runtime and the command agent: what the agent leaves is
    neutralised and recorded in run.json before grading or judging start."""
    from pytest_rexmle.agents import get_agent
    from pytest_rexmle.data.synthetic import ensure_synthetic
    from pytest_rexmle.run.launch import RunFolder, finish, launch
    from pytest_rexmle.runtime import get_runtime
    from pytest_rexmle.task import registry

    task = registry().get("ldct-iqa")
    data = ensure_synthetic(task, tmp_path / "cache")
    script = ("import os, stat\n"
              "ws = os.environ['REXMLE_WORKSPACE']\n"
              "os.mkfifo(os.path.join(ws, 'rexmle-usage.json'))\n"
              "os.symlink('/dev/zero', os.path.join(ws, 'train.log'))\n"
              "open(os.path.join(ws, 'suid'), 'w').close()\n"
              "os.chmod(os.path.join(ws, 'suid'), 0o4755)\n"
              "try:\n"
              "    os.mknod(os.path.join(ws, 'disk'), 0o600 | stat.S_IFBLK, os.makedev(8, 0))\n"
              "except OSError:\n"
              "    pass\n")
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "leave.py").write_text(script)
    agent = get_agent("command", {"cmd": "python3 leave.py", "dir": str(tmp_path / "agent")})
    runtime = get_runtime("local", unsafe=True)
    folder = RunFolder.create(tmp_path / "runs", task, agent)
    outcome = finish(launch(task, data, agent, runtime, folder, 60.0))
    assert outcome.exit_code == 0, folder.logs.joinpath("agent.stderr.log").read_text()
    left = sorted(os.listdir(folder.workspace))
    assert "rexmle-usage.json" not in left and "train.log" not in left and "disk" not in left
    assert stat.S_IMODE(os.lstat(folder.workspace / "suid").st_mode) == 0o755
    scrub = json.loads((folder.root / "run.json").read_text())["scrub"]
    assert scrub["complete"] and scrub["n_removed"] >= 2 and scrub["n_neutralised"] == 1


def test_an_agent_finish_broken_by_its_own_files_does_not_stop_the_run(tmp_path):
    """An adapter copying the agent's logs (``shutil.copytree`` recurses) meets a 1,500-level folder:
    the run still ends, with the failure recorded, and is graded on what it left."""
    from pytest_rexmle.agents.command import CommandAgent
    from pytest_rexmle.data.synthetic import ensure_synthetic
    from pytest_rexmle.run.launch import RunFolder, finish, launch
    from pytest_rexmle.runtime import get_runtime
    from pytest_rexmle.task import registry

    class CopyingAgent(CommandAgent):
        def finish(self, ctx) -> None:
            shutil.copytree(ctx.workspace / "logs", ctx.logs / "copied")

    task = registry().get("ldct-iqa")
    data = ensure_synthetic(task, tmp_path / "cache")
    agent = CopyingAgent("command", {"cmd": "mkdir -p logs"})
    folder = RunFolder.create(tmp_path / "runs", task, agent)
    try:
        deep_folder(folder.workspace / "logs", 1500)
        finish(launch(task, data, agent, get_runtime("local", unsafe=True), folder, 60.0))
        meta = json.loads((folder.root / "run.json").read_text())
        assert meta["finish_error"].startswith("RecursionError") and "finished" in meta
    finally:
        remove_tree(folder.root)
