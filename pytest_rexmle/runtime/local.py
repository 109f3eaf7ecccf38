"""The local runtime: the agent runs on this machine inside a bubblewrap sandbox.

The sandbox is built from an allow-list, not a deny-list: the agent sees the system and Python
installation read-only, the task's public data read-only, its workspace and submission folders
read-write, a private /tmp, and nothing else. In particular no data root, cache or runs folder is
mounted, so private answers are unreachable by any path; any of those that happens to lie under an
allowed folder is covered by an empty tmpfs. A new PID namespace means killing the sandbox's first
process kills every process the agent started, so a time limit leaves nothing behind.

Without bubblewrap the agent would see everything this user can read, so the runtime refuses to start
unless the user opts into ``unsafe=True`` (``--rexmle-unsafe-local``).
"""

from __future__ import annotations

import os
import shutil
import signal
import site
import subprocess
import sys
import time
from pathlib import Path

from ..task import tasks_root
from .base import SANDBOX_ROOT, Runtime, RunOutcome, RunSpec, RuntimeUnavailable

SYSTEM_DIRS = ("/usr", "/etc", "/opt")
MERGED_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
GPU_DEVICE_GLOBS = ("nvidia*", "dri")
KILL_GRACE_SECONDS = 3.0


def _is_under(path: Path, parent: Path) -> bool:
    try:
        path.resolve().relative_to(parent.resolve())
        return True
    except ValueError:
        return False


def python_roots() -> list[Path]:
    """Folders the agent's Python (and this package, for the validator) needs, outermost first."""
    import pytest_rexmle


    candidates = [Path(sys.base_prefix), Path(sys.prefix), Path(sys.exec_prefix), *map(Path, site.getsitepackages())]
    user_site = site.getusersitepackages()
    if user_site and Path(user_site).is_dir():
        candidates.append(Path(user_site))
    package_dir = Path(pytest_rexmle.__file__).resolve().parent
    candidates += [package_dir, tasks_root().resolve()]
    roots: list[Path] = []
    for path in sorted({c.resolve() for c in candidates if c.exists()}, key=lambda p: len(p.parts)):
        if not any(_is_under(path, r) for r in roots) and not any(_is_under(path, Path(s)) for s in SYSTEM_DIRS):
            roots.append(path)
    return roots


class LocalRuntime(Runtime):
    name = "local"

    def __init__(self, unsafe: bool = False, bwrap: str | None = None, **_: object) -> None:
        self.unsafe = unsafe
        self.bwrap = bwrap or shutil.which("bwrap")

    @classmethod
    def from_settings(cls, settings) -> "LocalRuntime":
        return cls(unsafe=settings.unsafe_local)

    # -- availability ----------------------------------------------------------------------------------
    def check(self) -> None:
        if self.bwrap or self.unsafe:
            return
        raise RuntimeUnavailable(
            "the local runtime needs bubblewrap (`apt-get install bubblewrap`) to hide the private answers "
            "from the agent; pass --rexmle-unsafe-local to run without isolation at your own risk")

    @property
    def sandboxed(self) -> bool:
        return self.bwrap is not None and not self.unsafe

    def contract_paths(self, spec: RunSpec) -> dict[str, str]:
        if not self.sandboxed:
            return {"data": str(spec.data_dir), "workspace": str(spec.workspace),
                    "submission": str(spec.submission), "instructions": str(spec.instructions)}
        return {"data": str(SANDBOX_ROOT / "data"), "workspace": str(SANDBOX_ROOT / "workspace"),
                "submission": str(SANDBOX_ROOT / "submission"), "instructions": str(SANDBOX_ROOT / "instructions.md")}

    # -- sandbox construction ------------------------------------------------------------------------
    def bwrap_argv(self, spec: RunSpec) -> list[str]:
        args = [self.bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc",
                "--unshare-uts", "--unshare-cgroup-try", "--hostname", "rexmle-agent", "--clearenv",
                # fresh /proc, /dev and /tmp first, so the binds below may sit inside /tmp
                "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp"]
        for d in SYSTEM_DIRS:
            if os.path.isdir(d):
                args += ["--ro-bind", d, d]
        for d in MERGED_DIRS:
            if os.path.islink(d):
                args += ["--symlink", os.readlink(d), d]
            elif os.path.isdir(d):
                args += ["--ro-bind", d, d]
        bound = [Path(d) for d in SYSTEM_DIRS if os.path.isdir(d)]
        for root in python_roots():
            args += ["--ro-bind", str(root), str(root)]
            bound.append(root)
        for hidden in spec.hidden:
            if hidden.exists() and any(_is_under(hidden, b) for b in bound):
                args += ["--tmpfs", str(hidden.resolve())]
        if spec.gpus:
            for pattern in GPU_DEVICE_GLOBS:
                for dev in sorted(Path("/dev").glob(pattern)):
                    args += ["--dev-bind-try", str(dev), str(dev)]
        inside = self.contract_paths(spec)
        args += ["--dir", str(SANDBOX_ROOT),
                 "--ro-bind", str(spec.data_dir), inside["data"],
                 "--bind", str(spec.workspace), inside["workspace"],
                 "--bind", str(spec.submission), inside["submission"],
                 "--ro-bind", str(spec.instructions), inside["instructions"]]
        cwd = Path(inside["workspace"])
        if spec.cwd is not None:
            cwd = cwd / spec.cwd.relative_to(spec.workspace)
        args += ["--remount-ro", "/", "--chdir", str(cwd)]
        for key, value in self.environment(spec).items():
            args += ["--setenv", key, value]
        return args + ["--", *spec.argv]

    def environment(self, spec: RunSpec) -> dict[str, str]:
        bin_dir = str(Path(sys.executable).parent)
        env = {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1",
               "HOME": self.contract_paths(spec)["workspace"], "TMPDIR": "/tmp",
               # the validator inside needs the same (read-only) task registry as the harness
               "REXMLE_TASKS_DIR": str(tasks_root().resolve())}
        env.update(spec.env)
        return env

    # -- running ---------------------------------------------------------------------------------------
    def run(self, spec: RunSpec) -> RunOutcome:
        self.check()
        spec.logs.mkdir(parents=True, exist_ok=True)
        stdout_path, stderr_path = spec.logs / "agent.stdout.log", spec.logs / "agent.stderr.log"
        if self.sandboxed:
            argv, env, cwd = self.bwrap_argv(spec), {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, None
        else:
            argv, cwd = spec.argv, str(spec.cwd or spec.workspace)
            env = {**os.environ, **self.environment(spec), "HOME": str(spec.workspace)}
        start = time.monotonic()
        with open(stdout_path, "ab") as out, open(stderr_path, "ab") as err:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                                    start_new_session=True)
            timed_out = False
            try:
                proc.wait(timeout=spec.time_limit)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                # On a time limit, an interrupt or any error: the whole process group goes.
                self._kill_group(proc)
        duration = time.monotonic() - start
        return RunOutcome(None if timed_out else proc.returncode, timed_out, duration, stdout_path, stderr_path,
                          details={"sandbox": "bwrap" if self.sandboxed else "none"})

    @staticmethod
    def _kill_group(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=KILL_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
