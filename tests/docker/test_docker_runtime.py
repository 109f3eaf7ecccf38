"""The Docker runtime: the container it asks for (no engine needed) and agents run in it (engine needed)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy  # noqa: F401  (imported before pytester snapshots sys.modules: numpy cannot be imported twice)
import pytest

from pytest_rexmle.data.synthetic import ensure_synthetic
from pytest_rexmle.runtime import agent_tools, docker_seccomp
from pytest_rexmle.runtime.base import RunSpec, RuntimeUnavailable
from pytest_rexmle.runtime.docker import DockerRuntime, DockerSettings, _default_nofile, _nproc
from pytest_rexmle.task import registry

from ..conftest import AGENTS, run_folders
from .conftest import session_containers

NOFILE = _default_nofile()


def _spec(tmp_path: Path, **kw) -> RunSpec:
    run = tmp_path / "run"
    for sub in ("workspace", "submission", "logs"):
        (run / sub).mkdir(parents=True, exist_ok=True)
    public, private = tmp_path / "data" / "public", tmp_path / "data" / "private"
    public.mkdir(parents=True)
    private.mkdir(parents=True)
    (run / "instructions.md").write_text("do it")
    base = dict(task_id="ldct-iqa", argv=[sys.executable, "-m", "pytest_rexmle.agents.sample_main"],
                env={"REXMLE_TASK": "ldct-iqa", "CUDA_VISIBLE_DEVICES": "3", "OPENAI_API_KEY": "sk-secret-123456"},
                data_dir=public, workspace=run / "workspace", submission=run / "submission", logs=run / "logs",
                instructions=run / "instructions.md", time_limit=60.0, hidden=(private,),
                secret_env=("OPENAI_API_KEY",))
    base.update(kw)
    return RunSpec(**base)


def test_create_kwargs_follow_the_contract(tmp_path):
    rt = DockerRuntime(settings=DockerSettings(image="img:1"), limits={"memory": "8g", "cpus": "4"}, session="s1")
    spec = _spec(tmp_path, gpus=("3",))
    agent_tools.write_tools(spec.workspace.parent / ".bin")  # as run() does before the container starts
    kw = rt.create_kwargs(spec, "img:1", (1000, 1000), ncpu=2)
    mounts = {m["Target"]: (m["Source"], m["ReadOnly"]) for m in kw["mounts"]}
    assert mounts["/rexmle/data"] == (str(spec.data_dir.resolve()), True)
    assert mounts["/rexmle/workspace"] == (str(spec.workspace.resolve()), False)
    assert mounts["/rexmle/submission"] == (str(spec.submission.resolve()), False)
    assert mounts["/rexmle/instructions.md"] == (str(spec.instructions.resolve()), True)
    # the agent's tools, read-only; no harness code or task registry (rexmle validate asks the gateway)
    assert mounts["/rexmle/bin"] == (str((spec.workspace.parent / ".bin").resolve()), True)
    assert not any(target.startswith("/opt/rexmle") for target in mounts)
    # the private answers are not a mount source, nor under one
    assert not any(src.startswith(str((tmp_path / "data" / "private").resolve())) for src, _ in mounts.values())
    # one GPU requested by its host id; inside it is device 0
    [request] = kw["device_requests"]
    assert request["DeviceIDs"] == ["3"] and request["Capabilities"] == [["gpu"]]
    assert kw["environment"]["CUDA_VISIBLE_DEVICES"] == "0"
    # limits: 4 CPUs asked, the engine has 2 -> 2e9 nano CPUs; memory without extra swap
    assert kw["nano_cpus"] == 2_000_000_000 and kw["mem_limit"] == 8 << 30 and kw["memswap_limit"] == 8 << 30
    assert kw["shm_size"] == 4 << 30 and kw["pids_limit"] == 8192 and kw["init"] is True
    assert kw["read_only"] is True and kw["user"] == "1000:1000"
    assert kw["tmpfs"]["/tmp"] == f"rw,exec,nosuid,nodev,size={4 << 30},mode=1777"
    assert kw["cap_drop"] == ["ALL"] and kw["network_mode"] == "bridge"
    # the project's seccomp profile, installed by the engine (not by the image's shell)
    assert kw["security_opt"] == ["no-new-privileges:true", docker_seccomp.security_opt()]
    ulimits = {u["Name"]: (u["Soft"], u["Hard"]) for u in kw["ulimits"]}
    nofile = _default_nofile()  # 65536, or less where the host's hard limit is lower
    nproc = _nproc(8192)  # the processes limit, named so that an engine's default cannot exceed its own (Podman)
    assert ulimits == {"nofile": (nofile, nofile), "nproc": (nproc, nproc), "fsize": (256 << 30, 256 << 30),
                       "core": (0, 0)}
    # host interpreter path replaced; the container kills itself 10 s after the 60 s limit
    assert kw["command"] == ["timeout", "-s", "KILL", "70", "python3", "-m", "pytest_rexmle.agents.sample_main"]
    assert kw["working_dir"] == "/rexmle/workspace"
    env = kw["environment"]
    assert env["HOME"] == "/rexmle/workspace" and "REXMLE_COMPETITIONS_DIR" not in env and "PYTHONPATH" not in env
    assert env["PATH"].startswith("/rexmle/bin:") and env["OPENAI_API_KEY"] == "sk-secret-123456"
    labels = kw["labels"]
    assert labels["rexmle.session"] == "s1" and labels["rexmle.task"] == "ldct-iqa"
    assert labels["rexmle.pid"] == str(os.getpid()) and labels["rexmle.run_dir"] == str(spec.workspace.parent)
    assert "sk-secret" not in json.dumps(labels)


def test_no_gpu_no_device_request_and_network_none(tmp_path):
    rt = DockerRuntime(settings=DockerSettings(), session="s")
    kw = rt.create_kwargs(_spec(tmp_path, network="none"), "img", (1000, 1000))
    assert kw["device_requests"] == [] and kw["environment"]["CUDA_VISIBLE_DEVICES"] == ""
    assert kw["network_mode"] == "none" and "runtime" not in kw
    # no memory setting anywhere: 32 GiB, capped by what the engine has
    assert kw["mem_limit"] == 32 << 30
    assert rt.create_kwargs(_spec(tmp_path / "b"), "img", (1, 1), host_memory=3 << 30)["mem_limit"] == 3 << 30
    # the host's network only when asked for by name; anything else is the bridge
    assert [rt.network_mode(m) for m in ("bridge", "host", "none", "other")] == ["bridge", "host", "none", "bridge"]


@pytest.mark.parametrize("options, run_limits, expected", [
    ({}, None, dict(memory=32 << 30, pids=8192, nofile=NOFILE, fsize=256 << 30, tmp_size=4 << 30)),
    ({}, {"memory": "512m", "processes": 64, "file_size": "1g", "tmp": "100m"},
     dict(memory=512 << 20, pids=64, nofile=NOFILE, fsize=1 << 30, tmp_size=100 << 20)),
    ({"memory": "2g", "processes": "100"}, {"memory": "512m", "processes": 64},
     dict(memory=2 << 30, pids=100, nofile=NOFILE, fsize=256 << 30, tmp_size=4 << 30)),
])
def test_limits_option_then_run_then_defaults(tmp_path, options, run_limits, expected):
    """--rexmle-limit wins over the run's own limits (RunSpec.limits, task.yaml's), which win over the defaults."""
    spec = _spec(tmp_path, time_limit=5.0)
    if run_limits is not None:
        object.__setattr__(spec, "limits", run_limits)  # whatever RunSpec carries, read as a mapping
    rt = DockerRuntime(settings=DockerSettings(), limits=options, session="s")
    limits = rt.container_limits(rt.policy(spec), host_memory=64 << 30)
    assert {k: getattr(limits, k) for k in expected} == expected and limits.deadline == 15


def test_exceeded_limit_names_the_limit(tmp_path):
    rt = DockerRuntime(settings=DockerSettings(), limits={"memory": "256m", "file_size": "1m"}, session="s")
    limits = rt.container_limits(rt.policy(_spec(tmp_path)))
    assert rt.exceeded_limit(limits, True, 137) == "memory limit of 256 MiB exceeded (the container was OOM-killed)"
    assert rt.exceeded_limit(limits, False, 153).startswith("file-size limit of 1 MiB exceeded")
    assert rt.exceeded_limit(limits, False, 137) is None and rt.exceeded_limit(limits, False, 0) is None


def test_hidden_folder_under_a_mount_is_covered(tmp_path):
    spec = _spec(tmp_path)
    inner = spec.data_dir / "private-copy"
    inner.mkdir()
    spec = _spec(tmp_path / "again", hidden=(inner,), data_dir=spec.data_dir)
    kw = DockerRuntime(settings=DockerSettings(), session="s").create_kwargs(spec, "img", (1000, 1000))
    assert kw["tmpfs"]["/rexmle/data/private-copy"].startswith("ro")


def test_contract_paths_and_settings_from_env():
    rt = DockerRuntime(settings=DockerSettings.from_env({"REXMLE_DOCKER_IMAGE": "x:1", "REXMLE_DOCKER_READ_ONLY": "0"}))
    assert rt.settings.image == "x:1" and rt.settings.read_only is False
    # a limit set the old way stops the session with the option that replaced it, rather than being ignored
    with pytest.raises(RuntimeUnavailable, match=r"REXMLE_DOCKER_CPUS: .*--rexmle-limit .*cpus"):
        DockerSettings.from_env({"REXMLE_DOCKER_CPUS": "2"})
    assert rt.contract_paths(None) == {"data": "/rexmle/data", "workspace": "/rexmle/workspace",
                                       "submission": "/rexmle/submission", "instructions": "/rexmle/instructions.md"}


# -- with an engine ---------------------------------------------------------------------------------------

def _latest(bench, task_id: str) -> Path:
    folders = run_folders(bench.path, task_id)
    assert folders
    return folders[-1]


def test_sample_agent_runs_in_a_container_and_grades(docker_bench, docker_client, session_id):
    result = docker_bench("--agent=sample", "-k", "ldct-iqa")
    result.assert_outcomes(passed=1)
    run = _latest(docker_bench, "ldct-iqa")
    meta = json.loads((run / "run.json").read_text())
    # a root harness gives the container a uid of the run's own (--rexmle-agent-uids), never 0
    uid = meta.get("agent_uid", 1000)
    assert meta["sandbox"] == "docker" and meta["exit_code"] == 0 and meta["user"] == f"{uid}:{uid}" and uid != 0
    assert (os.geteuid() != 0) or uid >= 2000000000
    assert (run / "logs" / "agent.stdout.log").read_text().startswith("sample agent: copying the baseline")
    assert all(p.stat().st_uid == os.geteuid() for p in (run / "submission").rglob("*"))  # given back
    record = json.loads((run / "logs" / "docker.json").read_text())
    assert record["labels"]["rexmle.session"] == session_id and record["init"] is True
    assert record["read_only_rootfs"] is True and not record["device_requests"]
    assert session_containers(docker_client, session_id) == []


def test_command_agent_contract_read_only_data_and_non_root(docker_bench, docker_client, session_id):
    cmd = "python agent.py && id -u > $REXMLE_WORKSPACE/uid.txt && (touch /usr/x 2>/dev/null; echo $? > $REXMLE_WORKSPACE/rootfs.txt)"
    result = docker_bench("--agent=command", f"--agent-option=dir={AGENTS / 'echo'}", f"--agent-option=cmd={cmd}",
                          "-k", "ldct-iqa", "--rexmle-time-limit=120")
    result.assert_outcomes(passed=1)
    run = _latest(docker_bench, "ldct-iqa")
    echo = json.loads((run / "workspace" / "echo.json").read_text())
    # the default network: the gateway's listener in the container's own namespace, reached with the run's token
    assert echo["env"].pop("REXMLE_GATEWAY") == "http://127.0.0.1:8484"
    assert echo["env"].pop("REXMLE_VALIDATE_URL") == "http://127.0.0.1:8484/rexmle/validate"
    assert echo["env"].pop("REXMLE_GATEWAY_TOKEN").startswith("rexmle-")
    assert echo["env"] == {"REXMLE_TASK": "ldct-iqa", "REXMLE_DATA_DIR": "/rexmle/data",
                           "REXMLE_WORKSPACE": "/rexmle/workspace", "REXMLE_SUBMISSION_DIR": "/rexmle/submission",
                           "REXMLE_INSTRUCTIONS": "/rexmle/instructions.md", "REXMLE_TIME_LIMIT": "120",
                           "CUDA_VISIBLE_DEVICES": ""}
    assert echo["cwd"] == "/rexmle/workspace/agent" and echo["data_writable"] is False
    assert echo["instructions_mentions_validate"] is True
    uid = json.loads((run / "run.json").read_text()).get("agent_uid", 1000)
    assert (run / "workspace" / "uid.txt").read_text().strip() == str(uid) and uid != 0
    assert (run / "workspace" / "rootfs.txt").read_text().strip() != "0"  # read-only root filesystem
    assert session_containers(docker_client, session_id) == []


def test_validator_client_runs_inside_the_container_with_the_image_python(docker_bench):
    """`rexmle validate` in the image is the gateway's standard-library client on the image's python3 (no
    harness code is mounted); with no gateway wired into this run it says so, instead of validating."""
    cmd = ("cp $REXMLE_DATA_DIR/sample_submission.csv $REXMLE_SUBMISSION_DIR/submission.csv && "
           "(rexmle validate --submission $REXMLE_SUBMISSION_DIR; echo $?) > $REXMLE_WORKSPACE/ok.txt 2>&1; "
           "(command -v rexmle; command -v python3; touch /rexmle/bin/x; echo $?) >> $REXMLE_WORKSPACE/ok.txt 2>&1")
    docker_bench("--agent=command", f"--agent-option=cmd={cmd}", "-k", "ldct-iqa").assert_outcomes(passed=1)
    lines = (_latest(docker_bench, "ldct-iqa") / "workspace" / "ok.txt").read_text().splitlines()
    if lines[0].startswith("OK:"):  # a runtime that wires the gateway into the container
        assert lines[0].startswith("OK: 15 test case(s)") and lines[1] == "0", lines
    else:
        assert "REXMLE_VALIDATE_URL" in lines[0] and lines[1] == "1", lines
    assert lines[2] == "/rexmle/bin/rexmle" and not lines[3].startswith("/rexmle")
    assert lines[-1] != "0"  # the tools are read-only


def test_hostile_agent_finds_no_answers(docker_bench, shared_cache, tmp_path):
    twin = ensure_synthetic(registry().get("ldct-iqa"), shared_cache)
    escape = tmp_path / "escaped.txt"
    cmd = f"HOSTILE_TARGET={escape} python agent.py {twin.private}"
    result = docker_bench("--agent=command", f"--agent-option=dir={AGENTS / 'hostile'}", f"--agent-option=cmd={cmd}",
                          "-k", "ldct-iqa")
    result.assert_outcomes(failed=1)  # it writes no submission
    report = json.loads((_latest(docker_bench, "ldct-iqa") / "workspace" / "hostile.json").read_text())
    assert not any("answers.csv" in p or "split.json" in p or "prepare_manifest" in p for p in report["found_names"])
    assert report["found_content"] == []
    assert report["wrote"] == [] and not escape.exists()
    # its own PID namespace: docker-init as PID 1 plus the agent's processes
    assert all(pid < 50 for pid, _ in report["processes"]), report["processes"]


def test_secret_environment_reaches_the_agent_but_no_file(docker_client, test_image, tmp_path, session_id):
    spec = _spec(tmp_path, argv=["/bin/sh", "-c", 'case "$OPENAI_API_KEY" in sk-secret-*) echo has-key;; esac'])
    outcome = DockerRuntime(image=test_image, session=session_id).run(spec)
    assert outcome.exit_code == 0 and not outcome.timed_out
    assert outcome.stdout.read_text() == "has-key\n"
    for path in spec.logs.rglob("*"):
        assert b"sk-secret-123456" not in path.read_bytes(), path
    record = json.loads((spec.logs / "docker.json").read_text())
    assert "OPENAI_API_KEY" in record["secret_env_names"]
    assert session_containers(docker_client, session_id) == []


def test_missing_image_names_the_build_command(docker_client, tmp_path):
    from pytest_rexmle.runtime.base import RuntimeUnavailable

    with pytest.raises(RuntimeUnavailable, match="rexmle images build"):
        DockerRuntime(image="rexmle/does-not-exist:0").run(_spec(tmp_path))


def test_bind_sources_are_the_neutral_stage_not_the_run_or_data_folders(docker_client, test_image, tmp_path,
                                                                       session_id):
    """The kernel names each bind's host source in mountinfo: they are the run's stage (runtime/staging.py)."""
    spec = _spec(tmp_path, argv=["/bin/sh", "-c", "cat /proc/self/mountinfo; echo made > /rexmle/workspace/made"])
    (spec.data_dir / "train.csv").write_text("a,b\n")
    outcome = DockerRuntime(image=test_image, session=session_id).run(spec)
    assert outcome.exit_code == 0, outcome.stderr.read_text()
    mountinfo = outcome.stdout.read_text()
    stage = outcome.details["stage"]
    assert outcome.details["host_paths_hidden"] is True and stage.startswith("/var/tmp/rexmle-")
    assert f"{stage}/workspace /rexmle/workspace " in mountinfo and f"{stage}/data /rexmle/data " in mountinfo
    assert str(tmp_path) not in mountinfo
    assert (spec.workspace / "made").read_text() == "made\n" and not Path(stage).exists()
