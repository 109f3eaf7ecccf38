"""The adversarial suite's machinery: every sandbox mechanism, as root and as an unprivileged user.

Mechanisms (``MECHANISMS``): the local runtime with bubblewrap, the local runtime with Landlock,
Docker, and Slurm: each run one job on the cluster ``.ci/slurm-setup.sh`` starts on this machine, whose
node hands it to the local runtime with bubblewrap (``--rexmle-sandbox=bwrap`` travels to the node).
Each test runs a real benchmark session in a subprocess (``python -m pytest --agent=command`` with the
attack agent of ``fixtures/agents/attacks/attack.py``) and then inspects what the session left:
result.json, run.json, the agent's own report, and the host.

Users: ``root`` runs the harness as this process's user (root on CI); ``unprivileged`` runs it as
uid/gid 65534 (``nobody``) with no supplementary groups — for Docker, with the ``docker`` group only,
as a non-root Docker user would. This machine's Python lives under ``/root`` (mode 0700), which uid
65534 cannot traverse. Rather than copying 1.5 GB of interpreter, the harness is started in a private
mount namespace (``unshare --mount``) where every non-traversable ancestor of the interpreter and of the
repository (here ``/root``) is covered by a 0755 tmpfs holding bind mounts of just those children
(``.pyenv``): the interpreter and its site-packages keep their real paths, nothing else of ``/root``
is visible, and the host's own mount table is untouched. ``setpriv`` then drops to 65534 with no
capabilities and ``no_new_privs`` unset (the sandbox sets it itself). Everything the session writes
(its folder, its synthetic-data cache) is owned by that uid. Slurm's jobs are started by slurmd as that
uid in the host's namespace, without the harness's view: where they cannot reach this Python (a pyenv
under a 0700 ``/root``), ``slurm-unprivileged`` skips and says why; a cluster whose nodes reach the
interpreter (``REXMLE_SLURM_PYTHON`` names one of theirs) runs it.

A session's outcome is computed once per (mechanism, user) and shared between xdist workers through a
file lock and a JSON file in the session's shared temporary folder, so ``-n 2`` never runs the same
attack twice.
"""

from __future__ import annotations

import grp
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest

from ..conftest import AGENTS, REPO, require_service
from ..docker.conftest import docker_client, test_image  # noqa: F401  (fixtures reused here)

UNPRIVILEGED = 65534
ATTACKS = AGENTS / "attacks"
MECHANISMS = ("bwrap", "landlock", "docker", "slurm")
USERS = ("root", "unprivileged")


def sandbox_option_known() -> bool:
    from pytest_rexmle.settings import OPTIONS

    return any(row[0] == "--rexmle-sandbox" for row in OPTIONS)


def limit_option_known() -> bool:
    from pytest_rexmle.settings import OPTIONS

    return any(row[0] == "--rexmle-limit" for row in OPTIONS)


def landlock_works() -> bool:
    try:
        import landlock  # noqa: F401  (landlockpy)
    except ImportError:
        try:
            import landlockpy  # noqa: F401
        except ImportError:
            return False
    return True


def untraversable_ancestors(paths: list[Path]) -> dict[Path, set[str]]:
    """For each folder that uid 65534 cannot enter (no o+x) on the way to ``paths``: the children needed."""
    needs: dict[Path, set[str]] = {}
    for path in paths:
        path = path.resolve()
        for parent in reversed(path.parents):
            if parent == Path("/"):
                continue
            mode = parent.stat().st_mode
            if not mode & stat.S_IXOTH:
                needs.setdefault(parent, set()).add(path.relative_to(parent).parts[0])
                break
    return needs


def harness_paths() -> list[Path]:
    """What a process running this harness must reach: the interpreter, its installation, the repository."""
    import site

    return [Path(sys.executable), Path(sys.prefix), Path(sys.base_prefix), REPO, *map(Path, site.getsitepackages())]


def unprivileged_prefix(groups: list[int]) -> list[str]:
    """The command prefix that runs the harness as 65534 with this Python reachable (see module doc)."""
    needs = untraversable_ancestors(harness_paths())
    lines = ["set -e", 'hold=$(mktemp -d /tmp/rexmle-hold.XXXXXX)']
    for i, (folder, children) in enumerate(sorted(needs.items())):
        f = shlex.quote(str(folder))
        lines += [f"mkdir -p \"$hold/{i}\"", f"mount --bind {f} \"$hold/{i}\"",
                  f"mount -t tmpfs -o mode=0755,size=1m rexmle-cover {f}"]
        for child in sorted(children):
            c = shlex.quote(child)
            lines += [f"if [ -d \"$hold/{i}/\"{c} ]; then mkdir {f}/{c}; else touch {f}/{c}; fi",
                      f"mount --bind \"$hold/{i}/\"{c} {f}/{c}"]
        lines.append(f"umount -l \"$hold/{i}\"")
    group_arg = f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups"
    lines.append(f'exec setpriv --reuid={UNPRIVILEGED} --regid={UNPRIVILEGED} {group_arg} --inh-caps=-all -- "$@"')
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", "\n".join(lines), "rexmle-as-nobody"]


def slurm_job_unreachable() -> str | None:
    """Why a Slurm job of the unprivileged harness cannot start this Python, or None when it can.

    The harness reaches this Python only inside its private mount namespace (see the module doc), but
    slurmd starts the job as uid 65534 in the host's namespace, where a folder like ``/root`` (0700) keeps
    the interpreter out of reach: the job's ``python`` fails with EACCES (and the Slurm runtime's start-up
    probe refuses such a session first, naming the interpreter)."""
    if os.geteuid() != 0:  # the unprivileged user is this user: the jobs run as it, with its own access
        return None
    blocked = untraversable_ancestors(harness_paths())
    if not blocked:
        return None
    where = ", ".join(f"{folder} (mode {folder.stat().st_mode & 0o777:04o})" for folder in sorted(blocked))
    return (f"slurmd starts each job as uid {UNPRIVILEGED} in the host's mount namespace, where {where} keeps "
            f"this Python ({Path(sys.executable).resolve()}) out of reach")


@dataclass
class Session:
    """What one benchmark subprocess left (JSON-serialisable, so xdist workers can share it)."""

    returncode: int
    output: str
    seconds: float
    maxrss_mb: float
    folder: str
    results: dict = field(default_factory=dict)     # task -> result.json of its newest run
    runs: dict = field(default_factory=dict)        # task -> run.json
    attack: dict = field(default_factory=dict)      # task -> workspace/attack.json
    run_dirs: dict = field(default_factory=dict)    # task -> run folder
    timed_out: bool = False


@dataclass
class Mechanism:
    name: str
    user: str
    base: Path                       # world-traversable folder for this (mechanism, user)
    cache: Path
    uid: int
    gid: int
    groups: list[int]
    image: str | None = None
    job_python: str | None = None    # Slurm: the interpreter the jobs start (REXMLE_SLURM_PYTHON), if not this one

    @property
    def id(self) -> str:
        return f"{self.name}-{self.user}"

    @property
    def default_network(self) -> str:
        """bubblewrap is attacked in the session default, ``bridge`` (its own namespace behind slirp4netns),
        where slirp4netns is installed; Landlock, whose ``bridge`` is the host's network, in ``none``."""
        if self.name == "docker" or (self.name in ("bwrap", "slurm") and shutil.which("slirp4netns")):
            return "bridge"
        return "none"

    def args(self, network: str | None = None) -> list[str]:
        if self.name == "docker":
            return ["-p", "tests.docker._wiring", "--rexmle-runtime=docker", "--rexmle-limit=cpus=1",
                    f"--rexmle-network={network or self.default_network}"]
        runtime, sandbox = ("slurm", "bwrap") if self.name == "slurm" else ("local", self.name)
        args = [f"--rexmle-runtime={runtime}", f"--rexmle-network={network or self.default_network}"]
        if sandbox_option_known():
            args.append(f"--rexmle-sandbox={sandbox}")
        if self.same_uid:  # refused by default (issue 23.3): the attacks run in the explicit, recorded mode
            args.append("--rexmle-unsafe-same-uid")
        return args

    @property
    def same_uid(self) -> bool:
        """Landlock with the harness as the user: the agent would run as the harness's own uid."""
        return self.name == "landlock" and (self.user == "unprivileged" or os.geteuid() != 0)

    def new_folder(self, label: str) -> Path:
        folder = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=self.base))
        folder.chmod(0o755)  # the unprivileged harness must reach its folder; runs and reports inside are 0700
        (folder / "home").mkdir()
        _own(folder, self.uid, self.gid)
        return folder

    def env(self, folder: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(folder / "home"), "LANG": "C.UTF-8",
               "REXMLE_CACHE_DIR": str(self.cache), "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1",
               "REXMLE_SESSION": f"security-{self.id}-{folder.name}"}
        if self.image:
            env["REXMLE_DOCKER_IMAGE"] = self.image
        if self.name == "slurm":  # poll often; a busy test cluster must not skip the shared-paths probe
            env.update(REXMLE_SLURM_POLL_SECONDS="1", REXMLE_SLURM_PROBE_SECONDS="600")
            if self.job_python:
                env["REXMLE_SLURM_PYTHON"] = self.job_python
        for name in ("REXMLE_REQUIRE_SANDBOX", "REXMLE_REQUIRE_LANDLOCK", "REXMLE_REQUIRE_DOCKER"):
            if name in os.environ:
                env[name] = os.environ[name]
        env.update(extra or {})
        return env

    def run(self, folder: Path, args: list[str], extra_env: dict[str, str] | None = None,
            timeout: float = 240) -> Session:
        """One benchmark session in ``folder``; never hangs the suite (killed at ``timeout``)."""
        argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q",
                "--rexmle-data=synthetic", *args]
        if self.user == "unprivileged" and os.geteuid() == 0:
            argv = unprivileged_prefix(self.groups) + argv
        start = time.monotonic()
        log = folder / "session.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(argv, cwd=folder, env=self.env(folder, extra_env), stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_cap_memory)
            timed_out = False
            deadline = start + timeout
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if time.monotonic() > deadline:
                    timed_out = True
                    os.killpg(proc.pid, 9)
                    pid, status, usage = os.wait4(proc.pid, 0)
                    break
                time.sleep(0.2)
        if self.name == "slurm":
            cancel_jobs(folder)
        proc.returncode = os.waitstatus_to_exitcode(status)
        session = Session(proc.returncode, log.read_text(errors="replace")[-20000:], time.monotonic() - start,
                          usage.ru_maxrss / 1024, str(folder), timed_out=timed_out)
        for task_dir in sorted((folder / ".rexmle" / "runs").glob("*")):
            runs = sorted(p for p in task_dir.glob("*/*/") if p.is_dir())
            if not runs:
                continue
            run = runs[-1]
            session.run_dirs[task_dir.name] = str(run)
            for name, target in (("result.json", session.results), ("run.json", session.runs),
                                 ("workspace/attack.json", session.attack)):
                try:
                    target[task_dir.name] = json.loads((run / name).read_text())
                except (OSError, ValueError):
                    pass
        return session


def slurm_job_ids(folder: Path) -> list[str]:
    """Every Slurm job the session in ``folder`` submitted, from its run folders: the id in ``run.json``
    and, for a session killed before it wrote that, submitit's ``<id>_submitted.pkl`` beside the spec."""
    ids = set()
    for run in (folder / ".rexmle" / "runs").glob("*/*/*/"):
        try:
            ids.add(str(json.loads((run / "run.json").read_text())["slurm"]["job_id"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass
        ids.update(p.name.split("_", 1)[0] for p in (run / "slurm").glob("*_submitted.pkl"))
    return sorted(ids)


def cancel_jobs(folder: Path) -> None:
    """A session that failed or was killed at its timeout leaves no job holding the one-node cluster
    (the session cancels its own jobs on a normal exit; ``kill -9`` at the timeout skips that)."""
    ids = slurm_job_ids(folder)
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True, check=False)


#: address-space cap of a benchmark session (and its local agents): a defence that is missing must fail
#: its test, not take the shared machine's memory (a /dev/zero read grows without bound)
SESSION_ADDRESS_SPACE = 8 << 30


def _cap_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (SESSION_ADDRESS_SPACE, SESSION_ADDRESS_SPACE))


def _own(path: Path, uid: int, gid: int) -> None:
    """Hand a folder this suite just created to the session's user (its children are its own)."""
    if os.geteuid() == 0:
        os.chown(path, uid, gid)
        for child in path.iterdir():
            os.lchown(child, uid, gid)


@pytest.fixture(scope="session")
def security_base():
    """A world-traversable folder for every session of the suite (pytest's own tmp is 0700 root)."""
    base = Path(tempfile.mkdtemp(prefix="rexmle-security-", dir="/tmp"))
    base.chmod(0o755)
    yield base
    # rm, not shutil.rmtree: the agents leave 1,500-level folders (rmtree recurses in Python)
    subprocess.run(["rm", "-rf", "--one-file-system", str(base)], check=False)


def _mechanism(request, security_base, name: str, user: str) -> Mechanism:
    if name == "slurm":
        request.getfixturevalue("needs_slurm")
    if name in ("bwrap", "landlock", "slurm"):
        if name != "landlock":  # the Slurm node isolates with bubblewrap
            require_service(shutil.which("bwrap") is not None, "REXMLE_REQUIRE_SANDBOX", "bubblewrap (bwrap)")
        else:
            if not sandbox_option_known():
                require_service(False, "REXMLE_REQUIRE_LANDLOCK",
                                "the Landlock sandbox (--rexmle-sandbox is not an option of this harness yet)")
            require_service(landlock_works(), "REXMLE_REQUIRE_LANDLOCK", "the Landlock binding (landlockpy)")
    image = None
    groups: list[int] = []
    if name == "docker":
        request.getfixturevalue("docker_client")
        image = request.getfixturevalue("test_image")
        if user == "unprivileged":
            try:
                groups = [grp.getgrnam("docker").gr_gid]
            except KeyError:
                groups = [os.stat("/var/run/docker.sock").st_gid]
    if user == "root":
        if os.geteuid() != 0:
            pytest.skip("the root variant needs the suite to run as root")
        uid = gid = 0
    else:
        uid, gid = (UNPRIVILEGED, UNPRIVILEGED) if os.geteuid() == 0 else (os.geteuid(), os.getegid())
        if os.geteuid() == 0:  # root becomes 65534 inside a private mount namespace (unprivileged_prefix)
            from ..procs import require_unshare

            require_unshare("--mount", "--propagation", "private")
    base = security_base / f"{name}-{user}"
    base.mkdir(exist_ok=True)
    cache = security_base / f"cache-{user}"  # one twin cache per user: generated once, not per mechanism
    cache.mkdir(exist_ok=True)
    _own(base, uid, gid)
    _own(cache, uid, gid)
    base.chmod(0o755)
    return Mechanism(name, user, base, cache, uid, gid, groups, image)


MATRIX = [pytest.param((m, u), id=f"{m}-{u}") for m in MECHANISMS for u in USERS]


@pytest.fixture(params=MATRIX)
def mechanism(request, security_base) -> Mechanism:
    name, user = request.param
    mechanism = _mechanism(request, security_base, name, user)
    if name == "slurm" and user == "unprivileged" and (why := slurm_job_unreachable()):
        if os.environ.get("REXMLE_SLURM_PYTHON"):  # the nodes' own interpreter for this harness
            mechanism.job_python = os.environ["REXMLE_SLURM_PYTHON"]
        else:
            pytest.skip(f"slurm-unprivileged cannot run here: {why}; set REXMLE_SLURM_PYTHON to an interpreter "
                        f"uid {UNPRIVILEGED} can start on the nodes, with this package and submitit importable")
    return mechanism


def shared_once(tmp_path_factory, key: str, compute) -> dict:
    """``compute()`` once per test session across xdist workers; its JSON result is shared."""
    from filelock import FileLock

    # under xdist every worker's basetemp sits in this run's folder; alone, the basetemp is this run's
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "rexmle-security"
    shared.mkdir(exist_ok=True)
    with FileLock(str(shared / f"{key}.lock")):
        path = shared / f"{key}.json"
        if path.exists():
            return json.loads(path.read_text())
        value = compute()
        path.write_text(json.dumps(value))
        return value


def session_dict(session: Session) -> dict:
    return asdict(session)
