"""A neutral stage for what the agent sees: while it runs, its folders live in ``/var/tmp/rexmle-XXXX``.

Why: the kernel prints each bind mount's source *within its filesystem* in ``/proc/self/mountinfo``
(field 4), computed from where the directory lives when the file is read; Landlock shows the agent host
paths outright; and ``/proc/self/fd`` names the files behind its stdout and stderr. No mount option
changes any of that, only where the files really are. So for the length of a run:

* the run's ``workspace/`` and ``submission/`` are *renamed* into a fresh folder with a meaningless
  name on the same filesystem (O(1), nothing copied), and renamed back afterwards;
* the public data appears there as a tree of *hard links* (O(files), nothing copied; the cache's folder
  itself is never moved, so concurrent runs of one task do not disturb each other). Where links are
  refused (another filesystem, ``fs.protected_hardlinks``) a symbolic link to the real folder stands in
  and the run records that the data's host path shows. A hard link *is* the cache's inode: where the
  agent could change its metadata (Landlock as the data's owner: chmod, chown and utime are no
  Landlock rights) the runtime asks for a copy instead (``copy_data``; reflinked where the filesystem
  can), so an agent's ``chmod 000`` never reaches the next run. Bubblewrap and Docker bind the stage's
  data read-only, where every metadata change fails with EROFS;
* the instructions are copied, the agent's log files hard-linked, and the private ``/tmp`` made there.

Every runtime (local, Docker, and the inner runtime of a Slurm job) runs the agent on the staged paths,
so the run folder, the cache and the data root are named nowhere the agent can read.

Interruption: ``<run>/stage.json`` names the stage and the process that owns it *before* anything moves;
a later session's start-up (:func:`recover_all`) moves the folders of a dead owner back. Nothing is lost.

Hostile content: the agent controls what lies *inside* workspace and submission, never the stage's own
entries (bubblewrap and Docker show it only the bound folders, Landlock gives it no right on the stage).
Moving back renames the two top folders only, never walks their content, and refuses a top entry that
is not the very directory moved in (it gets an empty folder in its place, and a note in run.json).

Without a stage root on the run folder's filesystem the run is not staged; run.json says
``host_paths_hidden: false`` and the session warns once.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..jsonfile import write_json_atomic
from .base import RunSpec, is_under
from .liveness import pid_alive, process_start

STAGE_ENV = "REXMLE_STAGE_DIR"
RECORD = "stage.json"
PREFIX = "rexmle-"
#: the folders that travel: (name inside the stage, RunSpec field)
MOVED = (("workspace", "workspace"), ("submission", "submission"))
DATA, INSTRUCTIONS, LOGS = "data", "instructions.md", "logs"
MAX_RECORD_BYTES = 64 * 1024
_warned: set[str] = set()


@dataclass
class StagedRun:
    """What the runtime runs on: the spec with staged paths (the original when unstaged), the log files
    to open for the agent's stdout/stderr, and what run.json should say about it."""

    spec: RunSpec
    logs: list[Path]
    details: dict = field(default_factory=dict)


def stage_root(run_dir: Path, avoid: Sequence[Path] = ()) -> Path | None:
    """``$REXMLE_STAGE_DIR``, else the first of /var/tmp and the temporary folder that lies on the run
    folder's filesystem (a rename cannot cross filesystems), is writable and is not inside one of our own
    roots (``avoid``: runs, cache, data)."""
    device = run_dir.stat().st_dev
    chosen = os.environ.get(STAGE_ENV)
    candidates = [Path(chosen)] if chosen else [Path("/var/tmp"), Path(tempfile.gettempdir())]
    for candidate in candidates:
        try:
            if candidate.stat().st_dev != device or not os.access(candidate, os.W_OK | os.X_OK):
                continue
        except OSError:
            continue
        if not any(is_under(candidate, root) for root in (*avoid, run_dir)):
            return candidate
    return None


def plan(spec: RunSpec) -> Path | None:
    """Create the run's stage and record it in the run folder (None: no usable stage root here)."""
    run_dir = _run_dir(spec)
    if run_dir is None:
        return None
    root = stage_root(run_dir, spec.hidden)
    if root is None:
        _warn_once(f"rexmle: no folder on the runs folder's filesystem can hold the agents' stage (set {STAGE_ENV} "
                   "to one): agents run on the host paths, which they can read in /proc/self/mountinfo "
                   "(run.json says host_paths_hidden: false)")
        return None
    stage = Path(tempfile.mkdtemp(prefix=PREFIX, dir=root))
    os.chmod(stage, 0o700)  # no other uid enters it; Landlock's runtime hands it to the run's own uid
    _write_record(run_dir, stage, {})
    return stage


@contextmanager
def staged(spec: RunSpec, *, plan_now: bool = True, logs: Sequence[Path] = (),
           copy_data: bool = False) -> Iterator[StagedRun]:
    """Run inside the stage: ``spec.stage`` when the contract already names it, else a new one when
    ``plan_now`` (the contract names sandbox paths). Everything moves back when the block ends, however."""
    stage = spec.stage if spec.stage is not None else (plan(spec) if plan_now else None)
    run_dir = _run_dir(spec)
    if stage is None or run_dir is None or not _usable(stage, run_dir):
        yield StagedRun(spec, list(logs), {"host_paths_hidden": False, "stage": None})
        return
    started = time.perf_counter()
    details: dict = {"stage": str(stage)}
    try:
        identities = {inside: _identity(getattr(spec, attr)) for inside, attr in MOVED}
    except OSError:  # nothing moved yet: the stage goes, the error is the caller's
        remove_tree(stage)
        (run_dir / RECORD).unlink(missing_ok=True)
        raise
    try:
        _write_record(run_dir, stage, identities)  # before anything moves: a kill -9 from here on is recoverable
        for inside, attr in MOVED:
            os.rename(getattr(spec, attr), stage / inside)
        details["data_view"] = expose_data(spec.data_dir, stage / DATA, spec.hidden, copy=copy_data)
        shutil.copyfile(spec.instructions, stage / INSTRUCTIONS)
        opened = _link_logs(logs, stage / LOGS)
        details["host_paths_hidden"] = details["data_view"] in ("links", "copy") and all(p.parent == stage / LOGS for p in opened)
        cwd = None if spec.cwd is None else stage / "workspace" / spec.cwd.relative_to(spec.workspace)
        staged = dataclasses.replace(spec, workspace=stage / "workspace", submission=stage / "submission",
                                     data_dir=stage / DATA, instructions=stage / INSTRUCTIONS, cwd=cwd, stage=stage)
        details["stage_seconds"] = round(time.perf_counter() - started, 4)
        yield StagedRun(staged, opened, details)
    finally:
        notes, keep = move_back(run_dir, stage, identities)
        if notes:
            details["stage_notes"] = notes
        if not keep:
            remove_tree(stage)
            (run_dir / RECORD).unlink(missing_ok=True)


def expose_data(public: Path, target: Path, hidden: Sequence[Path] = (), copy: bool = False) -> str:
    """The public folder at ``target``: a copy (``"copy"``, when asked: inodes of the run's own), a
    hard-link tree (``"links"``), or a symbolic link to the real folder where the kernel refuses links
    (``"host path"``: its path then shows inside)."""
    if copy:
        copy_tree(public, target, hidden)
        return "copy"
    try:
        link_tree(public, target, hidden)
        return "links"
    except OSError:
        if os.path.lexists(target):
            remove_tree(target)
        os.symlink(public.resolve(), target)
        return "host path"


def link_tree(source: Path, target: Path, skip: Sequence[Path] = ()) -> None:
    """Rebuild ``source`` at ``target`` with a hard link per file and the folders' own modes; folders in
    ``skip`` (hidden ones that happen to lie inside) are left out. ``source`` is harness data, not the
    agent's. Raises OSError when a link is refused."""
    source = source.resolve()
    inside = {p.resolve() for p in skip if p.exists() and is_under(p, source)}
    folders = [(source, target)]
    os.mkdir(target)
    for dirpath, dirnames, filenames in os.walk(source):
        here = target / os.path.relpath(dirpath, source)
        kept = []
        for name in dirnames:
            path = Path(dirpath, name)
            if path.is_symlink():
                os.symlink(os.readlink(path), here / name)
            elif path not in inside:
                os.mkdir(here / name)
                folders.append((path, here / name))
                kept.append(name)
        dirnames[:] = kept
        for name in filenames:
            file = os.path.join(dirpath, name)
            if os.path.islink(file):
                os.symlink(os.readlink(file), here / name)
            else:
                os.link(file, here / name, follow_symlinks=False)
    for src, dst in reversed(folders):
        os.chmod(dst, stat.S_IMODE(os.stat(src).st_mode))


def copy_tree(source: Path, target: Path, skip: Sequence[Path] = ()) -> None:
    """``source`` copied to ``target`` (``cp --reflink=auto``: shared blocks where the filesystem can,
    never shared inodes), modes and times kept; folders in ``skip`` are removed from the copy."""
    source = source.resolve()
    done = subprocess.run(["cp", "-a", "--reflink=auto", "--no-target-directory", "--", str(source), str(target)],
                          capture_output=True, check=False)
    if done.returncode != 0:
        raise OSError(f"copying the public data into the stage failed: {done.stderr.decode(errors='replace')[-300:]}")
    for hidden in skip:
        if hidden.exists() and is_under(hidden.resolve(), source) and hidden.resolve() != source:
            remove_tree(target / hidden.resolve().relative_to(source))


def move_back(run_dir: Path, stage: Path, identities: Mapping[str, list[int] | None]) -> tuple[list[str], bool]:
    """Rename the staged folders back into the run folder. Returns notes for run.json and whether the
    stage must be kept (something could not go back without overwriting: nothing is ever deleted then)."""
    notes: list[str] = []
    keep = False
    for inside, name in MOVED:
        src, dst = stage / inside, run_dir / name
        try:
            st = os.lstat(src)
        except FileNotFoundError:
            if not os.path.lexists(dst):  # lost outside our control (a cleared /tmp): keep the run's shape
                os.mkdir(dst)
                notes.append(f"{name}: not found in the stage {stage}; an empty folder stands in")
            continue
        if os.path.lexists(dst):
            notes.append(f"{name}: both {dst} and the staged {src} exist; the stage is kept")
            keep = True
            continue
        wanted = identities.get(inside)
        if not stat.S_ISDIR(st.st_mode) or (wanted is not None and [st.st_dev, st.st_ino] != list(wanted)):
            from ..agent_output import kind_of  # start-up: keeps 561 lines out of the node probe

            os.mkdir(dst)
            notes.append(f"{name}: the staged entry is not the folder moved in ({kind_of(st.st_mode)}); it was "
                         "dropped and an empty folder stands in")
            continue
        os.rename(src, dst)
    return notes, keep


def recover(run_dir: Path) -> bool:
    """Move back what a dead process left staged for ``run_dir``; False when there is nothing to do or
    its owner lives (a concurrent session, or a job still running on another host)."""
    record_path = run_dir / RECORD
    try:
        with open(record_path, "rb") as fh:
            record = json.loads(fh.read(MAX_RECORD_BYTES))
        stage = Path(record["stage"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if record.get("host") != socket.gethostname() or pid_alive(int(record.get("pid", 0)), record.get("pid_start")):
        return False
    if not stage.name.startswith(PREFIX) or stage.is_symlink():
        return False
    notes, keep = move_back(run_dir, stage, record.get("identities") or {})
    reclaim(run_dir)
    if notes:
        warnings.warn(f"rexmle: recovering {run_dir}: {'; '.join(notes)}", stacklevel=2)
    if not keep:
        if stage.is_dir():
            remove_tree(stage)
        record_path.unlink(missing_ok=True)
    return True


def reclaim(run_dir: Path) -> None:
    """A root harness takes back what a killed session's agent (a uid of its own, which a later run may get)
    still owns in ``run_dir``'s workspace and submission; hard-linked files stay as they are, since a
    link's inode may be someone else's."""
    if os.geteuid() != 0:
        return
    owner = os.lstat(run_dir)
    tops = [str(run_dir / name) for name, _ in MOVED if os.path.isdir(run_dir / name)]
    if tops:
        subprocess.run(["find", *tops, "-xdev", "!", "-uid", str(owner.st_uid), "(", "-type", "d", "-o", "-links", "1",
                        ")", "-exec", "chown", "-h", f"{owner.st_uid}:{owner.st_gid}", "{}", "+"],
                       capture_output=True, check=False, timeout=600)


def recover_all(runs_dir: Path) -> int:
    """Start of a session: every staged run a killed session left in ``runs_dir`` goes back home."""
    return sum(recover(path.parent) for path in sorted(runs_dir.glob(f"*/*/*/{RECORD}")))


def remove_tree(path: Path) -> None:
    """Remove a folder the agent wrote (any depth, unreadable sub-folders, never following a link)."""
    if not os.path.lexists(path):
        return
    if os.path.islink(path) or not os.path.isdir(path):
        os.unlink(path)
        return
    command = ["rm", "-rf", "--one-file-system", "--", str(path)]
    if subprocess.run(command, capture_output=True, check=False).returncode != 0:
        # folders made unwritable to us (we are their owner, not root): open them up, once. Folders only:
        # the files may be hard links shared with the cache, whose modes must not change
        subprocess.run(["find", str(path), "-xdev", "-type", "d", "-exec", "chmod", "u+rwx", "{}", "+"],
                       capture_output=True, check=False)
        subprocess.run(command, capture_output=True, check=False)


def _run_dir(spec: RunSpec) -> Path | None:
    """The folder holding workspace and submission (where the record lives); None for odd specs."""
    parent = spec.workspace.parent
    return parent if spec.submission.parent == parent and parent.is_dir() else None


def _usable(stage: Path, run_dir: Path) -> bool:
    """A stage planned elsewhere (another host's /var/tmp) cannot take this run's folders."""
    try:
        st = os.lstat(stage)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_dev == run_dir.stat().st_dev


def _identity(path: Path) -> list[int]:
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(f"{path} is not a folder")
    return [st.st_dev, st.st_ino]


def _write_record(run_dir: Path, stage: Path, identities: dict) -> None:
    pid = os.getpid()
    record = {"stage": str(stage), "host": socket.gethostname(), "pid": pid, "pid_start": process_start(pid),
              "identities": identities}
    write_json_atomic(run_dir / RECORD, record)


def _link_logs(logs: Sequence[Path], folder: Path) -> list[Path]:
    """Hard links to the run's log files, so the agent's /proc/self/fd/1 names the stage; the originals
    when the kernel refuses."""
    if not logs:
        return []
    folder.mkdir()
    opened = []
    for path in logs:
        try:
            os.link(path, folder / path.name)
            opened.append(folder / path.name)
        except OSError:
            opened.append(path)
    return opened


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, stacklevel=3)
