"""Which sandbox works here, found by running a tiny sandboxed command — not by looking for a binary.

A bubblewrap binary may exist and still fail (no user namespaces in an unprivileged container, a
seccomp profile refusing ``unshare``, AppArmor's userns restriction); Landlock may be compiled out or
left off the ``lsm=`` list. So each mechanism is tried once per process with the same launcher the
runs use, and the answer (with the error text when it fails) is cached.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .bwrap import MERGED_DIRS, SYSTEM_DIRS, args_blob, bwrap_args, python_roots
from .fds import data_fd, python_command
from .identity import Identity, become
from .landlock import LandlockView, available

MECHANISMS = ("bwrap", "landlock")
_cache: dict[str, Probe] = {}


@dataclass(frozen=True)
class Probe:
    mechanism: str
    works: bool
    reason: str


NO_BWRAP = Probe("bwrap", False, "bubblewrap is not installed (apt-get install bubblewrap)")

def probe(mechanism: str, bwrap: str | None = None) -> Probe:
    key = f"{mechanism}:{bwrap}"
    if key not in _cache:
        _cache[key] = _probe_bwrap(bwrap) if mechanism == "bwrap" else _probe_landlock()
    return _cache[key]


def pick(choice: str, bwrap: str | None = None) -> tuple[str | None, list[Probe]]:
    """The mechanism to use for ``choice`` (auto, bwrap or landlock) and every probe tried."""
    order = MECHANISMS if choice == "auto" else (choice,)
    tried = []
    for mechanism in order:
        result = probe(mechanism, bwrap)
        tried.append(result)
        if result.works:
            return mechanism, tried
    return None, tried


def _tiny_command() -> list[str]:
    return [sys.executable, "-I", "-S", "-c", "import os; os.stat('/')"]


def _probe_bwrap(binary: str | None) -> Probe:
    binary = binary or shutil.which("bwrap")
    if not binary:
        return NO_BWRAP
    with tempfile.TemporaryDirectory(prefix="rexmle-probe-") as tmp:
        args = bwrap_args(python_roots=python_roots(), binds=[], tmp=Path(tmp), hidden=(), env={},
                          gpus=(), network=[], user_namespace=os.geteuid() != 0, seccomp_fd=None)
        read = data_fd(args_blob(args), "bwrap-args")
        try:
            done = subprocess.run([binary, "--args", str(read), "--", *_tiny_command()], pass_fds=(read,), capture_output=True,
                                  stdin=subprocess.DEVNULL, timeout=60)
        except (OSError, subprocess.SubprocessError) as exc:
            return Probe("bwrap", False, f"bubblewrap failed to start: {exc}")
        finally:
            os.close(read)
    if done.returncode != 0:
        return Probe("bwrap", False, f"bubblewrap cannot create its namespaces here: {_last_error(done)}")
    return Probe("bwrap", True, "bubblewrap works")


def unprivileged_bwrap(binary: str | None = None) -> Probe:
    """Whether bubblewrap works started as an ordinary uid (65534, as a run's own uid would start it) with a
    user namespace of its own: how a root harness runs an image agent (see :mod:`.hostdrop`). Cached."""
    key = f"bwrap-unprivileged:{binary}"
    if key not in _cache:
        _cache[key] = _probe_unprivileged_bwrap(binary or shutil.which("bwrap"))
    return _cache[key]


def _probe_unprivileged_bwrap(binary: str | None) -> Probe:
    if not binary:
        return NO_BWRAP
    args = ["--unshare-user", "--unshare-pid", "--ro-bind", "/usr", "/usr", "--proc", "/proc"]
    for link in ("/bin", "/lib", "/lib64"):  # a merged /usr's links; a separate folder is bound as it is
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            args += ["--ro-bind", link, link]
    nobody = Identity(65534, 65534)
    try:
        done = subprocess.run([binary, *args, "--", "true"], capture_output=True, stdin=subprocess.DEVNULL,
                              timeout=60, cwd="/", preexec_fn=(lambda: become(nobody)) if os.geteuid() == 0 else None)
    except (OSError, subprocess.SubprocessError) as exc:
        return Probe("bwrap", False, f"bubblewrap failed to start as an ordinary uid: {exc}")
    if done.returncode != 0:
        return Probe("bwrap", False, f"bubblewrap started as an ordinary uid cannot create its user namespace: "
                                     f"{_last_error(done)}")
    return Probe("bwrap", True, "bubblewrap works as an ordinary uid")


def _probe_landlock() -> Probe:
    ok, reason = available()
    if not ok:
        return Probe("landlock", False, reason)

    with tempfile.TemporaryDirectory(prefix="rexmle-probe-") as tmp:
        view = LandlockView(read_exec=tuple([*SYSTEM_DIRS, *MERGED_DIRS, *map(str, python_roots())]),
                            read_write=(tmp,))
        config = {"mode": "supervise", "argv": _tiny_command(), "env": {}, "cwd": tmp, "uid": os.getuid(),
                  "gid": os.getgid(), "rlimits": {}, "network": "host", "landlock": view.to_json()}
        try:
            read = data_fd(json.dumps(config).encode(), "launcher-config")
            try:
                done = subprocess.run(launcher_command(read), pass_fds=(read,), capture_output=True,
                                      stdin=subprocess.DEVNULL, timeout=60, env=launcher_env())
            finally:
                os.close(read)
        except (OSError, subprocess.SubprocessError) as exc:
            return Probe("landlock", False, f"the Landlock launcher failed to start: {exc}")
    if done.returncode != 0:
        return Probe("landlock", False, f"Landlock sandbox failed: {_last_error(done)}")
    return Probe("landlock", True, reason)


def _last_error(done: subprocess.CompletedProcess) -> str:
    """A failed probe's reason: the last line of its stderr, else its exit status."""
    error = done.stderr.decode(errors="replace").strip().splitlines()
    return error[-1] if error else str(done.returncode)


def launcher_command(fd: int) -> list[str]:
    """The launcher, reading its configuration from descriptor ``fd``."""
    return python_command("from pytest_rexmle.runtime.sandbox.launcher import main; main(sys.argv)", str(fd))


def launcher_env() -> dict[str, str]:
    """The launcher's own environment (the agent's is in its config): just enough to start Python."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
