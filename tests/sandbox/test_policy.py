"""One run's sandbox policy rendered by each mechanism: the same folders, limits and network, in its terms."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest

from pytest_rexmle.limits import LimitError, Limits
from pytest_rexmle.runtime.base import RunSpec
from pytest_rexmle.runtime.local import LocalRuntime
from pytest_rexmle.runtime.policy import IdentityPolicy, PolicyOptions, build_policy
from pytest_rexmle.runtime.sandbox import bwrap, landlock
from pytest_rexmle.runtime.sandbox.limits import rlimits_for
from pytest_rexmle.settings import ENVIRONMENT, PRECEDENCE, _value

TARGETS = {"data": "/rexmle/data", "workspace": "/rexmle/workspace", "submission": "/rexmle/submission",
           "instructions": "/rexmle/instructions.md"}


def _spec(tmp_path: Path, network: str = "none", **kw) -> RunSpec:
    run = tmp_path / "run"
    for sub in ("workspace", "submission", "logs"):
        (run / sub).mkdir(parents=True, exist_ok=True)
    public, private = tmp_path / "data" / "public", tmp_path / "data" / "private"
    public.mkdir(parents=True, exist_ok=True)
    private.mkdir(parents=True, exist_ok=True)
    (run / "instructions.md").write_text("do it")
    return RunSpec("ldct-iqa", ["python3", "agent.py"], {}, public, run / "workspace", run / "submission",
                   run / "logs", run / "instructions.md", 60.0, hidden=(private,), network=network,
                   limits=Limits().with_overrides({"memory": "4G"}), **kw)


OPTIONS = PolicyOptions(limits={"memory": "512m"}, identity=IdentityPolicy("70000-70009"), egress_allow=("pypi.org",))


def _pairs(args: list[str], flag: str) -> list[tuple[str, str]]:
    return [(args[i + 1], args[i + 2]) for i, a in enumerate(args) if a == flag]


def test_policy_takes_the_option_over_the_task_and_keeps_the_rest(tmp_path):
    spec = _spec(tmp_path)
    policy = build_policy(spec, OPTIONS, Limits())
    assert policy.read_only == (spec.data_dir, spec.instructions)
    assert policy.read_write == (spec.workspace, spec.submission)
    assert policy.hidden == (tmp_path / "data" / "private",)
    assert policy.limits.memory == 512 << 20          # --rexmle-limit over task.yaml's 4G
    assert policy.limits.processes == 4096            # task.yaml (the project default) where no option says
    assert policy.network == "none" and policy.identity.uid_range == "70000-70009"
    assert policy.egress_allow == ("pypi.org",) and policy.time_limit == 60.0
    with pytest.raises(AttributeError):  # frozen: a renderer cannot loosen it
        policy.network = "host"  # type: ignore[misc]


@pytest.mark.parametrize("network, unshared", [("none", True), ("gateway", True), ("host", False)])
def test_bwrap_renders_folders_hidden_and_network(tmp_path, network, unshared):
    spec = _spec(tmp_path, network=network)
    root = tmp_path / "data"  # a folder bubblewrap shows, with the hidden one below it
    policy = build_policy(spec, OPTIONS, Limits())
    args = bwrap.render(policy, targets=TARGETS, tools=tmp_path / "bin", tools_target="/rexmle/bin", tmp=tmp_path,
                        python_roots=[root], env={}, user_namespace=True, seccomp_fd=None)
    ro, rw = _pairs(args, "--ro-bind"), _pairs(args, "--bind")
    assert (str(spec.data_dir), "/rexmle/data") in ro and (str(spec.instructions), "/rexmle/instructions.md") in ro
    assert (str(spec.workspace), "/rexmle/workspace") in rw and (str(spec.submission), "/rexmle/submission") in rw
    assert (str(tmp_path / "bin"), "/rexmle/bin") in ro
    assert not any(target == "/rexmle/data" for _, target in rw)
    # the private folder lies under a bound one: an empty tmpfs covers it
    covers = [args[i + 1] for i, arg in enumerate(args) if arg == "--tmpfs"]
    assert covers == ["/dev/shm", str((tmp_path / "data" / "private").resolve())]  # and the run's own /dev/shm
    assert ("--unshare-net" in args) is unshared
    # bubblewrap has no memory option: the launcher's rlimits (or the run's cgroup) carry the policy's limit
    assert rlimits_for(policy.limits, 70000, frozenset())[resource.RLIMIT_DATA] == 512 << 20
    assert resource.RLIMIT_DATA not in rlimits_for(policy.limits, 70000, frozenset({"memory"}))


def test_bwrap_bridge_takes_the_bridge_options(tmp_path):
    policy = build_policy(_spec(tmp_path, network="bridge"), OPTIONS, Limits())
    args = bwrap.render(policy, targets=TARGETS, tools=tmp_path / "bin", tools_target="/rexmle/bin", tmp=tmp_path,
                        python_roots=[], env={}, user_namespace=True, seccomp_fd=None,
                        bridge_args=["--unshare-net", "--info-fd", "5"])
    assert args[args.index("--info-fd") + 1] == "5" and args.count("--unshare-net") == 1


@pytest.mark.parametrize("network", ["none", "gateway"])
def test_landlock_renders_the_same_folders_as_rules(tmp_path, network):
    spec = _spec(tmp_path, network=network)
    policy = build_policy(spec, OPTIONS, Limits())
    view = landlock.render(policy, tools=tmp_path / "bin", tmp=tmp_path / "tmp", logs=["/x/agent.stdout.log"],
                           connect_ports=(8484,) if network == "gateway" else ())
    assert view.read[:2] == (str(spec.data_dir), str(spec.instructions))
    assert view.read_write == (str(spec.workspace), str(spec.submission), str(tmp_path / "tmp"))
    assert str(tmp_path / "bin") in view.read_exec and "/etc/shadow" not in view.read_exec
    assert not any(str(tmp_path / "data" / "private") in p for p in (*view.read, *view.read_write, *view.read_exec))
    assert view.write_files == ("/x/agent.stdout.log",)
    assert view.network_none is (network == "none")
    assert view.connect_ports == ((8484,) if network == "gateway" else ())


@pytest.mark.parametrize("network, mode", [("none", "none"), ("gateway", "none"), ("bridge", "bridge"),
                                           ("host", "host")])
def test_docker_renders_mounts_limits_and_network(tmp_path, network, mode):
    pytest.importorskip("docker")
    from pytest_rexmle.runtime.docker import DockerRuntime, DockerSettings

    spec = _spec(tmp_path, network=network)
    runtime = DockerRuntime(settings=DockerSettings(image="img"), session="s", **OPTIONS.runtime_options())
    policy = runtime.policy(spec)
    assert policy.limits.memory == 512 << 20
    kw = runtime.create_kwargs(spec, "img", (1000, 1000), policy=policy)
    mounts = {m["Target"]: (m["Source"], m["ReadOnly"]) for m in kw["mounts"]}
    assert mounts["/rexmle/data"] == (str(spec.data_dir.resolve()), True)
    assert mounts["/rexmle/instructions.md"] == (str(spec.instructions.resolve()), True)
    assert mounts["/rexmle/workspace"] == (str(spec.workspace.resolve()), False)
    assert mounts["/rexmle/submission"] == (str(spec.submission.resolve()), False)
    assert kw["mem_limit"] == kw["memswap_limit"] == 512 << 20
    assert kw["pids_limit"] == 4096  # the task's processes limit, not Docker's 8192 default
    assert kw["network_mode"] == mode


def test_local_and_docker_build_the_same_policy(tmp_path):
    pytest.importorskip("docker")
    from pytest_rexmle.runtime.docker import DockerRuntime, DockerSettings

    spec = _spec(tmp_path)
    local = LocalRuntime(sandbox="auto", **OPTIONS.runtime_options()).policy(spec)
    docker = DockerRuntime(settings=DockerSettings(), session="s", **OPTIONS.runtime_options()).policy(spec)
    assert local == docker


def test_limits_parse_every_name_once():
    limits = Limits().with_overrides({"open_files": "1024", "shm": "8g", "cpus": "2.5", "tmp": "none"})
    assert (limits.open_files, limits.shm, limits.cpus, limits.tmp) == (1024, 8 << 30, 2.5, None)
    assert limits.describe("cpus") == "2.5" and limits.describe("shm") == "8 GiB"
    with pytest.raises(LimitError, match="cpus expects a number"):
        Limits().with_overrides({"cpus": "many"})
    assert rlimits_for(limits, 0, frozenset())[resource.RLIMIT_NOFILE] == 1024


class _Config:
    def __init__(self, option, ini) -> None:
        self.option, self.ini = option, ini

    def getoption(self, name):
        return self.option

    def getini(self, name):
        return self.ini


@pytest.mark.parametrize("option, ini, env, expected", [
    ("/cli", "/ini", "/env", "/cli"),
    (None, "/ini", "/env", "/ini"),
    (None, "", "/env", "/env"),
    (None, "", None, "/default"),
])
def test_one_precedence_rule(option, ini, env, expected):
    environ = {ENVIRONMENT["rexmle_data_dir"]: env} if env else {}
    assert _value(_Config(option, ini), "rexmle_data_dir", "str", "/default", environ) == expected
    assert PRECEDENCE.index("command-line") < PRECEDENCE.index("ini-file") < PRECEDENCE.index("REXMLE_*") \
        < PRECEDENCE.index("task.yaml") < PRECEDENCE.index("built-in default")


@pytest.mark.parametrize("ini, choices, value", [
    ("rexmle_data", ("prepared", "synthetic"), "real"),
    ("rexmle_network", ("gateway", "bridge", "host", "none"), "cloud"),
    ("rexmle_sandbox", ("auto", "bwrap", "landlock"), "docker"),
])
def test_an_ini_value_outside_its_choices_is_a_usage_error(ini, choices, value):
    """argparse checks a command-line value's choices; the ini file's value gets the same check here."""
    with pytest.raises(pytest.UsageError, match=f"{ini}: expected one of {', '.join(choices)}, got '{value}'"):
        _value(_Config(None, value), ini, choices, choices[0], {})
    assert _value(_Config(None, choices[-1]), ini, choices, choices[0], {}) == choices[-1]
