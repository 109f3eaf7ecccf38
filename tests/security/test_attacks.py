"""Issue 10's attack classes, each against every sandbox mechanism, as root and as an unprivileged user.

One *probe* session per (mechanism, user) runs the attack agent on three tiny tasks at once:
``ldct-iqa`` (read/search/proc/mount/remount/write/forge/setuid/sysctl/loopback/twin regeneration),
``isles22`` (NIfTI decompression bombs) and ``topcow-cta-det`` (hostile JSON, a 1,500-level folder);
then a ``--rexmle-resume`` session checks that nothing forged is reused. ``leftovers`` (FIFO and
/dev/zero traps, control characters) and ``limits`` (fork bomb, memory hog) get sessions of their own.
Each test asserts both halves of "the attack failed": the run is still graded or FAILed cleanly with a
reason, and the specific damage did not happen on the host.

Gaps: a defence that has not landed yet is listed in ``KNOWN_GAPS`` and its test is
``xfail(strict=True)`` — it turns into a failure the moment the defence lands, so the list stays true.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import site
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ..procs import processes_matching
from ..sandbox.standin import TokenServer
from .conftest import (
    ATTACKS,
    Mechanism,
    _mechanism,
    limit_option_known,
    session_dict,
    shared_once,
    slurm_job_ids,
    slurm_job_unreachable,
)

MARK = "rexmle_attack_marker"
PROBE_TASKS = ("ldct-iqa", "isles22", "topcow-cta-det")

#: (attack, mechanism, user) -> the defence that is missing; "*" matches any
KNOWN_GAPS: dict[tuple[str, str, str], str] = {
    ("proc_host_net", "landlock", "*"): "Landlock has no PID namespace and cannot refuse /proc/<host pid> without "
                                        "refusing the agent's own children their /proc/self (README, Landlock)",
}


def gap(request, attack: str, mechanism: Mechanism) -> None:
    for (a, m, u), reason in KNOWN_GAPS.items():
        if a == attack and m in ("*", mechanism.name) and u in ("*", mechanism.user):
            request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
            return


# -- host snapshots -------------------------------------------------------------------------------------

SYSCTLS = ("net/ipv4/ip_default_ttl", "kernel/core_pattern", "vm/overcommit_memory")


def public_data_state(cache: Path, task: str = "ldct-iqa") -> dict:
    """Mode, owner, times and content hash of every public file of ``task`` in the cache: what an agent
    that chmods its data would change for the next run if the stage handed it the cache's own inodes."""
    out = {}
    for path in sorted(glob.glob(str(cache / "**" / task / "public" / "**"), recursive=True)):
        st = os.lstat(path)
        if os.path.isfile(path) and not os.path.islink(path):
            out[path] = [st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns,
                         hashlib.sha256(Path(path).read_bytes()).hexdigest()]
    return out


def host_snapshot() -> dict:
    import pytest_rexmle
    from pytest_rexmle.task import competitions_root, get_task

    package = Path(pytest_rexmle.__file__).resolve().parent
    sites = [*site.getsitepackages()]
    # the files the attack opens for writing (not whole trees: other work may change the package meanwhile)
    targets = [package / "scoring" / "grading.py", package / "competitions" / "ldct" / "grade.py",
               get_task("ldct-iqa").folder.resolve() / "task.yaml"]
    return {"targets": {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in targets},
            "sysctl": {name: Path(f"/proc/sys/{name}").read_text() for name in SYSCTLS},
            "markers": sorted(p for s in sites + [str(package), str(competitions_root())] for p in glob.glob(f"{s}/*{MARK}*")),
            "pth_ran": os.path.exists(f"/tmp/{MARK}-pth-ran")}


def special_files(root: Path) -> list[str]:
    """Setuid/setgid files and device nodes under ``root`` (``find``: the agent's 1,500-level folders
    are deeper than Python's recursion limit)."""
    out = subprocess.run(["find", str(root), "-xdev", "(", "-perm", "-4000", "-o", "-perm", "-2000", "-o",
                          "-type", "b", "-o", "-type", "c", ")", "-printf", "%M %u %p\n"],
                         capture_output=True, text=True, check=False)
    return sorted(out.stdout.splitlines())


def answer_rows(cache: Path, task: str) -> list[str]:
    rows = set()
    for path in glob.glob(str(cache / "**" / task / "private" / "answers.csv"), recursive=True):
        rows.update(line.strip() for line in Path(path).read_text().splitlines()[1:] if line.strip())
    return sorted(rows)


# -- the probe session ----------------------------------------------------------------------------------

def _command(mech: Mechanism, folder: Path, scenario: str, **extra: str) -> list[str]:
    import pytest_rexmle
    from pytest_rexmle.task import competitions_root

    env = {"ATTACK_CACHE": str(mech.cache), "ATTACK_RUNS": str(folder / ".rexmle" / "runs"),
           "ATTACK_PACKAGE": str(Path(pytest_rexmle.__file__).resolve().parent),
           "ATTACK_TASKS": str(competitions_root().resolve()), "ATTACK_SITE": ":".join(site.getsitepackages()), **extra}
    env.setdefault("ATTACK_SEEDS", "2")
    cmd = " ".join(f"{k}={v}" for k, v in env.items()) + f" python attack.py {scenario}"
    return ["--agent=command", f"--agent-option=dir={ATTACKS}", f"--agent-option=cmd={cmd}"]


def private_dirs(cache: Path, task: str) -> list[str]:
    return sorted(str(Path(p).parent) for p in glob.glob(str(cache / "**" / task / "private" / "answers.csv"),
                                                         recursive=True))


def _probe(mech: Mechanism) -> dict:
    if not private_dirs(mech.cache, "ldct-iqa"):
        # the twin first (a sample run), so the attack can be handed the answers' exact host path
        warm = mech.new_folder("warm")
        mech.run(warm, [*mech.args(), "--agent=sample", "--rexmle-judge=none", "-k", "ldct-iqa"], timeout=180)
    [private] = private_dirs(mech.cache, "ldct-iqa")
    before = host_snapshot()
    data_before = public_data_state(mech.cache)
    service = TokenServer("127.0.0.1")  # an HTTP server on the host's loopback only, with a secret token
    try:
        folder = mech.new_folder("probe")
        args = [*mech.args(), *_command(mech, folder, "auto", ATTACK_PORT=str(service.port), ATTACK_PRIVATE=private),
                "--rexmle-time-limit=180", "-k", " or ".join(PROBE_TASKS)]
        first = mech.run(folder, args, timeout=420)
        resumed = mech.run(folder, [*args[:-2], "-k", "ldct-iqa", "--rexmle-resume"], timeout=240)
    finally:
        service.close()
    after = host_snapshot()
    data_after = public_data_state(mech.cache)
    # the next run of the task, after the probe's agent chmod-ed, utime-d and chown-ed its data
    after_poison = mech.new_folder("after-poison")
    next_run = mech.run(after_poison, [*mech.args(), "--agent=sample", "--rexmle-judge=none", "-k", "ldct-iqa"],
                        timeout=180)
    runs_root = folder / ".rexmle" / "runs"
    return {"first": session_dict(first), "resumed": session_dict(resumed), "before": before, "after": after,
            "data_before": data_before, "data_after": data_after, "next_run": session_dict(next_run),
            "private": private, "cache": str(mech.cache),
            "token": service.token, "answers": answer_rows(mech.cache, "ldct-iqa"),
            "special_files": special_files(runs_root),
            "forged_dirs": sorted(glob.glob(str(runs_root / "*" / "*" / "99991231T235959-1"))),
            "run_files": sorted(str(p.relative_to(runs_root)) for p in runs_root.glob("*/*/*/*.json")),
            "logs": {task: _read_logs(Path(d)) for task, d in first.run_dirs.items()}}


def _read_logs(run: Path) -> str:
    text = ""
    for name in ("logs/agent.stdout.log", "logs/agent.stderr.log", "workspace/attack.json"):
        try:
            text += (run / name).read_text(errors="replace")
        except OSError:
            pass
    return text


@pytest.fixture
def probe(mechanism, tmp_path_factory) -> dict:
    result = shared_once(tmp_path_factory, f"probe-{mechanism.id}", lambda: _probe(mechanism))
    first = result["first"]
    assert not first["timed_out"], first["output"][-3000:]
    assert set(first["results"]) == set(PROBE_TASKS), first["output"][-3000:]
    return result


def test_every_attack_ran_through_the_mechanism(mechanism, probe):
    """The probe's runs really went where the parameter says: Slurm's as finished jobs of the cluster whose
    node isolated the agent with bubblewrap, the others in their own runtime and sandbox."""
    runtime = {"slurm": "slurm", "docker": "docker"}.get(mechanism.name, "local")
    for task in PROBE_TASKS:
        run = probe["first"]["runs"][task]
        assert run["runtime"] == runtime, run
        if mechanism.name != "docker":
            assert run["sandbox"] == ("bwrap" if mechanism.name == "slurm" else mechanism.name), run
        if mechanism.name == "slurm":
            assert run["slurm"]["job_id"] and run["node"], run
            job = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "State,UID", "-j", str(run["slurm"]["job_id"])],
                                 capture_output=True, text=True).stdout.strip()
            assert job == f"COMPLETED|{mechanism.uid}", (task, job)  # as the harness's user


def _attempt(probe: dict, name: str) -> dict:
    return probe["first"]["attack"]["ldct-iqa"]["attempts"][name]


# -- reading the answers ----------------------------------------------------------------------------------

@pytest.mark.parametrize("attack", ["read_by_path", "search_filesystem", "proc_other_processes", "mount_host_disk"])
def test_agent_cannot_read_the_private_answers(request, mechanism, probe, attack):
    gap(request, attack, mechanism)
    assert _attempt(probe, attack)["ok"] is False, _attempt(probe, attack)["detail"]
    rows = probe["answers"]
    assert len(rows) >= 10, "the twin's answers were not found on the host"
    # the answers' rows appear nowhere the agent wrote (its logs, its report of what it found)
    leaked = [row for row in rows if row in probe["logs"]["ldct-iqa"] and not row.endswith(",0.0")]
    assert leaked == []
    result = probe["first"]["results"]["ldct-iqa"]
    assert result["status"] == "ok" and result["percentile"] < 100


def _visible(probe: dict) -> str:
    """What the agent could read about the host: its mountinfo and other processes' environ/cmdline."""
    report = probe["first"]["attack"]["ldct-iqa"]
    # processes running this test's own attack command (which hands the agent the path) are left out
    return report.get("mountinfo", "") + "".join(f["text"] for f in report["found"]
                                                 if f["where"].startswith("/proc/") and "ATTACK_" not in f["text"])


def test_no_host_path_of_the_private_answers_in_the_sandbox(request, mechanism, probe):
    """This run's private folder is named nowhere the agent can read (other sessions' processes on a
    shared host are not this run's business: Landlock shows the host's process list, as documented)."""
    gap(request, "private_path", mechanism)
    assert probe["private"] not in _visible(probe)


def test_mountinfo_names_no_runs_folder(request, mechanism, probe):
    """The kernel names every bind's host source in mountinfo, and Landlock's agent runs on real paths:
    both are the run's neutral stage (runtime/staging.py), so neither mountinfo nor the agent's own
    environment, descriptors or working directory name the runs folder, the cache or the data root
    (synthetic data lives in the cache)."""
    gap(request, "runs_path", mechanism)
    report = probe["first"]["attack"]["ldct-iqa"]
    run = probe["first"]["runs"]["ldct-iqa"]
    assert run["host_paths_hidden"] is True and "/rexmle-" in run["stage"], run
    assert report.get("environ") and report.get("mountinfo") and report.get("fds"), "the agent reported nothing"
    own = repr(report["environ"]) + repr(report["fds"]) + report["cwd"]
    for root in (str(Path(probe["first"]["folder"]) / ".rexmle"), probe["cache"]):
        assert root not in report["mountinfo"], root
        assert root not in own, root
    if mechanism.name == "landlock":  # the host's own mount table (no stage in it); the agent works in the stage
        assert report["cwd"].startswith(f"{run['stage']}/workspace"), report["cwd"]
    else:
        assert f"{run['stage']}/workspace /rexmle/workspace " in report["mountinfo"]


# -- privilege --------------------------------------------------------------------------------------------

def test_agent_runs_unprivileged(request, mechanism, probe):
    """Whoever runs the harness: a non-root uid, no capabilities, no_new_privs, a seccomp filter."""
    gap(request, "unprivileged", mechanism)
    status = probe["first"]["attack"]["ldct-iqa"]["status"]
    assert probe["first"]["attack"]["ldct-iqa"]["uid"] != 0 and status["Uid"].split()[1] != "0", status
    assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0, status
    assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2", status


@pytest.mark.parametrize("attack", ["remount_data_rw", "remount_root_rw", "device_node"])
def test_no_mount_or_device_privilege(request, mechanism, probe, attack):
    gap(request, attack, mechanism)
    assert _attempt(probe, attack)["ok"] is False, _attempt(probe, attack)["detail"]
    assert probe["first"]["results"]["ldct-iqa"]["status"] == "ok"


def test_harness_grader_tasks_and_answers_cannot_be_written(request, mechanism, probe):
    gap(request, "write_harness", mechanism)
    assert _attempt(probe, "write_harness")["ok"] is False, _attempt(probe, "write_harness")["detail"]
    assert probe["after"]["targets"] == probe["before"]["targets"]
    assert probe["after"]["markers"] == []


def test_no_pth_or_sitecustomize_reaches_the_harness_python(request, mechanism, probe):
    gap(request, "plant_pth", mechanism)
    assert _attempt(probe, "plant_pth")["ok"] is False, _attempt(probe, "plant_pth")["detail"]
    assert probe["after"]["markers"] == [] and probe["after"]["pth_ran"] is False


def test_no_setuid_or_device_file_survives_in_the_run_folder(request, mechanism, probe):
    gap(request, "setuid_binary", mechanism)
    assert probe["special_files"] == []


def test_kernel_settings_cannot_be_changed(request, mechanism, probe):
    gap(request, "sysctl_write", mechanism)
    assert _attempt(probe, "sysctl_write")["ok"] is False, _attempt(probe, "sysctl_write")["detail"]
    assert probe["after"]["sysctl"] == probe["before"]["sysctl"]


def test_host_loopback_service_is_not_reachable(request, mechanism, probe):
    """The bridge for bubblewrap (slirp4netns) and Docker, none for Landlock: the host's 127.0.0.1 never answers."""
    gap(request, "loopback_service", mechanism)
    assert probe["first"]["runs"]["ldct-iqa"]["network"] == mechanism.default_network  # the mode attacked ran
    assert probe["token"] not in probe["logs"]["ldct-iqa"]
    assert _attempt(probe, "loopback_service")["ok"] is False, _attempt(probe, "loopback_service")["detail"]


@pytest.mark.parametrize("attack", ["vsock_socket", "alg_socket", "unknown_syscall"])
def test_no_vsock_or_alg_socket_and_no_syscall_newer_than_the_filter(request, mechanism, probe, attack):
    """Issue 32.7: AF_VSOCK reaches the hypervisor's host past every network rule; a syscall newer than the
    filter's table answers ENOSYS (or the engine's EPERM), never reaching the kernel."""
    gap(request, attack, mechanism)
    assert _attempt(probe, attack)["ok"] is False, _attempt(probe, attack)["detail"]
    assert probe["first"]["results"]["ldct-iqa"]["status"] == "ok"


def test_host_sockets_are_not_listed_through_proc(request, mechanism, probe):
    """Issue 32.7: /proc/1/net/tcp, where pid 1 is the host's, lists the host's listeners (this test's
    service on the host's loopback)."""
    gap(request, "proc_host_net", mechanism)
    assert _attempt(probe, "proc_host_net")["ok"] is False, _attempt(probe, "proc_host_net")["detail"]


# -- results ----------------------------------------------------------------------------------------------

def test_forged_results_are_not_written_nor_resumed(request, mechanism, probe):
    gap(request, "forge_results", mechanism)
    genuine = probe["first"]["results"]["ldct-iqa"]
    resumed = probe["resumed"]["results"]["ldct-iqa"]
    assert probe["forged_dirs"] == [], probe["forged_dirs"]
    assert genuine["status"] == "ok" and genuine["percentile"] < 100
    assert resumed["percentile"] == genuine["percentile"] and resumed["run_dir"] == genuine["run_dir"]
    assert _attempt(probe, "forge_results")["ok"] is False, _attempt(probe, "forge_results")["detail"]


def test_synthetic_answers_cannot_be_regenerated(request, mechanism, probe):
    """The twin generator is importable inside; without the cache's secret no seed reproduces the data."""
    gap(request, "regenerate_twin", mechanism)
    assert _attempt(probe, "regenerate_twin")["ok"] is False, _attempt(probe, "regenerate_twin")["detail"]
    result = probe["first"]["results"]["ldct-iqa"]
    assert result["status"] == "ok" and result["percentile"] < 100


# -- hostile leftovers read by the host -----------------------------------------------------------------

def test_nifti_bombs_are_invalid_without_decoding(request, mechanism, probe):
    gap(request, "nifti_bomb", mechanism)
    result = probe["first"]["results"]["isles22"]
    assert result["status"] == "invalid", result
    assert result["reason"] and re.search(r"size|shape|grid|dimension|header", result["reason"], re.I), result["reason"]
    # three 4 GiB claims never became host memory (the whole session, three tasks, stays small)
    assert probe["first"]["maxrss_mb"] < 1500, probe["first"]["maxrss_mb"]


def test_hostile_json_and_deep_folders_are_invalid_not_errors(request, mechanism, probe):
    gap(request, "hostile_json", mechanism)
    result = probe["first"]["results"]["topcow-cta-det"]
    assert result["status"] == "invalid" and result["reason"], result


def test_fifo_and_dev_zero_traps_do_not_hang_the_session(request, mechanism, tmp_path):
    gap(request, "leftovers", mechanism)
    folder = mechanism.new_folder("leftovers")
    session = mechanism.run(folder, [*mechanism.args(), *_command(mechanism, folder, "leftovers"),
                                     "-k", "ldct-iqa", "--rexmle-time-limit=60"], timeout=150)
    assert not session.timed_out, "the session hung on the agent's leftovers"
    assert "ldct-iqa" in session.results, session.output[-4000:]
    result = session.results["ldct-iqa"]
    assert result["status"] == "missing" and "exited with code 2" in result["reason"], result
    assert "\x1b" not in result["reason"] and "\x07" not in result["reason"]
    assert "\x1b" not in session.output
    assert session.maxrss_mb < 1500, session.maxrss_mb


# -- limits -----------------------------------------------------------------------------------------------

def test_fork_bomb_and_memory_hog_meet_the_limits(request, mechanism):
    """512 MiB of memory, 200 processes: the fork bomb stops near 200, the 2 GiB hog is a FAIL that names
    the memory limit."""
    gap(request, "limits", mechanism)
    folder = mechanism.new_folder("limits")
    if not limit_option_known():
        pytest.fail("--rexmle-limit is not an option of this harness: the runtimes have no limits")
    extra_env, limit_args = {}, ["--rexmle-limit=memory=512m", "--rexmle-limit=processes=200"]
    session = mechanism.run(folder, [*mechanism.args(), *limit_args,
                                     *_command(mechanism, folder, "limits", ATTACK_FORKS="3000", ATTACK_HOG_MB="2048"),
                                     "-k", "ldct-iqa", "--rexmle-time-limit=90"], extra_env=extra_env, timeout=200)
    assert not session.timed_out
    result = session.results["ldct-iqa"]
    attack = session.attack.get("ldct-iqa", {})
    # the bomb was stopped by the limit, not by its own cap of 3000; exact (200 + the agent's own) with a
    # cgroup, approximate with RLIMIT_NPROC, which counts every process of the uid (concurrent runs too)
    assert attack.get("fork_error") and attack.get("forks", 0) < 1000, attack
    assert attack.get("hog_mb", 0) < 600, attack
    assert result["status"] != "ok" and "memory limit of 512" in (result["reason"] or ""), result


# -- Slurm: the job's interpreter ------------------------------------------------------------------------

def test_slurm_job_python_out_of_the_job_user_reach_is_refused_at_once(request, security_base):
    """Why the unprivileged Slurm sessions above name a job-side interpreter: without one, where uid 65534
    cannot reach this Python on the host, the session stops at once with a usage error naming the
    interpreter (the runtime's shared-paths probe), and submits no benchmark job."""
    if (why := slurm_job_unreachable()) is None:
        pytest.skip("uid 65534 reaches this Python on the host: nothing for the probe to refuse")
    mech = _mechanism(request, security_base, "slurm", "unprivileged")  # no job_python: this very Python
    folder = mech.new_folder("refused")
    session = mech.run(folder, [*mech.args(), "--agent=sample", "-k", "ldct-iqa"], timeout=180)
    assert session.returncode == 4, session.output[-3000:]
    assert "compute nodes do not see these paths" in session.output, session.output[-3000:]
    assert f"Python interpreter {sys.executable}" in session.output, (why, session.output[-3000:])
    assert session.run_dirs == {} and slurm_job_ids(folder) == []


# -- identities, data and runs side by side (issues 17.7 and 23) -----------------------------------------

def test_public_data_cannot_be_poisoned_for_the_next_run(request, mechanism, probe):
    """The probe's agent chmods its data to 000, sets its times and chowns it: refused where the data are
    the cache's inodes (read-only binds: EROFS; another uid's hard links: EPERM), or done to a copy of the
    run's own (Landlock as the harness's uid); the cache is untouched and the next run grades as before."""
    gap(request, "poison_data", mechanism)
    attempt = _attempt(probe, "poison_data")
    data_view = probe["first"]["runs"]["ldct-iqa"].get("data_view")
    assert attempt["ok"] is False or data_view == "copy", (attempt["detail"], data_view)
    assert probe["data_before"] and probe["data_after"] == probe["data_before"]
    following = probe["next_run"]["results"]["ldct-iqa"]
    assert following["status"] == "ok", following


def test_agent_path_names_no_harness_interpreter(request, mechanism, probe):
    """Nothing the agent runs needs the harness's venv: its PATH is its tools and the system's (or the
    image's) folders, and the sample agent's baseline run in the next session needed no harness code."""
    gap(request, "agent_path", mechanism)
    environ = probe["first"]["attack"]["ldct-iqa"]["environ"]
    path = next((entry[5:] for entry in environ if entry.startswith("PATH=")), "")  # its own /proc/self/environ
    stage = probe["first"]["runs"]["ldct-iqa"]["stage"]
    assert path.split(":")[0] in ("/rexmle/bin", f"{stage}/bin"), path  # the agent's tools come first
    from pytest_rexmle.runtime.agent_tools import SYSTEM_PATH

    system = SYSTEM_PATH.split(":")
    entries = path.split(":")[1:]
    for harness in {sys.prefix, sys.base_prefix, os.path.dirname(sys.executable)}:
        # a harness whose interpreter is the system's own (/usr/bin/python3) shares /usr/bin with every agent
        assert not any(e == harness or e.startswith(harness.rstrip("/") + "/") for e in entries if e not in system), \
            (harness, path)
    assert probe["next_run"]["results"]["ldct-iqa"]["status"] == "ok"
    assert "sample agent: copying the baseline" in _read_logs(Path(probe["next_run"]["run_dirs"]["ldct-iqa"]))


def _stage_of(folder: Path, deadline: float) -> Path | None:
    """The stage a running session's ldct-iqa run is in (from its stage.json), once the agent is there."""
    while time.monotonic() < deadline:
        for record in (folder / ".rexmle" / "runs").glob("ldct-iqa/*/*/stage.json"):
            try:
                stage = Path(json.loads(record.read_text())["stage"])
            except (OSError, ValueError, KeyError):
                continue
            if (stage / "workspace" / "where.json").exists():
                return stage
        time.sleep(0.2)
    return None


def test_two_concurrent_sessions_cannot_touch_each_others_runs(request, mechanism):
    """Issue 23.2: two sessions at once; each agent is handed the other's stage (as /var/tmp or /proc would
    show it on a weak sandbox) and tries to list, read and write its stage, workspace and submission and to
    signal it. Nothing succeeds, both runs grade, a root harness gives them different uids, and the
    process each left behind is gone when its run ends."""
    gap(request, "cross_runs", mechanism)
    marker = f"rexmle-cross-{os.getpid()}-{int(time.time())}"
    folders = {name: mechanism.new_folder(f"cross-{name}") for name in ("a", "b")}
    sessions: dict[str, object] = {}

    def run(name: str) -> None:
        folder = folders[name]
        sessions[name] = mechanism.run(folder, [*mechanism.args(), *_command(mechanism, folder, "cross",
                                                                             ATTACK_MARKER=f"{marker}-{name}"),
                                                "--rexmle-judge=none", "-k", "ldct-iqa", "--rexmle-time-limit=200"],
                                       timeout=300)

    threads = [threading.Thread(target=run, args=(name,)) for name in folders]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 240
    stages = {name: _stage_of(folder, deadline) for name, folder in folders.items()}
    try:
        assert all(stages.values()), f"a session never started its agent: {stages}"
        for name, other in (("a", "b"), ("b", "a")):
            peer_stage = stages[other]
            where = json.loads((peer_stage / "workspace" / "where.json").read_text())
            peer = {"paths": {"stage": str(peer_stage), "workspace": str(peer_stage / "workspace"),
                              "submission": str(peer_stage / "submission")},
                    # a host pid only where the agent sees the host's processes (Landlock)
                    "pid": where["pid"] if mechanism.name == "landlock" else None}
            (stages[name] / "workspace" / "peer.json").write_text(json.dumps(peer))
    finally:
        for thread in threads:
            thread.join(320)
    uids = set()
    for name, other in (("a", "b"), ("b", "a")):
        session = sessions[name]
        assert not session.timed_out, session.output[-3000:]
        report = session.attack["ldct-iqa"]
        assert report.get("peer_seen") is True, report
        succeeded = {k: v["detail"] for k, v in report["attempts"].items() if v["ok"]}
        assert succeeded == {}, succeeded
        assert session.results["ldct-iqa"]["status"] == "ok", session.results["ldct-iqa"]
        other_run = Path(sessions[other].run_dirs["ldct-iqa"])
        assert not [p for p in other_run.rglob(f"*{MARK}-from-*")], "one run wrote into the other"
        assert processes_matching(f"{marker}-{name}") == []
        uids.add(report["uid"])
    if os.geteuid() == 0 and mechanism.user == "root":
        assert len(uids) == 2 and 0 not in uids, uids


def test_landlock_as_the_harness_uid_stops_the_session(request, security_base):
    """Issue 23.3: an unprivileged harness under Landlock would run the agent as its own uid (its environ,
    venv, cache and runs folder in reach): without --rexmle-unsafe-same-uid the session stops at once."""
    mech = _mechanism(request, security_base, "landlock", "unprivileged")
    folder = mech.new_folder("same-uid")
    args = [a for a in mech.args() if a != "--rexmle-unsafe-same-uid"]
    copy = "--agent-option=cmd=cp $REXMLE_DATA_DIR/sample_submission.csv $REXMLE_SUBMISSION_DIR/"
    session = mech.run(folder, [*args, "--agent=command", copy, "-k", "ldct-iqa"], timeout=180)
    assert session.returncode == 4, session.output[-3000:]
    assert "/proc/<pid>/environ" in session.output and "--rexmle-unsafe-same-uid" in session.output
    assert session.run_dirs == {}
    # the harness's own sample agent (Agent.trusted: a copy of a baseline the host wrote) runs there, said so
    trusted = mech.run(mech.new_folder("same-uid-sample"), [*args, "--agent=sample", "-k", "ldct-iqa"], timeout=180)
    assert trusted.returncode == 0, trusted.output[-3000:]
    [run_dir] = trusted.run_dirs.values()
    meta = json.loads((Path(run_dir) / "run.json").read_text())
    assert meta["unsafe_same_uid"] is True and "sample agent" in meta["same_uid_reason"], meta


def test_root_agent_only_by_explicit_option(request, security_base):
    """Issue 17.7, Landlock as root: a command the run's uid cannot start (this harness's Python under a
    0700 folder) stops the session with a usage error naming the fix. --rexmle-agent-as-root is refused under
    Landlock (issue 38.3: uid 0 made a root 0600 file outside every mount world-writable and poisoned the
    cache's data; chmod/chown/utime/setxattr are no Landlock rights), before any run starts."""
    if os.geteuid() != 0:
        pytest.skip("the root variant needs the suite to run as root")
    mech = _mechanism(request, security_base, "landlock", "root")
    if not [p for p in Path(sys.executable).resolve().parents if p != Path("/") and not os.stat(p).st_mode & 0o001]:
        pytest.skip(f"every user reaches this Python ({sys.executable}): nothing to refuse")
    folder = mech.new_folder("as-root")

    def command(python: str) -> list[str]:
        return [f"--agent-option=cmd={python} -c \"import os; open(os.environ['REXMLE_WORKSPACE'] + "
                "'/uid.txt', 'w').write(str(os.getuid()))\" && cp $REXMLE_DATA_DIR/sample_submission.csv "
                "$REXMLE_SUBMISSION_DIR/submission.csv", "--agent=command", "--rexmle-judge=none", "-k", "ldct-iqa"]

    refused = mech.run(folder, [*mech.args(), *command(sys.executable)], timeout=180)
    assert refused.returncode == 4, refused.output[-3000:]
    assert "cannot run as its uid" in refused.output and "--rexmle-agent-as-root" not in refused.output
    assert "python3" in refused.output  # the fix: an interpreter every user can run
    folder = mech.new_folder("as-root-refused")
    as_root = mech.run(folder, [*mech.args(), *command("python3"), "--rexmle-agent-as-root"], timeout=180)
    assert as_root.returncode == 4, as_root.output[-3000:]
    assert "--rexmle-agent-as-root is refused under Landlock" in as_root.output
    assert not as_root.run_dirs, "no run may start as uid 0 under Landlock"
