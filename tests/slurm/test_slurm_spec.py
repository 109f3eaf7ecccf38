"""What travels to the node (no cluster needed): the run spec as a typed record, and the sbatch parameters."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pytest_rexmle.documents import DocumentError
from pytest_rexmle.runtime.base import RunOutcome, RunSpec
from pytest_rexmle.runtime.sandbox.limits import Limits
from pytest_rexmle.runtime.slurm import SlurmRuntime, SlurmSettings
from pytest_rexmle.runtime.slurm_job import outcome_from_json, outcome_to_json, read_spec, write_spec


def _spec(tmp_path: Path, **extra) -> RunSpec:
    return RunSpec("ldct-iqa", ["python", "agent.py"], {"REXMLE_TASK": "ldct-iqa", "CUDA_VISIBLE_DEVICES": ""},
                   tmp_path / "public", tmp_path / "ws", tmp_path / "sub", tmp_path / "logs", tmp_path / "i.md",
                   90.0, cwd=tmp_path / "ws" / "agent", gpus=("0",), hidden=(tmp_path / "private",), **extra)


def test_spec_round_trips_with_paths_tuples_and_nested_dataclasses(tmp_path):
    spec = _spec(tmp_path, limits=Limits(memory=1 << 30, cpus=2.5))
    write_spec(tmp_path / "slurm" / "spec.json", spec, "local", {"unsafe": False})
    back, inner, options = read_spec(tmp_path / "slurm" / "spec.json")
    assert back == spec and inner == "local" and options == {"unsafe": False}
    assert isinstance(back.hidden, tuple) and isinstance(back.hidden[0], Path) and isinstance(back.argv, list)
    assert isinstance(back.limits, Limits) and back.limits.memory == 1 << 30
    doc = json.loads((tmp_path / "slurm" / "spec.json").read_text())
    assert doc["spec"]["hidden"] == [str(tmp_path / "private")] and "$dataclass" not in json.dumps(doc)


def test_a_spec_names_no_class_the_node_would_build(tmp_path):
    """A hostile spec.json cannot choose a class: the fields' declared types decide, a wrong one is refused."""
    path = tmp_path / "spec.json"
    write_spec(path, _spec(tmp_path), "local", {})
    doc = json.loads(path.read_text())
    doc["spec"]["limits"] = {"$dataclass": "subprocess:Popen", "fields": {"args": ["true"]}}
    path.write_text(json.dumps(doc))
    with pytest.raises(DocumentError, match="spec.limits"):
        read_spec(path)


def test_a_tagged_spec_of_an_earlier_version_still_reads(tmp_path):
    """A job queued before typed records (the tagged format) still starts after an upgrade: the tags are read
    as plain values, the class names in them ignored."""
    spec = _spec(tmp_path, limits=Limits(processes=64))
    path = tmp_path / "spec.json"
    tagged = {"$dataclass": "pytest_rexmle.runtime.base:RunSpec", "fields": {
        **{k: v for k, v in json.loads(json.dumps(dataclasses.asdict(spec), default=str)).items()
           if k not in ("hidden", "gpus", "data_dir", "env", "limits")},
        "data_dir": {"$path": str(spec.data_dir)}, "gpus": {"$tuple": ["0"]},
        "hidden": {"$tuple": [{"$path": str(tmp_path / "private")}]}, "env": {"$dict": dict(spec.env)},
        "limits": {"$dataclass": "os:system", "fields": dataclasses.asdict(spec.limits)}}}
    path.write_text(json.dumps({"inner": "local", "inner_options": {}, "spec": tagged}))
    back, inner, _ = read_spec(path)
    assert back == spec and inner == "local" and isinstance(back.limits, Limits)


def test_outcome_round_trips(tmp_path):
    outcome = RunOutcome(None, True, 12.5, tmp_path / "o", tmp_path / "e", note="n", details={"gpus": ["1"]},
                         killed="Slurm job 3 ended TIMEOUT")
    assert outcome_from_json(outcome_to_json(outcome)) == outcome


def test_sbatch_parameters_from_the_options(tmp_path):
    runtime = SlurmRuntime(SlurmSettings(partition="gpu", account="lab", qos="high",
                                         options={"constraint": "a100", "mem": "64G"}, margin_seconds=300))
    runtime._cluster_gpus = True
    params = runtime.parameters(_spec(tmp_path))
    assert params["partition"] == "gpu" and params["account"] == "lab" and params["qos"] == "high"
    assert params["gres"] == "gpu:1"  # ldct-iqa declares one GPU
    assert params["time"] == 7        # 90 s + 300 s margin, rounded up to minutes
    assert params["additional_parameters"] == {"no-requeue": True, "constraint": "a100", "mem": "64G"}
    runtime._cluster_gpus = False      # a CPU-only cluster: no gres request that could never be met
    assert "gres" not in runtime.parameters(_spec(tmp_path))


def test_isolation_is_the_inner_runtime():
    assert SlurmRuntime(SlurmSettings(inner="docker")).isolation == "docker"
    assert SlurmRuntime().isolation == "local"
    from pytest_rexmle.runtime.base import RuntimeUnavailable

    with pytest.raises(RuntimeUnavailable, match="--rexmle-slurm-inner"):
        SlurmRuntime(SlurmSettings(inner="apptainer"))


def test_sandbox_and_limit_options_reach_the_node_inner_runtime(tmp_path):
    """``--rexmle-sandbox`` and ``--rexmle-limit`` are options of the local runtime: the node must build its inner
    one with them, or it picks its own sandbox and ignores the limits (the adversarial suite's fork bomb ran to
    3,000 processes through Slurm before)."""
    from pytest_rexmle.runtime.docker import DockerRuntime
    from pytest_rexmle.runtime.local import LocalRuntime
    from pytest_rexmle.settings import Settings

    settings = Settings(agent="sample", agent_options={}, data="synthetic", data_dir=tmp_path, runtime="slurm",
                        time_limit=None, runs_dir=tmp_path / "runs", report_dir=tmp_path / "report", min_percentile=0,
                        resume=False, unsafe_local=False, seed=None, sandbox="landlock",
                        limits={"memory": "512m", "processes": "200"})
    runtime = SlurmRuntime.from_settings(settings)
    write_spec(tmp_path / "spec.json", _spec(tmp_path), runtime.settings.inner, runtime.settings.inner_options)
    inner = LocalRuntime(**read_spec(tmp_path / "spec.json")[2])
    assert inner.sandbox == "landlock" and not inner.unsafe
    assert dict(inner.policy_options.limits) == {"memory": "512m", "processes": "200"}
    unsafe = SlurmRuntime.from_settings(dataclasses.replace(settings, unsafe_local=True, sandbox="auto", limits={}))
    identity = {"agent_uids": None, "agent_as_root": False, "unsafe_same_uid": False}  # the node allocates uids too
    gateway = {"gateway_budget": None, "egress_allow": []}  # and runs the gateway of the runs it hosts
    assert unsafe.settings.inner_options == {"sandbox": "auto", "limits": {}, "unsafe": True, **identity, **gateway}
    picked = SlurmRuntime.from_settings(dataclasses.replace(settings, agent_uids="70000-70009", agent_as_root=True))
    assert LocalRuntime(**picked.settings.inner_options).agent_uids.start == 70000
    assert picked.settings.inner_options["agent_as_root"] is True
    docker = SlurmRuntime.from_settings(dataclasses.replace(settings, slurm_inner="docker"))
    # Docker takes the same --rexmle-limit overrides (its policy is built on the node like the local one's);
    # its uids from the range
    assert docker.settings.inner_options == {"agent_uids": None, "limits": {"memory": "512m", "processes": "200"},
                                             **gateway}
    assert DockerRuntime(**docker.settings.inner_options).policy(_spec(tmp_path)).limits.memory == 512 << 20
