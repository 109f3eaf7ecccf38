"""What the job does on the node before the inner runtime runs (no cluster needed): provider keys never
written into the run folder's spec, inherited CPU-binding variables stripped, uid locks kept off network
file systems, and the node probe's answer for image agents."""

from __future__ import annotations

from pathlib import Path

from pytest_rexmle.runtime import node_check
from pytest_rexmle.runtime.base import RunSpec
from pytest_rexmle.runtime.slurm_job import (
    filesystem_type,
    node_local_locks,
    read_spec,
    strip_binding,
    with_secrets,
    write_spec,
)

from ..agent_images import KEY


def test_the_spec_on_the_shared_file_system_holds_no_key_and_the_job_gets_it_back(tmp_path):
    spec = RunSpec("ldct-iqa", ["claude"], {"ANTHROPIC_API_KEY": KEY, "REXMLE_TASK": "ldct-iqa"}, tmp_path, tmp_path,
                   tmp_path, tmp_path, tmp_path / "i.md", 60.0, secret_env=("ANTHROPIC_API_KEY",), image="x:1")
    path = tmp_path / "spec.json"
    write_spec(path, spec, "local", {})
    assert KEY not in path.read_text()
    read = read_spec(path)[0]
    assert read.env == {"REXMLE_TASK": "ldct-iqa"} and read.image == "x:1"
    assert with_secrets(read, {"ANTHROPIC_API_KEY": KEY, "OTHER": "y"}).env == spec.env
    assert with_secrets(read, {}).env == read.env  # a job without the key runs without it (the gateway says so)


def test_inherited_binding_variables_are_stripped_before_any_nested_step():
    environ = {"SLURM_CPU_BIND": "quiet,mask_cpu:0x1", "SLURM_CPU_BIND_LIST": "0x1", "SLURM_MEM_BIND": "local",
               "SRUN_CPUS_PER_TASK": "4", "SLURM_JOB_ID": "12", "PATH": "/usr/bin"}
    assert strip_binding(environ) == ["SLURM_CPU_BIND", "SLURM_CPU_BIND_LIST", "SLURM_MEM_BIND", "SRUN_CPUS_PER_TASK"]
    assert environ == {"SLURM_JOB_ID": "12", "PATH": "/usr/bin"}


MOUNTS = """/dev/sda1 / ext4 rw 0 0
nfs1:/home /home nfs4 rw 0 0
lustre@o2ib:/scratch /scratch lustre rw 0 0
tmpfs /run tmpfs rw 0 0
"""


def test_uid_locks_on_a_network_file_system_move_to_the_nodes_own_folder():
    assert filesystem_type(Path("/scratch/u/locks"), MOUNTS) == "lustre"
    assert filesystem_type(Path("/run/rexmle/uids"), MOUNTS) == "tmpfs"
    assert filesystem_type(Path("/var/tmp"), MOUNTS) == "ext4"
    environ = {"REXMLE_UID_LOCK_DIR": "/scratch/u/locks"}
    assert node_local_locks(environ, MOUNTS) == "/scratch/u/locks"
    assert environ["REXMLE_UID_LOCK_DIR"] == "/run/rexmle/uids"
    local = {"REXMLE_UID_LOCK_DIR": "/run/locks"}
    assert node_local_locks(local, MOUNTS) is None and local["REXMLE_UID_LOCK_DIR"] == "/run/locks"


def test_the_node_probe_names_what_the_node_lacks(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("REXMLE_CACHE_DIR", str(tmp_path))
    assert node_check.main(["--sandbox", "bwrap", "lab/never-imported:1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("missing on node ") and "'lab/never-imported:1' is not in the image cache" in out
    missing = node_check.problems(["lab/x:1"], sandbox="landlock")
    assert len(missing) == 1 and ("only bubblewrap" in missing[0] or "cannot isolate the agent" in missing[0])
