"""One identity per run, never silently root (issues 17.7 and 23.2), through the real local runtime.

Root harness only (the unprivileged harness keeps its own uid: ``test_unprivileged.py``): two runs at
once get two uids from the range, neither reaches the other's stage, submission or workspace, each
run's leftover processes are gone when it ends, and its folders are given back to the harness's owner
before anything reads them. An agent command its uid cannot run under Landlock stops the run with the
fix; ``agent_as_root`` is the only way to uid 0 and is recorded.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from pytest_rexmle.runtime import agent_tools, staging
from pytest_rexmle.runtime.base import RunSpec
from pytest_rexmle.runtime.local import AgentIdentityRefused, LocalRuntime
from pytest_rexmle.runtime.sandbox import uids

from ..procs import processes_matching

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="a non-root harness cannot give agents other uids")

#: run A and run B each report their stage, wait for the other's, then attack it and leave a sleeper
CROSS = r'''
import errno, json, os, subprocess, sys, time
me, work = sys.argv[1], os.environ["REXMLE_WORKSPACE"]
open(os.path.join(work, "where.tmp"), "w").write(json.dumps({"uid": os.getuid(), "pid": os.getpid()}))
os.rename(os.path.join(work, "where.tmp"), os.path.join(work, "where.json"))  # whole when the host sees it
peer_file = os.path.join(work, "peer.json")
deadline = time.time() + 30
while not os.path.exists(peer_file) and time.time() < deadline:
    time.sleep(0.05)
peer = json.load(open(peer_file))
out = {"uid": os.getuid()}
def attempt(name, fn):
    try:
        value = fn()
        out[name] = "ok" if value is None else value
    except OSError as exc:
        out[name] = errno.errorcode.get(exc.errno, str(exc.errno))
for key, path in sorted(peer["paths"].items()):
    attempt(f"list:{key}", lambda: sorted(os.listdir(path)))
    attempt(f"write:{key}", lambda: open(os.path.join(path, f"from-{me}"), "w").write("x") and None)
attempt("read:secret", lambda: open(peer["secret"]).read())
if peer["pid"]:  # a host pid (Landlock); bubblewrap's PID namespace gives the peer's no meaning here
    attempt("kill:peer", lambda: os.kill(peer["pid"], 9))
subprocess.Popen(["python3", "-c", "import time; time.sleep(600)", f"{peer['marker']}-{me}"], start_new_session=True)
print(json.dumps(out), flush=True)
'''


def _spec(base: Path, name: str, argv: list[str], network: str = "none", time_limit: float = 60) -> RunSpec:
    """A run folder under ``base`` with public data, staged the way run.launch stages it."""
    run, public = base / name, base / f"public-{name}"
    for folder in (public, run / "workspace", run / "submission", run / "logs"):
        folder.mkdir(parents=True)
    (public / "train.csv").write_text("case,label\n1,0\n")
    (run / "instructions.md").write_text("do the task\n")
    return RunSpec(f"identity-{name}", argv, {}, public, run / "workspace", run / "submission", run / "logs",
                   run / "instructions.md", time_limit, network=network)


def _contract(runtime: LocalRuntime, spec: RunSpec) -> RunSpec:
    """Stage before the contract is written (as run.launch does), and put the contract in the environment."""
    spec = spec if spec.stage is not None else runtime.stage(spec)
    if spec.stage is None:
        spec = RunSpec(**{**spec.__dict__, "stage": staging.plan(spec)})
    paths = runtime.contract_paths(spec)
    spec.env.update(REXMLE_DATA_DIR=paths["data"], REXMLE_WORKSPACE=paths["workspace"],
                    REXMLE_SUBMISSION_DIR=paths["submission"], REXMLE_INSTRUCTIONS=paths["instructions"])
    return spec


def _alive(marker: str) -> list[str]:
    return processes_matching(marker)  # /proc, not pgrep: a minimal Debian has no procps


# -- the uid range and its leases -------------------------------------------------------------------------

def test_uid_range_parses_and_refuses_what_it_must():
    assert uids.UidRange.parse(None) == uids.UidRange(2000000000, 2000065535)
    assert len(uids.UidRange.parse("70000-70009")) == 10
    for bad, why in (("0-10", "above 0"), ("500-400", "ascending"), ("x-y", "START-END"),
                     ("65000-66000", "65534")):
        with pytest.raises(uids.UidRangeError, match=why):
            uids.UidRange.parse(bad)


@root_only
def test_concurrent_leases_never_share_a_uid_and_a_dead_holder_frees_it(tmp_path):
    folder = tmp_path / "locks"
    folder.mkdir(mode=0o700)
    span = uids.UidRange.parse("3000000000-3000000002")
    # another process (a concurrent session) holds the first uid
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, os, sys, time
        fd = os.open({str(folder / '3000000000.lock')!r}, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("held", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        first, second = uids.allocate(span, folder), uids.allocate(span, folder)
        assert {first.uid, second.uid} == {3000000001, 3000000002}
        with pytest.raises(uids.UidRangeError, match="all 3 agent uids.*widen --rexmle-agent-uids"):
            uids.allocate(span, folder)
        second.release()
        assert uids.allocate(span, folder).uid == second.uid  # released: handed out again
    finally:
        child.kill()
        child.wait()
    # the kernel dropped the dead holder's lock
    fd = os.open(folder / "3000000000.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(fd)


@root_only
def test_lock_folder_of_someone_else_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "open-locks"
    folder.mkdir()
    folder.chmod(0o777)
    monkeypatch.setenv(uids.LOCK_DIR_ENV, str(folder))
    with pytest.raises(uids.UidRangeError, match="mode 0700"):
        uids.lock_dir()


@root_only
def test_kill_all_of_ends_every_process_of_the_uid_even_a_non_dumpable_one(tmp_path):
    uid = 3000000100
    marker = f"rexmle-uid-sweep-{uuid.uuid4().hex[:8]}"
    code = (f"import ctypes, os, time; os.setresgid({uid}, {uid}, {uid}); os.setresuid({uid}, {uid}, {uid}); "
            f"ctypes.CDLL(None).prctl(4, 0, 0, 0, 0); time.sleep(600)  # {marker}")
    procs = [subprocess.Popen(["/usr/bin/python3", "-c", code], start_new_session=True) for _ in range(2)]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(_switched(p.pid, uid) for p in procs):
        time.sleep(0.05)
    assert set(uids.processes_of(uid)) >= {p.pid for p in procs}
    assert uids.kill_all_of(uid) >= 2
    for proc in procs:
        proc.wait(timeout=10)
    assert uids.processes_of(uid) == [] and _alive(marker) == []



@root_only
def test_a_uid_with_processes_is_skipped_not_killed(tmp_path):
    """Another container's harness on this kernel may run an agent as a uid of the range while holding
    its lock in a folder this harness cannot see: the uid is passed over and its process left alone."""
    folder = tmp_path / "locks"
    folder.mkdir(mode=0o700)
    uid = 3000000200
    code = f"import os, time; os.setresgid({uid}, {uid}, {uid}); os.setresuid({uid}, {uid}, {uid}); time.sleep(600)"
    other = subprocess.Popen(["/usr/bin/python3", "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not _switched(other.pid, uid):
            time.sleep(0.05)
        assert _switched(other.pid, uid)
        for _ in range(5):  # whatever the random start, the busy uid is never handed out
            lease = uids.allocate(uids.UidRange(uid, uid + 1), folder)
            assert lease.uid == uid + 1
            lease.release()
        with pytest.raises(uids.UidRangeError, match="1 of them by processes this harness did not start"):
            uids.allocate(uids.UidRange(uid, uid), folder)
        assert other.poll() is None  # not killed
    finally:
        other.kill()
        other.wait()


def _switched(pid: int, uid: int) -> bool:
    try:
        return f"\t{uid}\t" in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


# -- runs ---------------------------------------------------------------------------------------------

@root_only
def test_two_concurrent_runs_have_their_own_uids_and_cannot_touch_each_other(tmp_path, mechanism):
    """Run A and run B at once: two uids; neither lists, reads or writes the other's stage, workspace or
    submission, nor signals it; each one's detached sleeper is gone when its run ends; every folder comes
    back to root before the host reads it."""
    runtime = LocalRuntime(sandbox=mechanism)
    marker = f"rexmle-cross-{uuid.uuid4().hex[:8]}"
    specs = {}
    for name in ("a", "b"):
        spec = _spec(tmp_path, name, ["python3", "cross.py", name])
        (spec.workspace / "cross.py").write_text(CROSS)
        specs[name] = _contract(runtime, spec)
    outcomes: dict[str, object] = {}

    def run(name: str) -> None:
        outcomes[name] = runtime.run(specs[name])

    threads = {name: threading.Thread(target=run, args=(name,)) for name in specs}
    for thread in threads.values():
        thread.start()
    where = {}
    for name, spec in specs.items():  # each agent's own report, read from its stage while it runs
        path = spec.stage / "workspace" / "where.json"
        deadline = time.monotonic() + 30
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        where[name] = json.loads(path.read_text())
    for name, other in (("a", "b"), ("b", "a")):
        stage = specs[other].stage  # the host path: what a Landlock agent of a shared host could guess
        peer = {"paths": {"stage": str(stage), "workspace": str(stage / "workspace"),
                          "submission": str(stage / "submission")},
                "secret": str(stage / "workspace" / "where.json"), "marker": marker,
                "pid": where[other]["pid"] if mechanism == "landlock" else None}
        (specs[name].stage / "workspace" / "peer.tmp").write_text(json.dumps(peer))
        (specs[name].stage / "workspace" / "peer.tmp").rename(specs[name].stage / "workspace" / "peer.json")
    for thread in threads.values():
        thread.join(120)
    assert where["a"]["uid"] != where["b"]["uid"] and 0 not in (where["a"]["uid"], where["b"]["uid"])
    for name, other in (("a", "b"), ("b", "a")):
        outcome = outcomes[name]
        assert outcome.exit_code == 0, outcome.stderr.read_text()[-2000:]
        report = json.loads([line for line in outcome.stdout.read_text().splitlines() if line.startswith("{")][-1])
        assert report["uid"] == outcome.details["agent_uid"] == where[name]["uid"]
        for key, value in report.items():
            if key != "uid":
                assert value in ("EACCES", "ENOENT", "EPERM", "ESRCH"), (name, key, value)
        run = specs[other].workspace.parent
        assert not list(run.rglob(f"from-{name}")), f"run {name} wrote into run {other}"
        assert _alive(f"{marker}-{name}") == [], f"run {name}'s sleeper outlived it"
        for path in (run / "workspace", run / "submission", *(run / "workspace").rglob("*")):
            assert path.lstat().st_uid == 0, path  # given back to the harness before anything reads it


@root_only
def test_an_agent_command_its_uid_cannot_run_is_refused_under_landlock(tmp_path):
    """Issue 17.7: the harness's pyenv Python under /root (0700) is out of the run's uid's reach under Landlock;
    the run stops with a message naming the fix instead of running as uid 0."""
    if not pytest.importorskip("pytest_rexmle.runtime.sandbox.probe").probe("landlock").works:
        pytest.skip("Landlock does not work here")
    blocked = next((p for p in Path(sys.executable).resolve().parents
                    if p != Path("/") and not os.stat(p).st_mode & 0o001), None)
    if blocked is None:
        pytest.skip(f"every user reaches this Python ({sys.executable}): nothing to refuse")
    runtime = LocalRuntime(sandbox="landlock")
    spec = _contract(runtime, _spec(tmp_path, "root-python", [sys.executable, "-c", "print('ran')"]))
    with pytest.raises(AgentIdentityRefused, match=r"cannot run as its uid \d+ under Landlock.*python3.*"
                                                   r"--rexmle-sandbox=bwrap\)$"):
        runtime.run(spec)
    assert not (spec.logs / "agent.stdout.log").read_text()
    assert spec.workspace.lstat().st_uid == 0


@root_only
def test_agent_as_root_only_by_option_and_recorded(tmp_path, mechanism):
    code = "import os; print(os.getuid(), flush=True)"
    # no processes limit here (it needs a cgroup for uid 0, asserted below): the uid is what is tested
    runtime = LocalRuntime(sandbox=mechanism, agent_as_root=True, limits={"processes": "none"})
    spec = _contract(runtime, _spec(tmp_path, "as-root", ["python3", "-c", code]))
    if mechanism == "landlock":  # uid 0 could chmod/chown/utime/setxattr root's files: refused, before and at the run
        with pytest.raises(AgentIdentityRefused, match="--rexmle-agent-as-root is refused under Landlock"):
            runtime.check()
        with pytest.raises(AgentIdentityRefused, match="--rexmle-agent-as-root is refused under Landlock"):
            runtime.run(spec)
        assert not (spec.logs / "agent.stdout.log").exists() or not (spec.logs / "agent.stdout.log").read_text()
        return
    outcome = runtime.run(spec)
    assert outcome.exit_code == 0, outcome.stderr.read_text()[-2000:]
    assert outcome.stdout.read_text().split() == ["0"]
    assert outcome.details["agent_uid"] == 0 and outcome.details["agent_as_root"] is True
    # the processes limit cannot hold for uid 0 without a cgroup: refused, never silently unlimited
    limited = LocalRuntime(sandbox=mechanism, agent_as_root=True, limits={"processes": "50"})
    spec = _contract(limited, _spec(tmp_path, "as-root-limited", ["python3", "-c", code]))
    from pytest_rexmle.limits import Limits
    from pytest_rexmle.runtime.sandbox.limits import RunCgroup

    probe = RunCgroup.create(f"rexmle-probe-{uuid.uuid4().hex[:6]}", Limits(processes=50))
    has_pids = probe is not None and "pids" in probe.controllers
    if probe is not None:
        probe.remove()
    if has_pids:
        assert limited.run(spec).exit_code == 0
    else:
        with pytest.raises(AgentIdentityRefused, match="processes limit cannot hold for an agent running as uid 0"):
            limited.run(spec)


def test_agent_path_names_no_harness_python_and_the_tools_are_read_only(tmp_path, mechanism):
    """The agent's PATH is its tools and the system's folders; `rexmle validate` and `rexmle-validate` are
    there (the gateway's standard-library client), and the agent cannot change them."""
    code = textwrap.dedent("""
        import json, os, shutil, subprocess, sys
        tools = os.path.dirname(shutil.which("rexmle"))
        try:
            open(os.path.join(tools, "rexmle-validate"), "a").write("#")
            wrote = True
        except OSError:
            wrote = False
        other = subprocess.run(["rexmle", "list"], capture_output=True, text=True)
        print(json.dumps({"path": os.environ["PATH"], "exe": sys.executable, "tools": sorted(os.listdir(tools)),
                          "wrote": wrote, "validate": shutil.which("rexmle-validate"),
                          "other": [other.returncode, other.stderr]}))
    """)
    runtime = LocalRuntime(sandbox=mechanism)
    spec = _contract(runtime, _spec(tmp_path, "tools", ["python3", "-c", code]))
    outcome = runtime.run(spec)
    assert outcome.exit_code == 0, outcome.stderr.read_text()[-2000:]
    report = json.loads(outcome.stdout.read_text().splitlines()[-1])
    harness = {sys.prefix, sys.base_prefix, str(Path(sys.executable).parent)}
    system = agent_tools.SYSTEM_PATH.split(":")  # a harness on the system's Python shares /usr/bin with agents
    entries = [e for e in report["path"].split(":") if e not in system]
    assert not any(e == h or e.startswith(h.rstrip("/") + "/") for e in entries for h in harness), report["path"]
    exe_dir = str(Path(report["exe"]).parent)  # the system's own python3 (in SYSTEM_PATH) is the agent's too
    assert exe_dir in system or not any(report["exe"].startswith(h) for h in harness), report["exe"]
    assert {"rexmle", "rexmle-validate"} <= set(report["tools"]) and report["wrote"] is False
    assert report["other"][0] == 2 and "only 'rexmle validate" in report["other"][1]


def test_sample_agent_starts_no_harness_code(tmp_path):
    """The sample agent's command inside is a plain shell copy of what its host-side setup wrote: no
    harness interpreter, module or path; ``delay`` only adds a sleep, and a bad one is a clear error."""
    from pytest_rexmle.agents.base import AgentContext
    from pytest_rexmle.agents.sample import BASELINE, SampleAgent
    from pytest_rexmle.data.synthetic import ensure_synthetic
    from pytest_rexmle.errors import RexmleError
    from pytest_rexmle.task import registry

    task = registry().get("ldct-iqa")
    twin = ensure_synthetic(task, tmp_path / "cache")
    ctx = AgentContext(task, tmp_path, tmp_path / "workspace", tmp_path / "submission", tmp_path / "logs",
                       twin.public, 60)
    ctx.workspace.mkdir()
    agent = SampleAgent("sample", {})
    assert agent.setup(ctx) is None
    assert (ctx.workspace / BASELINE / "submission.csv").is_file()
    argv = agent.command(ctx)
    assert argv[:2] == ["/bin/sh", "-c"] and "pytest_rexmle" not in argv[2] and "python" not in argv[2]
    assert not any(h in " ".join(argv) for h in {sys.prefix, sys.base_prefix, str(Path(sys.executable).parent)})
    assert SampleAgent("sample", {"delay": "2.5"}).command(ctx)[2].startswith("sleep 2.5 && ")
    for bad in ("-1", "soon"):
        with pytest.raises(RexmleError, match="delay must be a number of seconds"):
            SampleAgent("sample", {"delay": bad})


def test_an_environment_every_user_can_write_is_refused_under_landlock(tmp_path):
    """Issue 38.3: times and extended attributes are no Landlock rights, so a world-writable file of ``env=``
    would keep the agent's marks for the next run; under Landlock the run stops naming the file."""
    from pytest_rexmle.runtime.local import world_writable

    if not pytest.importorskip("pytest_rexmle.runtime.sandbox.probe").probe("landlock").works:
        pytest.skip("Landlock does not work here")
    env = tmp_path / "agent-env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text("#!/bin/sh\n")
    assert world_writable([env]) is None
    (env / "lib").mkdir()
    (env / "lib" / "site.py").write_text("")
    os.chmod(env / "lib" / "site.py", 0o666)
    assert world_writable([env]) == str(env / "lib" / "site.py")
    runtime = LocalRuntime(sandbox="landlock", unsafe_same_uid=True)
    spec = _contract(runtime, RunSpec(**{**_spec(tmp_path, "ww-env", ["true"]).__dict__, "software": (env,)}))
    with pytest.raises(AgentIdentityRefused, match=r"holds .*site\.py, which every user can write"):
        runtime.run(spec)
    assert not (spec.logs / "agent.stdout.log").exists() or not (spec.logs / "agent.stdout.log").read_text()
