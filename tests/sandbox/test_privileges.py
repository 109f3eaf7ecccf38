"""Inside the local sandbox the agent holds no privilege: checked from the agent's side, per mechanism."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pytest_rexmle.runtime import staging
from pytest_rexmle.runtime.sandbox.identity import harness_is_root

from .conftest import SECRET, run_agent

PROBE = r'''
import ctypes, errno, json, os, stat, sys
libc = ctypes.CDLL(None, use_errno=True)
status = {l.split(":")[0]: l.split(":", 1)[1].strip() for l in open("/proc/self/status")}

def call(fn, *args):
    rc = fn(*args)
    return 0 if rc == 0 else ctypes.get_errno()

def attempt(fn):
    try:
        fn()
        return "ok"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, exc.errno)

out = {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "CapEff": status["CapEff"], "CapPrm": status["CapPrm"],
       "CapBnd": status["CapBnd"], "CapAmb": status["CapAmb"], "NoNewPrivs": status["NoNewPrivs"],
       "Seccomp": status["Seccomp"]}
out["mount"] = errno.errorcode.get(call(libc.mount, b"none", os.getcwd().encode(), b"tmpfs", 0, None))
out["umount"] = errno.errorcode.get(call(libc.umount2, b"/proc", 2))
out["unshare_user"] = errno.errorcode.get(call(libc.unshare, 0x10000000))
out["unshare_mount"] = errno.errorcode.get(call(libc.unshare, 0x00020000))
out["mknod_char"] = attempt(lambda: os.mknod("dev-null-copy", 0o600 | stat.S_IFCHR, os.makedev(1, 3)))
out["mknod_fifo"] = attempt(lambda: os.mkfifo("a-fifo"))
out["ptrace_parent"] = errno.errorcode.get(call(libc.ptrace, 16, os.getppid(), None, None))  # PTRACE_ATTACH
out["chroot"] = attempt(lambda: os.chroot("."))
out["proc_sys_write"] = attempt(lambda: open("/proc/sys/kernel/hostname", "w").write("pwned"))
open("tool", "w").write("#!/bin/sh\nid\n")
out["chmod_setuid"] = attempt(lambda: os.chmod("tool", 0o4755))
out["chmod_setgid"] = attempt(lambda: os.chmod("tool", 0o2755))
try:
    fd = os.open("made-setuid", os.O_CREAT | os.O_WRONLY, 0o4755)
    out["open_setuid_mode"] = oct(os.fstat(fd).st_mode & 0o7777)
except OSError as exc:
    out["open_setuid_mode"] = None
    out["open_setuid_error"] = errno.errorcode.get(exc.errno)
out["mkdir_setgid"] = attempt(lambda: os.mkdir("sgid-dir", 0o2755))
read = []
for path in open("target.txt").read().split():  # the worst case: the agent knows the host path
    try:
        read.append(open(path).read())
    except OSError as exc:
        out.setdefault("answers_errors", []).append(errno.errorcode.get(exc.errno))
out["answers_read"] = read
out["environ"] = dict(os.environ)
out["mountinfo"] = open("/proc/self/mountinfo").read()
out["fds"] = {fd: os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
              if os.path.islink(f"/proc/self/fd/{fd}")}
out["cwd"] = os.getcwd()
out["cmdline"] = open("/proc/self/cmdline").read().split("\0")
out["parent_cmdline"] = open(f"/proc/{os.getppid()}/cmdline").read().split("\0") if os.getppid() > 0 else []
print(json.dumps(out))
'''


def _probe(tmp_path, mechanism):
    private = tmp_path / "data" / "private" / "answers.csv"
    return run_agent(tmp_path, mechanism, PROBE, files={"target.txt": f"{private} {private.parent}/../private/answers.csv"})


def test_agent_has_no_privilege(tmp_path, mechanism):
    run = _probe(tmp_path, mechanism)
    assert run.outcome.exit_code == 0, run.stderr[-3000:]
    report = run.report()
    assert report["uid"] != 0 and run.outcome.details["agent_uid"] == report["uid"]
    if harness_is_root():  # a uid of the run's own, from the range, under either mechanism
        assert report["uid"] == report["euid"] == report["gid"] >= 2000000000
    assert report["CapEff"] == report["CapPrm"] == report["CapBnd"] == report["CapAmb"] == "0000000000000000"
    assert report["NoNewPrivs"] == "1" and report["Seccomp"] == "2"
    for key in ("mount", "umount", "unshare_user", "unshare_mount", "ptrace_parent"):
        assert report[key] == "EPERM", (key, report[key])
    assert report["mknod_char"] == "EPERM" and report["mknod_fifo"] == "EPERM"
    assert report["chroot"] == "EPERM"
    assert report["proc_sys_write"] in ("EROFS", "EACCES", "EPERM"), report["proc_sys_write"]
    assert report["chmod_setuid"] == report["chmod_setgid"] == "EPERM"
    assert report["mkdir_setgid"] == "EPERM"
    # open(O_CREAT) asking for a setuid bit is refused by the filter
    assert report["open_setuid_mode"] is None and report["open_setuid_error"] == "EPERM"
    assert report["answers_read"] == [], "private answers were readable"
    assert set(report["answers_errors"]) == {"ENOENT" if mechanism == "bwrap" else "EACCES"}
    assert run.outcome.details["sandbox"] == mechanism
    leftovers = [p for p in (run.root / "workspace").rglob("*") if p.lstat().st_mode & (stat.S_ISUID | stat.S_ISGID)]
    assert leftovers == []


def test_no_host_run_paths_in_argv_or_environment(tmp_path, mechanism):
    """Neither the run folder nor the data root shows in the agent's argv, environment, mountinfo, open
    descriptors or working directory: bubblewrap binds the run's neutral stage at /rexmle/..., Landlock
    runs on the stage's own paths (runtime/staging.py)."""
    run = _probe(tmp_path, mechanism)
    report = run.report()
    private = str(tmp_path / "data" / "private")
    data_root = str(tmp_path / "data")
    blob = "".join(repr(report[k]) for k in ("environ", "cmdline", "mountinfo", "fds", "cwd", "parent_cmdline"))
    assert run.outcome.details["host_paths_hidden"] is True, run.outcome.details
    stage = run.outcome.details["stage"]
    assert Path(stage).name.startswith("rexmle-") and not Path(stage).exists()
    assert private not in blob and SECRET not in blob
    assert data_root not in blob and str(run.root) not in blob and str(tmp_path) not in blob
    if mechanism == "landlock":  # the agent was told the stage's paths, and ran there
        assert report["environ"]["HOME"] == f"{stage}/workspace" and report["cwd"] == f"{stage}/workspace"
    else:
        assert f"{stage}/workspace /rexmle/workspace " in report["mountinfo"]
    # and the run folder is whole again, with what the agent wrote
    assert (run.root / "workspace" / "tool").is_file() and not (run.root / "stage.json").exists()


def _marked(marker: str) -> list[str]:
    """Pids of live processes whose command line carries ``marker``."""
    alive = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker in open(f"/proc/{pid}/cmdline").read():
                alive.append(pid)
        except OSError:
            pass
    return alive


def _double_forked_sleeper(marker: str) -> str:
    """Agent code whose grandchild escapes into its own session, the classic way to outlive a kill."""
    return f'''
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", "{marker}"])
    os._exit(0)
time.sleep(600)
'''


def test_double_forked_sleeper_dies_at_the_time_limit(tmp_path, mechanism):
    marker = f"rexmle-sleeper-{os.getpid()}-{mechanism}"
    code = _double_forked_sleeper(marker)
    run = run_agent(tmp_path, mechanism, code, time_limit=3)
    assert run.outcome.timed_out and run.outcome.exit_code is None
    assert 3 <= run.outcome.duration < 12
    assert _marked(marker) == []


def test_agent_exit_takes_its_orphans_along(tmp_path, mechanism):
    """A run that ends normally must not leave a detached child behind either."""
    marker = f"rexmle-orphan-{os.getpid()}-{mechanism}"
    code = f'''
import os, sys
if os.fork() == 0:
    os.setsid()
    os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", "{marker}"])
print("{{}}")
'''
    run = run_agent(tmp_path, mechanism, code, time_limit=30)
    assert run.outcome.exit_code == 0 and not run.outcome.timed_out
    assert _marked(marker) == []


def test_kill_9_of_the_harness_takes_every_agent_process_along(tmp_path, mechanism):
    """The session itself dies hard (OOM killer, kill -9): no agent process may keep running."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    marker = f"rexmle-orphan9-{os.getpid()}-{mechanism}"
    agent = _double_forked_sleeper(marker)
    code_file = tmp_path / "agent-code.py"  # not on a command line: only the grandchild's argv has the marker
    code_file.write_text(agent)
    harness = ("import sys; from pathlib import Path; from tests.sandbox.conftest import run_agent; "
               "run_agent(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]).read_text(), time_limit=300)")
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-c", harness, str(tmp_path), mechanism, str(code_file)], cwd=repo,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not _marked(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _marked(marker), "the agent's grandchild never started"
        assert str(proc.pid) not in _marked(marker)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 15
        while _marked(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _marked(marker) == []
        assert staging.recover(tmp_path / "run")  # the stage it left goes home, as the next session does
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _marked(marker):
            os.kill(int(pid), signal.SIGKILL)


def test_a_harness_that_is_pid_1_still_runs_agents(tmp_path, mechanism):
    """``docker run image pytest ...`` makes the harness PID 1: the launcher must not take that for a dead
    parent (it compares with the pid it was started by, not with 1)."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and util-linux unshare to make the harness pid 1 of its own pid namespace")
    harness = ("import os, sys; from pathlib import Path; from tests.sandbox.conftest import run_agent; "
               "assert os.getpid() == 1, os.getpid(); "
               "run = run_agent(Path(sys.argv[1]), sys.argv[2], 'print(\"agent ran\")', time_limit=60); "
               "print('exit', run.outcome.exit_code, run.stdout.strip())")
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", harness,
                           str(tmp_path), mechanism], cwd=repo, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "exit 0 agent ran" in proc.stdout, proc.stdout + proc.stderr[-2000:]
