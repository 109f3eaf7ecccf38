"""The runtime conformance suite: the attack classes every runtime must stop, run through its own interface.

Why through :class:`~pytest_rexmle.runtime.base.Runtime` and not a benchmark session: a third-party
runtime (a cloud VM, Kubernetes, another container engine) implements ``launch``/``run`` on a
:class:`RunSpec`, and that is the whole promise the harness relies on: the agent sees its data
read-only, writes only its workspace and submission, never reads what ``spec.hidden`` names or the
host's keys, reaches the network only through the session's gateway, stays inside its limits, and
nothing of it outlives the run. Each check plants a secret or a target on the host, lets the probe
agent (``probe.py``, standard library only) try, and then judges from the host's side.

Two runs per check-up, launched together (a batch runtime queues both): ``probe`` under the gateway
network (answers, writes, keys, network, leftovers) and ``limits`` under tight limits (processes and
memory). Then, for a runtime that runs images from this machine's image cache (the local runtime), a third:
``interpreter``, an image whose ``python3`` is hostile (:mod:`.hostile_image`), which must observe the
run's uid, no capability, ``no_new_privs``, the seccomp filter and the run's rlimits, and leave nothing
with a file capability or an immutable flag.
"""

from __future__ import annotations

import dataclasses
import http.server
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest_rexmle

from ..limits import Limits, format_size
from ..paths import cache_home_at
from ..runtime.base import RunHandle, RunOutcome, RunSpec, Runtime, RuntimeUnavailable
from ..runtime.sandbox.gpu_devices import FAKE_ENV

#: the checks, in the order they are reported
CHECKS = ("answers", "writes", "metadata", "leftovers", "keys", "network", "limits", "gpus", "interpreter")
PROBE = Path(__file__).with_name("probe.py")
#: the harness's own code, which the probe tries to write into
PACKAGE = Path(pytest_rexmle.__file__).resolve().parent
PROBE_SECONDS = 180.0
LIMITS_SECONDS = 120.0
GPU_SECONDS = 60.0
#: the limits run's caps: the fork bomb stops by itself at FORKS, the hog at HOG_MB
LIMITS = Limits(memory=256 << 20, processes=64)
#: the interpreter run's limits: values no default has, so that seeing them proves they were set
INTERPRETER_LIMITS = Limits(open_files=321, file_size=96 << 20)
INTERPRETER_SECONDS = 120.0
HOSTILE_TAG = "rexmle-selfcheck/hostile-python:1"
FORKS, HOG_MB = 400, 1024
ANSWERS_NAME, HIDDEN_NAME, HIDDEN_FILE = "answers.csv", ".cache-notes", "grader-notes.txt"
KEY_NAME = "OPENAI_API_KEY"


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict and the reason, in words a runtime's author can act on."""

    name: str
    passed: bool
    why: str

    def line(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'} {self.name}: {self.why}"


@dataclass
class Plant:
    """What the suite planted on the host for one check-up: folders, secrets and the host's service."""

    root: Path
    marker: str = field(default_factory=lambda: f"rexmle-selfcheck-{uuid.uuid4().hex[:12]}")
    answers_secret: str = field(default_factory=lambda: f"answer-{uuid.uuid4().hex}")
    hidden_secret: str = field(default_factory=lambda: f"hidden-{uuid.uuid4().hex}")
    key: str = field(default_factory=lambda: f"sk-selfcheck-{uuid.uuid4().hex}")
    service_token: str = field(default_factory=lambda: f"loopback-{uuid.uuid4().hex}")

    @property
    def public(self) -> Path:
        return self.root / "task" / "public"

    @property
    def private(self) -> Path:
        return self.root / "task" / "private"

    @property
    def hidden(self) -> Path:
        return self.public / HIDDEN_NAME

    @property
    def outside(self) -> Path:
        return self.root / "outside"

    @property
    def key_file(self) -> Path:
        return self.root / "host-secrets" / "provider-key.txt"

    @property
    def owner_only(self) -> Path:
        """A file only the harness's user may read, outside every folder of the run (metadata check)."""
        return self.root / "host-secrets" / "owner-only.txt"

    def metadata_targets(self) -> dict[str, Path]:
        """What the metadata check watches: a file of the public data (a hard link to the cache's own file
        where the runtime stages the data) and a file of the host's outside the run."""
        return {"data": self.public / "README.md", "outside": self.owner_only}

    def secret_files(self) -> list[str]:
        return [str(self.private / ANSWERS_NAME), str(self.hidden / HIDDEN_FILE)]

    def lay_out(self) -> None:
        """Everything readable and the outside folder writable by any uid: only the runtime may stop the agent."""
        self.root.chmod(0o755)
        for folder in (self.public, self.private, self.hidden, self.outside, self.key_file.parent):
            folder.mkdir(parents=True)
        (self.public / "sample_submission.csv").write_text("case,label\nc1,0\n")
        (self.public / "README.md").write_text("public data of the conformance suite\n")
        (self.private / ANSWERS_NAME).write_text(f"case,label\nc1,{self.answers_secret}\n")
        (self.hidden / HIDDEN_FILE).write_text(self.hidden_secret + "\n")
        self.key_file.write_text(self.key + "\n")
        self.owner_only.write_text("the host's own file\n")
        self.owner_only.chmod(0o600)
        for folder in (self.root / "task", self.public, self.private, self.hidden, self.key_file.parent):
            folder.chmod(0o755)
        for path in (*self.public.rglob("*"), *self.private.rglob("*"), self.key_file):
            if path.is_file():
                path.chmod(0o644)
        self.outside.chmod(0o777)


class LoopbackService:
    """A TCP service on the host's 127.0.0.1 answering every request with a secret token."""

    def __init__(self, token: str) -> None:
        body = token.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                self.send_response(200)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Run:
    """One of the two runs: its folder, spec and, once it ended, its outcome and the probe's report."""

    name: str
    folder: Path
    spec: RunSpec | None = None
    handle: RunHandle | None = None
    outcome: RunOutcome | None = None
    error: str | None = None

    @property
    def workspace(self) -> Path:
        return self.folder / "workspace"

    def report(self) -> dict | None:
        try:
            return json.loads((self.workspace / f"probe-{self.name}.json").read_text())
        except (OSError, ValueError):
            return None

    def texts(self) -> str:
        """Everything the agent could have written a secret into: its report, its logs, its folders."""
        parts = []
        for folder in (self.workspace, self.folder / "submission", self.folder / "logs"):
            for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
                if path.is_file() and not path.is_symlink() and path.stat().st_size < 20_000_000:
                    parts.append(path.read_bytes().decode(errors="replace"))
        return "\n".join(parts)

    def why_not_run(self) -> str:
        """Why the probe left no report: the runtime's error, else the exit and the stderr's tail."""
        if self.error:
            return self.error
        if self.outcome is None:
            return "the run never ended"
        tail = ""
        try:
            tail = self.outcome.stderr.read_text(errors="replace")[-400:].strip()
        except OSError:
            pass
        return (f"the probe left no report (exit {self.outcome.exit_code}, timed out {self.outcome.timed_out}, "
                f"{self.outcome.note or 'no note'}): {tail or 'no stderr'}")


def _staged(runtime: Runtime, plant: Plant, run: Run, argv: list[str], env: dict[str, str], time_limit: float,
            **options) -> RunSpec:
    """The run's folders and its spec staged by ``runtime``, as the harness's ``run.launch`` makes them."""
    for sub in ("workspace", "submission", "logs"):
        (run.folder / sub).mkdir(parents=True)
    instructions = run.folder / "instructions.md"
    instructions.write_text("conformance probe\n")
    return runtime.stage(RunSpec("selfcheck", argv, env, plant.public, run.workspace, run.folder / "submission",
                                 run.folder / "logs", instructions, time_limit, hidden=(plant.private, plant.hidden),
                                 **options))


def _prepare(runtime: Runtime, plant: Plant, run: Run, *, network: str, limits: Limits | None,
             time_limit: float, image: str | None, config: dict) -> RunSpec:
    """The probe's run: stage first (Landlock's agent sees the stage's real paths), then the contract names
    what the agent will see."""
    spec = _staged(runtime, plant, run, [], {}, time_limit, image=image, network=network, limits=limits)
    paths = runtime.contract_paths(spec)
    shutil.copyfile(PROBE, run.workspace / "rexmle_probe.py")
    (run.workspace / "probe-config.json").write_text(json.dumps(config))
    env = {"REXMLE_TASK": "selfcheck", "REXMLE_DATA_DIR": paths["data"], "REXMLE_WORKSPACE": paths["workspace"],
           "REXMLE_SUBMISSION_DIR": paths["submission"], "REXMLE_INSTRUCTIONS": paths["instructions"],
           "REXMLE_TIME_LIMIT": str(int(time_limit)), KEY_NAME: plant.key}
    inside = paths["workspace"]
    argv = ["python3", f"{inside}/rexmle_probe.py", run.name, f"{inside}/probe-config.json"]
    return dataclasses.replace(spec, argv=argv, env=env, secret_env=(KEY_NAME,))


@contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    """``name`` set in the harness's own environment while the runs go (the real key, as in a session with
    a provider; the faked /dev of the gpus check)."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def run_selfcheck(runtime: Runtime, work: Path | None = None, image: str | None = None,
                  log: Callable[[str], None] = lambda line: None) -> list[CheckResult]:
    """Run every check against ``runtime``; one :class:`CheckResult` per name of :data:`CHECKS`.

    ``work`` is where the planted folders and the run folders go (a Slurm runtime needs a folder its nodes
    share); by default a fresh folder under the system's temporary folder, removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="rexmle-selfcheck-", dir=str(work) if work else None))
    try:
        return _run_all(runtime, Plant(root), image, log)
    finally:
        _remove(root)


def _run_all(runtime: Runtime, plant: Plant, image: str | None, log: Callable[[str], None]) -> list[CheckResult]:
    try:
        runtime.check()
    except RuntimeUnavailable as exc:
        return [CheckResult(name, False, f"the runtime is not available here: {exc}") for name in CHECKS]
    plant.lay_out()
    network, refusal = "gateway", None
    try:
        runtime.network_notices("gateway")
    except RuntimeUnavailable as exc:  # the rest still runs, without any network
        network, refusal = "none", f"the runtime cannot give agents the gateway network: {exc}"
    service = LoopbackService(plant.service_token)

    config = {"marker": plant.marker, "secret_files": plant.secret_files(), "answers_name": ANSWERS_NAME,
              "owner_only": str(plant.owner_only),
              "hidden_name": HIDDEN_NAME, "hidden_file": HIDDEN_FILE, "outside": str(plant.outside),
              "key_file": str(plant.key_file), "port": service.port,
              "package": str(PACKAGE)}
    probe, limits = Run("probe", plant.root / "runs" / "probe"), Run("limits", plant.root / "runs" / "limits")
    try:
        with _environ(KEY_NAME, plant.key):
            for run, kwargs in ((probe, {"network": network, "limits": None, "time_limit": PROBE_SECONDS}),
                                (limits, {"network": "none", "limits": LIMITS, "time_limit": LIMITS_SECONDS})):
                cfg = {**config, "run_root": str(run.folder), "forks": FORKS, "hog_mb": HOG_MB}
                try:
                    run.spec = _prepare(runtime, plant, run, image=image, config=cfg, **kwargs)
                    run.handle = runtime.launch(run.spec)
                    log(f"launched the {run.name} run")
                except RuntimeUnavailable as exc:
                    run.error = f"the runtime refused the run: {exc}"
            for run in (probe, limits):
                if run.handle is not None:
                    try:
                        run.outcome = run.handle.wait()
                    except RuntimeUnavailable as exc:
                        run.error = f"the runtime refused the run: {exc}"
                    log(f"the {run.name} run ended")
    finally:
        service.close()
    metadata_before = plant_metadata(plant)
    try:
        gpus = check_gpus(runtime, plant, log)
        interpreter = check_interpreter(runtime, plant, log)
    finally:
        runtime.close()
    try:
        return [judge_answers(probe, plant), judge_writes(probe, plant), judge_metadata(probe, plant, metadata_before),
                judge_leftovers(probe, plant), judge_keys(probe, plant, refusal), judge_network(probe, plant, refusal),
                judge_limits(limits), gpus, interpreter]
    finally:
        clean_leftovers(plant)


# -- the judges ------------------------------------------------------------------------------------------

def _from_report(name: str) -> Callable[[Callable[..., CheckResult]], Callable[..., CheckResult]]:
    """A judge of check ``name`` given the probe's report; FAIL with why the probe left none when it left none."""
    def wrap(judge: Callable[..., CheckResult]) -> Callable[..., CheckResult]:
        def judged(run: Run, *args) -> CheckResult:
            report = run.report()
            return CheckResult(name, False, run.why_not_run()) if report is None else judge(run, report, *args)
        return judged
    return wrap


def _tried(report: dict, prefix: str) -> list[str]:
    return sorted(n for n in report["attempts"] if n.startswith(prefix))


def _got_through(report: dict, prefix: str) -> list[str]:
    return [f"{name} ({item['detail'][:160]})" for name, item in sorted(report["attempts"].items())
            if name.startswith(prefix) and item["ok"]]


@_from_report("answers")
def judge_answers(run: Run, report: dict, plant: Plant) -> CheckResult:
    leaked = [what for what, secret in (("the private answers", plant.answers_secret),
                                        (f"the hidden path {plant.hidden}", plant.hidden_secret))
              if secret in run.texts()]
    if leaked:
        return CheckResult("answers", False, f"the agent read {' and '.join(leaked)}: "
                           + "; ".join(_got_through(report, "answers_")))
    tried = _tried(report, "answers_")
    return CheckResult("answers", True, f"the private answers and the hidden path stayed unreadable ({len(tried)} "
                       f"ways tried: {', '.join(tried)})")


@_from_report("writes")
def judge_writes(run: Run, report: dict, plant: Plant) -> CheckResult:
    inside = {run.workspace.resolve(), (run.folder / "submission").resolve()}
    places = [plant.root, PACKAGE]
    written = sorted(str(p) for place in places for p in place.rglob(f"{plant.marker}-write")
                     if not any(parent in inside for parent in p.resolve().parents))
    changed = [] if (run.folder / "instructions.md").read_text() == "conformance probe\n" else ["instructions.md"]
    claimed = _got_through(report, "write_")
    if written or changed or claimed:
        return CheckResult("writes", False, f"the agent wrote outside its workspace and submission: "
                           f"{', '.join(written + changed + claimed)}")
    refused = _tried(report, "write_")
    return CheckResult("writes", True, f"every write outside the workspace and submission was refused "
                       f"({', '.join(refused)})")


def _metadata(path: Path) -> tuple:
    """Mode, owner, times and extended attributes of ``path`` (links not followed)."""
    try:
        st = path.lstat()
        xattrs = tuple(sorted(os.listxattr(path, follow_symlinks=False)))
    except OSError as exc:
        return ("unreadable", type(exc).__name__)
    return (st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns, xattrs)


def plant_metadata(plant: Plant) -> dict[str, tuple]:
    return {name: _metadata(path) for name, path in plant.metadata_targets().items()}


@_from_report("metadata")
def judge_metadata(run: Run, report: dict, plant: Plant, before: dict[str, tuple]) -> CheckResult:
    """chmod, chown, times and extended attributes are no write of a file's content, and Landlock has no
    right for them: an agent that owns a host file (uid 0, or the harness's own uid) could mark it, or the
    cache's data, for the next run. Judged from the host: the planted files' metadata is unchanged."""
    after = plant_metadata(plant)
    changed = [f"{name} ({plant.metadata_targets()[name]})" for name in before if after.get(name) != before[name]]
    claimed = _got_through(report, "meta_")
    if changed or claimed:
        return CheckResult("metadata", False, "the agent changed the metadata of files outside its run: "
                           + ", ".join(changed + claimed))
    tried = _tried(report, "meta_")
    return CheckResult("metadata", True, f"mode, owner, times and extended attributes of the data and of a host "
                       f"file stayed as they were ({len(tried)} ways tried)")


def _marked_processes(marker: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker.encode() in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _marked_files(marker: str) -> list[Path]:
    return [p for folder in ("/tmp", "/var/tmp", "/dev/shm") for p in Path(folder).glob(f"{marker}-file")]


@_from_report("leftovers")
def judge_leftovers(run: Run, report: dict, plant: Plant) -> CheckResult:
    processes, files = _marked_processes(f"{plant.marker}-process"), _marked_files(plant.marker)
    if processes or files:
        left = [f"process {pid}" for pid in processes] + [str(p) for p in files]
        return CheckResult("leftovers", False, f"the run left behind: {', '.join(left)}")
    started = report["attempts"].get("detached_process", {})
    return CheckResult("leftovers", True, "no process or file of the run outlived it"
                       + ("" if started.get("ok") else f" (the probe could not start one: {started.get('detail')})"))


def clean_leftovers(plant: Plant) -> None:
    """The probe's detached processes and marker files, found by this check-up's unique marker."""
    for pid in _marked_processes(plant.marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for path in (*_marked_files(plant.marker), *PACKAGE.glob(f"{plant.marker}-write")):
        path.unlink(missing_ok=True)


@_from_report("keys")
def judge_keys(run: Run, report: dict, plant: Plant, refusal: str | None) -> CheckResult:
    if plant.key in run.texts():
        where = sorted({f["where"] for f in report["found"] if plant.key in f["text"]})
        return CheckResult("keys", False, f"the host's key reached the agent ({', '.join(where) or 'in its files'})"
                           + (f"; {refusal}" if refusal else ""))
    if refusal:
        return CheckResult("keys", False, refusal)
    return CheckResult("keys", True, f"the host's key is in no environment, process or file the agent reads "
                       f"({KEY_NAME} holds the run's stand-in)")


@_from_report("network")
def judge_network(run: Run, report: dict, plant: Plant, refusal: str | None) -> CheckResult:
    attempts = report["attempts"]
    problems = []
    if plant.service_token in run.texts():
        problems.append("the host's loopback service answered the agent")
    problems += [f"{name}: {attempts[name]['detail'][:160]}" for name in
                 ("host_loopback_service", "outside_direct", "loopback_through_gateway")
                 if attempts.get(name, {}).get("ok")]
    if refusal:
        problems.append(refusal)
    elif not attempts.get("gateway_reachable", {}).get("ok"):
        problems.append(f"the gateway did not answer the agent ({attempts.get('gateway_reachable', {}).get('detail')})")
    if problems:
        return CheckResult("network", False, "; ".join(problems))
    return CheckResult("network", True, "the gateway answered and was the only peer (the host's loopback service, "
                       "a direct outside connection and a CONNECT to the loopback through the gateway all failed)")


@_from_report("limits")
def judge_limits(run: Run, report: dict) -> CheckResult:
    problems, held = [], []
    forks = report.get("forks", 0)
    if report.get("fork_error") and forks < FORKS:
        held.append(f"fork refused after {forks} processes (limit {LIMITS.processes})")
    else:
        problems.append(f"{forks} processes started under a limit of {LIMITS.processes}")
    hog = report.get("hog_mb", 0)
    if report.get("hog_done") or hog >= HOG_MB:
        problems.append(f"{hog} MiB allocated under a memory limit of {format_size(LIMITS.memory or 0)}")
    else:
        note = run.outcome.killed or run.outcome.note if run.outcome else None
        held.append(f"memory stopped at {hog} MiB (limit {format_size(LIMITS.memory or 0)}"
                    + (f"; {note}" if note else "") + ")")
    if problems:
        return CheckResult("limits", False, "; ".join(problems))
    return CheckResult("limits", True, "; ".join(held))


# -- the hostile interpreter ------------------------------------------------------------------------------

#: the faked machine of the gpus check: 8 GPUs whose PCI order is not their minors' (index 1 is /dev/nvidia5)
FAKE_GPU_MINORS = (3, 5, 0, 1, 2, 4, 6, 7)
FAKE_GPU_CONTROL = ("nvidiactl", "nvidia-uvm")


def _fake_gpu_machine(folder: Path) -> list[str]:
    """``folder`` as an 8-GPU ``/dev`` with the driver's listing (:mod:`..runtime.sandbox.gpu_devices`), every
    node a readable file; returns the node names."""
    names = [*(f"nvidia{m}" for m in range(len(FAKE_GPU_MINORS))), *FAKE_GPU_CONTROL]
    folder.mkdir(parents=True)
    folder.chmod(0o755)
    for name in names:
        (folder / name).write_text(f"{name}\n")
        (folder / name).chmod(0o666)
    for index, minor in enumerate(FAKE_GPU_MINORS):
        listing = folder / "driver-gpus" / f"0000:{index + 16:02x}:00.0"
        listing.mkdir(parents=True)
        (listing / "information").write_text(f"GPU UUID: \t GPU-selfcheck-{index}\nDevice Minor: \t {minor}\n")
    for path in (folder / "driver-gpus", *(folder / "driver-gpus").iterdir()):
        path.chmod(0o755)
    return names


def check_gpus(runtime: Runtime, plant: Plant, log: Callable[[str], None]) -> CheckResult:
    """A run given GPU 1 of a faked 8-GPU machine may open that GPU's node and the driver's control nodes,
    nothing of another run's GPU, whatever ``CUDA_VISIBLE_DEVICES`` says (which numbers its GPU 0)."""
    # start-up: keeps ctypes, gzip, tarfile out of `rexmle selfcheck`
    from ..runtime.local import LocalRuntime

    if not isinstance(runtime, LocalRuntime):
        return CheckResult("gpus", True, f"not applicable: the {runtime.name} runtime's GPUs are its engine's or its "
                           "scheduler's (a faked /dev on this machine says nothing of them)")
    fake = plant.root / "fake-dev"
    names = _fake_gpu_machine(fake)
    run = Run("gpus", plant.root / "runs" / "gpus")
    with _environ(FAKE_ENV, str(fake)):
        try:
            spec = _prepare(runtime, plant, run, network="none", limits=None, time_limit=GPU_SECONDS, image=None,
                            config={"fake_dev": str(fake), "gpu_nodes": names})
            run.spec = dataclasses.replace(spec, gpus=("1",), env={**spec.env, "CUDA_VISIBLE_DEVICES": "1"})
            run.outcome = runtime.launch(run.spec).wait()
            log("the gpus run ended")
        except RuntimeUnavailable as exc:
            run.error = f"the runtime refused the run: {exc}"
    return judge_gpus(run)


@_from_report("gpus")
def judge_gpus(run: Run, report: dict) -> CheckResult:
    opened = sorted(report.get("gpu_nodes_opened") or [])
    own = sorted([f"nvidia{FAKE_GPU_MINORS[1]}", *FAKE_GPU_CONTROL])
    foreign = [name for name in opened if name not in own]
    if foreign:
        return CheckResult("gpus", False, f"a run given GPU 1 opened other GPUs' device nodes: {', '.join(foreign)}")
    if report.get("cuda_visible_devices") != "0":
        return CheckResult("gpus", False, f"CUDA_VISIBLE_DEVICES inside was {report.get('cuda_visible_devices')!r}, "
                           "not the run's GPU numbered from 0")
    return CheckResult("gpus", True, f"a run given GPU 1 of a faked 8-GPU machine opened {', '.join(opened) or 'nothing'}"
                       f" and no other GPU's node")


def check_interpreter(runtime: Runtime, plant: Plant, log: Callable[[str], None]) -> CheckResult:
    """An image whose ``python3`` runs only an attack (never the sandbox's launcher), run as an agent's image:
    whatever the runtime does inside its image, the process must already be the run's, dropped."""
    # start-up: keeps ctypes, gzip, tarfile out of `rexmle selfcheck`
    from ..runtime.local import LocalRuntime

    if not isinstance(runtime, LocalRuntime):
        return CheckResult("interpreter", True, f"not applicable: the {runtime.name} runtime runs no image from "
                           "this machine's image cache (its images' interpreters run under its own engine)")
    from ..images import store  # start-up: keeps gzip, tarfile out of `rexmle selfcheck`
    from .hostile_image import NoSystemPython, build_root  # testing imports this module at its top

    cache = plant.root / "image-cache"

    with cache_home_at(cache):  # the hostile image never lands in the user's own cache
        try:
            built = build_root(plant.root / "hostile-root", replaced_python=True, pth=False)
            store.import_archive(built, tags=(HOSTILE_TAG,))
        except (NoSystemPython, OSError, ValueError) as exc:
            return CheckResult("interpreter", True, f"not checked: no hostile image could be built here ({exc})")
        finally:
            shutil.rmtree(plant.root / "hostile-root", ignore_errors=True)
        try:
            runtime.check_image(HOSTILE_TAG)
        except RuntimeUnavailable as exc:
            return CheckResult("interpreter", True, f"not applicable: the runtime runs no image here ({exc})")
        run = Run("interpreter", plant.root / "runs" / "interpreter")
        try:
            run.spec = _staged(runtime, plant, run, ["python3", "-I", "-c", "pass"], {"REXMLE_TASK": "selfcheck"},
                               INTERPRETER_SECONDS, image=HOSTILE_TAG, network="none", limits=INTERPRETER_LIMITS)
            run.outcome = runtime.launch(run.spec).wait()
            log("the interpreter run ended")
        except RuntimeUnavailable as exc:
            run.error = f"the runtime refused the run: {exc}"
    return judge_interpreter(run)


def judge_interpreter(run: Run) -> CheckResult:
    from .hostile_image import left_behind, problems, reports  # testing imports this module at its top

    if run.outcome is None:
        return CheckResult("interpreter", False, run.why_not_run())
    try:
        found = reports(run.outcome.stdout.read_text(errors="replace"))
    except OSError:
        found = []
    if not found:
        return CheckResult("interpreter", False, f"the image's hostile python3 never reported: {run.why_not_run()}")
    details = run.outcome.details
    wrong = problems(found, details.get("agent_uid", -1), details.get("limits") or INTERPRETER_LIMITS.to_json(),
                     os.geteuid() == 0)
    wrong += [f"left behind: {item}" for item in left_behind(run.folder)]
    if wrong:
        return CheckResult("interpreter", False, "the image's interpreter ran before the run was dropped: "
                           + "; ".join(wrong[:6]))
    status = found[0]["status"]
    return CheckResult("interpreter", True, f"an image's hostile python3 ran as the run's uid {status['Uid']} with no "
                       "capability, no_new_privs, the seccomp filter and the run's rlimits; its setcap and chattr +i "
                       "failed and nothing of them is left")


def _remove(root: Path) -> None:
    """The check-up's folder, whatever the agent left in it (``rm``: deep folders, foreign owners)."""
    from .hostile_image import clear_flags  # testing imports this module at its top

    clear_flags(root)
    subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=False)
