"""Docker's seccomp filter comes from the engine, not from the image (issue #38, item 2).

The profile's content is checked by evaluating it as runc and libseccomp do (no engine needed); the attack runs
an agent in an image whose ``/bin/sh`` and ``python3`` skip any filter setup, on the real engine, and looks at
what the kernel answers inside and what run.json records.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from pytest_rexmle.runtime import docker_seccomp
from pytest_rexmle.runtime.docker import DockerRuntime, DockerSettings, _process_seccomp, seccomp_in_force
from pytest_rexmle.runtime.sandbox.seccomp import (
    CLONE_NAMESPACE_FLAGS,
    CONTAINED_CALLS,
    DENIED,
    MODE_ARGS,
)

from ..conftest import require_service
from .conftest import session_containers

ALLOW = "allow"
CLONE_NEWUSER, SIGCHLD, CLONE_VM, CLONE_THREAD = 0x10000000, 17, 0x100, 0x10000


def _holds(cond: dict, args: list[int]) -> bool:
    value = args[cond["index"]] if cond["index"] < len(args) else 0
    if cond["op"] == "SCMP_CMP_MASKED_EQ":
        return value & cond["value"] == cond.get("valueTwo", 0)
    if cond["op"] == "SCMP_CMP_EQ":
        return value == cond["value"]
    raise AssertionError(f"the profile uses {cond['op']}, which this evaluator does not model")


def decide(profile: dict, name: str, *args: int) -> str | int:
    """What the engine answers ``name(*args)``: ``allow``, or the errno. Every matching rule must agree: the
    profile never relies on a precedence between actions."""
    answers = set()
    for rule in profile["syscalls"]:
        if name in rule["names"] and all(_holds(c, list(args)) for c in rule.get("args", [])):
            answers.add(ALLOW if rule["action"] == "SCMP_ACT_ALLOW" else rule["errnoRet"])
    assert len(answers) <= 1, f"{name}{args}: rules disagree: {answers}"
    return answers.pop() if answers else profile["defaultErrnoRet"]


@pytest.fixture(scope="module")
def profile() -> dict:
    return json.loads(docker_seccomp.profile_json())


def test_the_profile_refuses_what_the_project_filter_refuses(profile):
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO" and profile["defaultErrnoRet"] == errno.ENOSYS
    assert profile["architectures"] == ["SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"]  # no i386, no x32
    for name in DENIED:
        expected = ALLOW if name in CONTAINED_CALLS else errno.EPERM
        assert decide(profile, name) == expected, name
    assert decide(profile, "io_uring_setup", 4, 0) == errno.EPERM and decide(profile, "keyctl") == errno.EPERM
    assert decide(profile, "clone3") == errno.ENOSYS and decide(profile, "openat2") == errno.ENOSYS
    # what Docker's default refuses a container without capabilities, beyond the project's table
    assert {decide(profile, name) for name in ("mbind", "fanotify_init", "process_madvise", "_sysctl")} == {errno.EPERM}
    # newer than the table, or unknown: ENOSYS, as an older kernel answers
    assert decide(profile, "open_tree_attr") == errno.ENOSYS and decide(profile, "no_such_call") == errno.ENOSYS
    # what every agent needs
    assert {decide(profile, name) for name in ("read", "mmap", "execve", "futex", "ioctl", "ptrace", "statx",
                                               "memfd_create", "rseq", "io_submit", "mseal")} == {ALLOW}


def test_argument_rules(profile):
    vsock, alg, inet, unix, high = 40, 38, 2, 1, 1 << 32
    for call in ("socket", "socketpair"):
        assert decide(profile, call, vsock, 1, 0) == errno.EAFNOSUPPORT
        assert decide(profile, call, alg, 5, 0) == errno.EAFNOSUPPORT
        # the kernel reads the family as an int: garbage in the high bits still names AF_VSOCK
        assert decide(profile, call, high | vsock, 1, 0) == errno.EAFNOSUPPORT
        assert {decide(profile, call, family, 1, 0) for family in (unix, inet, 10, 16, 17, 37, 39, 41, 45, 63)} == {ALLOW}
        assert decide(profile, call, high | inet, 1, 0) == errno.ENOSYS  # allowed families need clean high bits
    assert decide(profile, "clone", SIGCHLD) == ALLOW
    assert decide(profile, "clone", CLONE_VM | CLONE_THREAD | SIGCHLD) == ALLOW
    for flag in (1 << i for i in range(32) if CLONE_NAMESPACE_FLAGS & (1 << i)):
        assert decide(profile, "clone", flag | SIGCHLD) == errno.EPERM, hex(flag)
    for name, (_numbers, index) in MODE_ARGS.items():
        args = [0] * (index + 1)
        assert decide(profile, name, *args) == ALLOW, name
        for mode, expected in ((0o755, ALLOW), (0o4755, errno.EPERM), (0o2755, errno.EPERM), (0o6755, errno.EPERM)):
            args[index] = mode
            assert decide(profile, name, *args) == expected, (name, oct(mode))
    assert decide(profile, "personality", 0xFFFFFFFF) == ALLOW and decide(profile, "personality", 0x0040000) == errno.ENOSYS


def test_no_rule_compares_one_argument_twice(profile):
    """runc turns two comparisons of one argument into two rules, ORed: ``a > 40 and a < 64`` would allow all."""
    for rule in profile["syscalls"]:
        indexes = [c["index"] for c in rule.get("args", [])]
        assert len(indexes) == len(set(indexes)), rule


def test_every_known_syscall_has_an_answer_and_the_digest_is_stable(profile):
    named = {name for rule in profile["syscalls"] for name in rule["names"]}
    assert set(docker_seccomp.KNOWN_SYSCALLS) <= named
    assert docker_seccomp.digest() == docker_seccomp.digest() and docker_seccomp.digest().startswith("sha256:")
    assert docker_seccomp.security_opt() == "seccomp=" + docker_seccomp.profile_json()


def test_create_kwargs_carry_the_profile(tmp_path):
    from .test_docker_runtime import _spec

    rt = DockerRuntime(settings=DockerSettings(image="img:1"), session="s")
    kw = rt.create_kwargs(_spec(tmp_path), "img:1", (1000, 1000))
    assert kw["security_opt"] == ["no-new-privileges:true", docker_seccomp.security_opt()]
    # the image's shell and python no longer stand between the agent and its filter
    assert kw["command"] == ["timeout", "-s", "KILL", "70", "python3", "-m", "pytest_rexmle.agents.sample_main"]


INSTALL = ("import sys, time; from pytest_rexmle.runtime.sandbox.seccomp import build_filter, install; "
           "install(build_filter()); print('ready', flush=True); time.sleep(30)")


def test_the_host_reads_a_process_filter_from_proc():
    """What run.json's ``first_process`` reports, checked on real processes: one that installs the project's
    filter shows one filter more than one that does not."""
    plain = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(30)"],
                             stdout=subprocess.PIPE)
    filtered = subprocess.Popen([sys.executable, "-c", INSTALL], stdout=subprocess.PIPE)
    try:
        assert plain.stdout.readline() == b"ready\n" and filtered.stdout.readline() == b"ready\n"
        before, after = _process_seccomp(plain.pid), _process_seccomp(filtered.pid)
    finally:
        for proc in (plain, filtered):
            proc.kill()
            proc.wait()
    assert after["mode"] == "filter" and after["filters"] == (before["filters"] or 0) + 1
    assert "could not be read" in _process_seccomp(plain.pid)["unobserved"]  # gone now


def test_a_pid_outside_the_container_is_not_read_as_its_process():
    """The engine's pid is its PID namespace's: where this harness sees another process under that number (it
    runs in a container itself), that stranger's seccomp state must not be recorded as the container's."""
    record = seccomp_in_force({"Id": "f" * 64, "State": {"Pid": os.getpid()}, "HostConfig": {"SecurityOpt": []}})
    assert "is not the container's process" in record["first_process"]["unobserved"]
    assert record["engine_holds_profile"] is False and record["installed_by"] == "engine"


# -- the attack, on the real engine ----------------------------------------------------------------------------
BASE_IMAGE = "rexmle/test-base:latest"
#: a /bin/sh and a python3 that drop the harness's filter bootstrap (``sh -c SCRIPT BOOTSTRAP PROGRAM argv...``,
#: ``python3 -I -c BOOTSTRAP PROGRAM argv...``) and run the agent's command as it is; otherwise the real ones
HOSTILE_SH = textwrap.dedent("""\
    #!/bin/dash.real
    if [ "$1" = "-c" ] && [ $# -ge 4 ]; then case "$3" in *prctl*) shift 4; echo hostile-sh >/tmp/hostile; exec "$@";; esac; fi
    exec /bin/dash.real "$@"
    """)
HOSTILE_PYTHON = textwrap.dedent("""\
    #!/bin/dash.real
    if [ "$1" = "-I" ] && [ "$2" = "-c" ]; then case "$3" in *prctl*) shift 4; echo hostile-python >/tmp/hostile; exec "$@";; esac; fi
    exec /usr/bin/python3.real "$@"
    """)
DOCKERFILE = f"""FROM {BASE_IMAGE}
COPY sh python3 /opt/hostile/
RUN cp /bin/dash /bin/dash.real && cp "$(readlink -f /usr/bin/python3)" /usr/bin/python3.real \\
 && chmod 755 /opt/hostile/sh /opt/hostile/python3 \\
 && ln -sf /opt/hostile/sh /bin/sh && ln -sf /opt/hostile/python3 /usr/bin/python3
"""

ATTACK = r"""
import ctypes, errno, json, subprocess, sys, time
time.sleep(1)  # an agent runs for minutes: the host looks at its container while it runs
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    ctypes.set_errno(0)
    done = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return "ok" if done >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
params = ctypes.create_string_buffer(120)
status = dict(l.split(':', 1) for l in open('/proc/self/status') if l.startswith('Seccomp'))
print(json.dumps({"vsock": call(41, 40, 1, 0), "vsock_high_bits": call(41, 40 | 1 << 32, 1, 0),
                  "io_uring_setup": call(425, 4, ctypes.addressof(params)), "inet": call(41, 2, 1, 0),
                  "newer_than_the_table": call(463, -1, 0), "mount": call(165, 0, 0, 0, 0, 0),
                  "setuid_bit": call(90, ctypes.addressof(ctypes.create_string_buffer(b"/tmp")), 0o4777),
                  "child": subprocess.run([sys.executable, "-c", "import threading, os; t = threading.Thread("
                                           "target=os.getpid); t.start(); t.join(); print(oct(os.stat('.').st_mode))"],
                                          capture_output=True, text=True).stdout.strip(),
                  "seccomp": status["Seccomp"].strip(), "filters": int(status["Seccomp_filters"])}))
"""


@pytest.fixture(scope="module")
def hostile_image(docker_client, tmp_path_factory) -> str:
    """``rexmle/test-base`` with the hostile shell and python; built locally, nothing pulled."""
    import docker.errors

    try:
        docker_client.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        require_service(False, "REXMLE_REQUIRE_DOCKER", f"the offline image {BASE_IMAGE} (.ci/build-test-image.sh)")
    context = tmp_path_factory.mktemp("hostile-image")
    (context / "Dockerfile").write_text(DOCKERFILE)
    (context / "sh").write_text(HOSTILE_SH)
    (context / "python3").write_text(HOSTILE_PYTHON)
    tag = f"rexmle/test-hostile-shell:{uuid.uuid4().hex[:8]}"
    docker_client.images.build(path=str(context), tag=tag, rm=True, pull=False)
    yield tag
    docker_client.images.remove(tag, force=True)


def _spec(tmp_path: Path, argv: list[str]):
    from .test_docker_lifecycle import _tiny_spec

    return _tiny_spec(tmp_path, argv, network="bridge")


def _x86_64(docker_client) -> bool:
    return (docker_client.info().get("Architecture") or "") in ("x86_64", "amd64")


def test_an_image_that_skips_the_filter_setup_still_runs_under_it(docker_client, hostile_image, session_id, tmp_path):
    if not _x86_64(docker_client):
        pytest.skip("the attack's syscall numbers are x86_64's")
    rt = DockerRuntime(image=hostile_image, session=session_id, settings=DockerSettings(image=hostile_image))
    outcome = rt.run(_spec(tmp_path, ["python3", "-c", ATTACK]))
    assert outcome.exit_code == 0, outcome.stderr.read_text()
    seen = json.loads(outcome.stdout.read_text())
    # the hypervisor's socket family, even with the high bits Docker's own `family != 40` rule misses, and io_uring
    assert seen["vsock"] == "EAFNOSUPPORT" and seen["vsock_high_bits"] == "EAFNOSUPPORT", seen
    assert seen["io_uring_setup"] == "EPERM" and seen["mount"] == "EPERM" and seen["setuid_bit"] == "EPERM", seen
    assert seen["newer_than_the_table"] == "ENOSYS", seen  # as an older kernel answers
    assert seen["child"].startswith("0o40"), seen  # threads and subprocesses still work (clone3: ENOSYS, clone ok)
    assert seen["inet"] == "ok" and seen["seccomp"] == "2", seen  # the network still works: not a blanket refusal
    # run.json's record is the filter the agent runs under: one filter, the engine's, seen from the host
    record = outcome.details["seccomp"]
    assert record["first_process"] == {"mode": "filter", "filters": seen["filters"]} and seen["filters"] == 1
    assert record["engine_holds_profile"] is True and record["digest"] == docker_seccomp.digest()
    # logs/docker.json names the profile by its digest instead of carrying its 12 kB of JSON
    security_opt = json.loads((tmp_path / "logs" / "docker.json").read_text())["security_opt"]
    assert security_opt == ["no-new-privileges:true", f"seccomp={docker_seccomp.PROFILE_NAME} ({docker_seccomp.digest()})"]
    assert session_containers(docker_client, session_id) == []


def test_the_hostile_image_is_hostile(docker_client, hostile_image):
    """The attack's premise: the image's shell really skips a filter bootstrap handed to it."""
    for argv, marker in ((["/bin/sh", "-c", "script", "libc.prctl(22, ...)", "program"], "hostile-sh"),
                         (["python3", "-I", "-c", "libc.prctl(22, ...)", "program"], "hostile-python")):
        out = docker_client.containers.run(hostile_image, [*argv, "cat", "/tmp/hostile"], remove=True)
        assert out.decode().strip() == marker


def test_a_container_running_without_a_filter_is_stopped(docker_client, session_id):
    """The guard behind the record: were the engine to ignore the profile, the kernel's report of the
    container's first process says so, and the run stops there (here: a container made unconfined on purpose)."""
    from pytest_rexmle.runtime.base import RuntimeUnavailable

    try:
        docker_client.images.get(BASE_IMAGE)
    except Exception:
        require_service(False, "REXMLE_REQUIRE_DOCKER", f"the offline image {BASE_IMAGE}")
    rt = DockerRuntime(image=BASE_IMAGE, session=session_id, settings=DockerSettings(image=BASE_IMAGE))
    container = docker_client.containers.run(BASE_IMAGE, ["sleep", "60"], detach=True, init=True,
                                             security_opt=["seccomp=unconfined"], labels={"rexmle.session": session_id})
    try:
        with pytest.raises(RuntimeUnavailable, match="without its seccomp filter .*mode 'disabled'"):
            rt._seccomp_checked(container)
        container.reload()
        assert container.status in ("exited", "dead")  # killed before an agent could go on
    finally:
        container.remove(force=True)


def test_an_engine_refusal_at_create_is_a_sentence(docker_client, tmp_path, session_id):
    from pytest_rexmle.runtime.base import RuntimeUnavailable

    rt = DockerRuntime(image=BASE_IMAGE, session=session_id, settings=DockerSettings(image=BASE_IMAGE))
    with pytest.raises(RuntimeUnavailable, match="^Docker could not create the agent's container: invalid --security-opt"):
        rt._create({"image": BASE_IMAGE, "command": ["true"], "security_opt": ["seccomp"],
                     "labels": {"rexmle.session": session_id}})
    assert session_containers(docker_client, session_id) == []


def test_another_abi_meets_the_bad_architecture_action(docker_client, session_id):
    """Only native 64-bit ABIs are in the profile: an x32 syscall (the x86_64 number with bit 30 set, which
    Docker's default passes on to the kernel) kills the process with SIGSYS, as the project's filter does."""
    import docker.errors

    if not _x86_64(docker_client):
        pytest.skip("x32 is an x86_64 ABI")
    try:
        docker_client.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        require_service(False, "REXMLE_REQUIRE_DOCKER", f"the offline image {BASE_IMAGE}")
    x32_getpid = "import ctypes; ctypes.CDLL(None).syscall(ctypes.c_long(0x40000000 | 39)); print('survived')"
    container = docker_client.containers.run(BASE_IMAGE, ["python3", "-c", x32_getpid], detach=True, user="1000:1000",
                                             cap_drop=["ALL"], security_opt=DockerRuntime.security_opt(),
                                             labels={"rexmle.session": session_id})
    try:
        assert container.wait(timeout=60)["StatusCode"] == 128 + 31  # SIGSYS
        assert b"survived" not in container.logs()
    finally:
        container.remove(force=True)


#: a first process that gets its filter a moment after it started, as runc's does (it installs the filter right
#: before it executes the container's program, after the engine already reports the container started)
LATE_FILTER = r"""
import base64, ctypes, sys, time
time.sleep(0.5)
program = base64.b64decode(sys.argv[1])
class Prog(ctypes.Structure):
    _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.c_void_p)]
libc = ctypes.CDLL(None, use_errno=True)
buffer = ctypes.create_string_buffer(program, len(program))
assert libc.prctl(38, 1, 0, 0, 0) == 0
assert libc.prctl(22, 2, ctypes.byref(Prog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))), 0, 0) == 0
time.sleep(30)
"""


def test_a_filter_installed_just_after_the_start_is_waited_for(docker_client, session_id):
    """The guard does not stop a run in the moment between the engine's "started" and runc's filter: a first
    process (unconfined here, so that only its own late filter counts) that installs one after 0.5 s is seen
    with it."""
    import base64
    import time

    from pytest_rexmle.runtime.sandbox.seccomp import build_filter

    try:
        docker_client.images.get(BASE_IMAGE)
    except Exception:
        require_service(False, "REXMLE_REQUIRE_DOCKER", f"the offline image {BASE_IMAGE}")
    program = base64.b64encode(build_filter(allow_tracing=True)).decode()
    container = docker_client.containers.run(BASE_IMAGE, ["python3", "-c", LATE_FILTER, program], detach=True,
                                             security_opt=["seccomp=unconfined"], labels={"rexmle.session": session_id})
    rt = DockerRuntime(image=BASE_IMAGE, session=session_id, settings=DockerSettings(image=BASE_IMAGE))
    try:
        start = time.monotonic()
        record = rt._seccomp_checked(container)
        assert record["first_process"] == {"mode": "filter", "filters": 1}
        assert time.monotonic() - start < 5
    finally:
        container.remove(force=True)
