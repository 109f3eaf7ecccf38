"""A mirror of the harness's Python that the agent's dedicated uid can reach.

Why: a root harness runs the agent as a dedicated uid (65534). Under Landlock there is no mount
namespace to show that uid an interpreter it cannot reach, and Python often lives where it cannot:
pyenv under ``/root`` (mode 0700), as on this project's machines and CI. Rather than leave the agent
at uid 0, the harness mirrors the interpreter into a folder everyone may traverse and no one else may
write, and runs the agent's Python from there. The launcher itself still starts with the real
interpreter (as root, to drop privileges); only what runs after the drop uses the mirror.

One mirror, ``<home>/py<X.Y>-<key>/``:

* ``base/``: the base installation (``sys.base_prefix``). Files are hard links when the source is on
  the same filesystem (no disk, milliseconds), else copies. A file that is writable by group/others,
  owned by anyone but the harness, or setuid/setgid is never linked: it is copied with those bits
  off, so the agent can never write through the mirror into the source. Folders are made 0755.
  Binaries whose ELF run path names the source (a shared ``libpython`` found through
  ``RUNPATH=/root/.pyenv/.../lib``) are copied and given ``$ORIGIN``-relative run paths (:mod:`.elf`),
  and scripts whose ``#!`` names the source interpreter are copied with the mirrored one, so nothing
  is looked up in the unreachable place (:mod:`.mirror_tree`). Without the rewrite the loader, denied
  the old run path, would quietly take the system's ``libpython3.11`` (Debian's 3.11.2 here) instead.
* ``venv/``: a small virtual environment whose ``pyvenv.cfg`` ``home`` is ``base/bin``, so the
  mirrored interpreter behaves as the harness's venv: the venv's site-packages are named in a ``.pth``
  (``site.addsitedir``) when the agent reaches them, else mirrored here; its scripts are copied with
  the mirrored interpreter in their ``#!``.
* ``roots/``: this package's folder and the task registry, only when the agent cannot reach them.
* ``rexmle-mirror.json``, written last. A mirror is built in a temporary folder beside the final one,
  under a file lock (several xdist workers and sessions race for it), and renamed into place. Before
  use (once per process) it is started as the agent's uid; one without its marker, or that does not
  start, is rebuilt.

The key names the source interpreter (path, size and mtime of the binary, version), the mtime of the
site-packages folders it copies (a ``pip install`` changes them) and the content listing of copied
package roots, so an upgraded Python gets a new mirror. Old mirrors are not removed (a running agent
may use one); with hard links they cost inodes, not data (but keep a removed Python's files on disk).

Where: :func:`..paths.python_mirror_home` (``/var/cache/rexmle/python-mirror``), refused by
:func:`prepare_home` unless every folder on the way is root's, traversable, and writable by no one else.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import site
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path

from .identity import Identity, become, unreachable
from .mirror_tree import TreeCopier, TreeError, copy_script, mkdirs, write_file

FORMAT = 1
MARKER = "rexmle-mirror.json"
SITES_PTH = "_rexmle_sites.pth"
ROOTS_PTH = "00_rexmle_roots.pth"
VERIFY = "import encodings, json, site, sys; print(json.dumps([sys.prefix, sys.base_prefix]))"


class MirrorUnavailable(RuntimeError):
    """The mirror cannot be built or used here (the message says why; the run records it)."""


@dataclass(frozen=True)
class Source:
    """What a mirror holds, decided from what the agent's uid cannot reach."""
    base: Path                          # sys.base_prefix, resolved
    interpreter: Path                   # the real binary, resolved, under ``base``
    version: str
    venv: Path | None = None            # sys.prefix when the harness runs in a venv
    include_system_site: bool = True
    copied_sites: tuple[Path, ...] = ()  # venv site-packages the agent cannot reach: mirrored
    linked_sites: tuple[Path, ...] = ()  # venv site-packages it reaches: named in a .pth
    package: Path | None = None          # this package's folder, when it must be mirrored
    tasks: Path | None = None            # the task registry, when it must be mirrored

    def fingerprint(self) -> dict:
        binary = self.interpreter.stat()
        copied = {str(p): _tree_listing(p) for p in (self.package, self.tasks) if p is not None}
        base_sites = {p: _mtime(Path(p)) for p in _base_site_dirs(self.base)}
        return {"format": FORMAT, "interpreter": [str(self.interpreter), binary.st_size, binary.st_mtime_ns],
                "version": self.version, "base": str(self.base), "base_sites": base_sites,
                "venv": str(self.venv) if self.venv else None, "system_site": self.include_system_site,
                "copied_sites": {str(p): _mtime(p) for p in self.copied_sites},
                "linked_sites": [str(p) for p in self.linked_sites], "roots": copied}

    @cached_property
    def name(self) -> str:
        """The mirror's folder name: computed once per Source (the fingerprint stats the interpreter and
        may walk a package tree), so one build names its lock, work folder and marker alike."""
        digest = hashlib.sha256(json.dumps(self.fingerprint(), sort_keys=True).encode()).hexdigest()[:16]
        return f"py{self.short_version}-{digest}"

    @property
    def short_version(self) -> str:
        return ".".join(self.version.split(".")[:2])

    @property
    def executable_name(self) -> str:
        return f"python{self.short_version}"

    def moved(self, final: Path) -> list[tuple[Path, Path]]:
        """Each mirrored source folder and where it lands in the finished mirror ``final``."""
        pairs = [(self.base, final / "base")]
        pairs += [(p, final / "venv" / p.relative_to(self.venv)) for p in self.copied_sites]  # type: ignore[arg-type]
        pairs += [(p, final / "roots" / str(i) / p.name) for i, p in enumerate((self.package, self.tasks))
                  if p is not None]
        return pairs


@dataclass(frozen=True)
class Mirror:
    root: Path
    source: Source
    built: bool = False                 # this call built it (else it was there already)
    seconds: float = 0.0                # how long building took
    stats: dict = field(default_factory=dict, compare=False)

    @property
    def python(self) -> Path:
        return self.root / "venv" / "bin" / self.source.executable_name

    @property
    def tasks_dir(self) -> Path | None:
        return self.root / "roots" / "1" / self.source.tasks.name if self.source.tasks else None

    def roots(self) -> list[Path]:
        """What the agent's Landlock view must allow for Python: the mirror and the real sites it names."""
        return [self.root, *self.source.linked_sites]


@dataclass(frozen=True)
class AgentPython:
    """The interpreter the agent's commands run with and the folders it needs."""
    executable: Path
    roots: tuple[Path, ...]
    tasks_dir: Path
    mirror: Mirror | None = None

    @property
    def bin_dir(self) -> Path:
        return self.executable.parent

    def argv(self, argv: list[str]) -> list[str]:
        """An agent command that starts with the harness's interpreter starts with this one instead."""
        harness = {sys.executable, os.path.realpath(sys.executable)}
        if self.mirror is not None and argv and argv[0] in harness:
            return [str(self.executable), *argv[1:]]
        return list(argv)


# -- what to mirror ----------------------------------------------------------------------------------

def plan(identity: Identity, package: Path, tasks: Path) -> Source:
    """The mirror this harness needs for ``identity``: the base installation always; the venv's
    site-packages, ``package`` and ``tasks`` only where the uid cannot reach them."""
    base = Path(sys.base_prefix).resolve()
    interpreter = Path(sys.executable).resolve()
    if not _under(interpreter, base):
        raise MirrorUnavailable(f"the interpreter {interpreter} is not inside its installation {base}")
    venv = Path(sys.prefix).resolve() if sys.prefix != sys.base_prefix else None
    sites = [Path(s).resolve() for s in site.getsitepackages()] if venv else []
    sites = [s for s in dict.fromkeys(sites) if venv and _under(s, venv) and s.is_dir()]
    package, tasks = package.resolve(), tasks.resolve()
    blocked = set(unreachable(identity, [*sites, package, tasks]))
    copied = tuple(s for s in sites if s in blocked)
    covered = [base, *sites]
    return Source(base, interpreter, sys.version.split()[0], venv, _system_site(venv), copied,
                  tuple(s for s in sites if s not in blocked),
                  package if package in blocked and not any(_under(package, c) for c in covered) else None,
                  tasks if tasks in blocked and not any(_under(tasks, c) for c in covered) else None)


def _system_site(venv: Path | None) -> bool:
    if venv is None:
        return True
    try:
        for line in (venv / "pyvenv.cfg").read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "include-system-site-packages":
                return value.strip().lower() == "true"
    except OSError:
        pass
    return False


def _base_site_dirs(base: Path) -> list[str]:
    paths = sysconfig.get_paths(vars={"base": str(base), "platbase": str(base)})
    return sorted({paths["purelib"], paths["platlib"]})


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def _tree_listing(root: Path) -> str:
    """A digest of every file's name, size and mtime below ``root`` (a package checkout: small)."""
    digest = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            st = os.lstat(os.path.join(folder, name))
            digest.update(f"{os.path.relpath(os.path.join(folder, name), root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


# -- where mirrors live --------------------------------------------------------------------------------

def prepare_home(home: Path) -> Path:
    """Create ``home`` (0755) if needed and check that the agent's uid can traverse every folder on
    the way while nobody but root (or the harness) can change any of them: otherwise another user
    could swap the mirror the agent runs. A sticky world-writable parent (``/var/tmp``) is accepted
    because nobody can rename or remove our folder in it."""
    home = Path(os.path.abspath(home))
    missing = []
    probe = home
    while not os.path.lexists(probe):
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o755)
            os.chmod(folder, 0o755)
        except FileExistsError:
            pass
        except OSError as exc:
            raise MirrorUnavailable(f"cannot create the mirror folder {folder}: {exc.strerror}") from exc
    home = home.resolve()
    trusted = {0, os.geteuid()}
    for folder in [*reversed(home.parents), home]:
        st = os.stat(folder)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid not in trusted:
            raise MirrorUnavailable(f"{folder} (on the way to the Python mirror) is not a folder owned by root")
        writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if writable and (folder == home or not st.st_mode & stat.S_ISVTX):
            raise MirrorUnavailable(f"{folder} (on the way to the Python mirror) is writable by other users")
        if not st.st_mode & stat.S_IXOTH:
            raise MirrorUnavailable(f"{folder} (on the way to the Python mirror) cannot be traversed by other users")
    return home


@contextmanager
def _locked(path: Path):
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# -- building ------------------------------------------------------------------------------------------

def ensure(identity: Identity, source: Source, home: Path) -> Mirror:
    """The finished mirror of ``source`` under ``home``: reused when it starts as ``identity``, else
    built (or rebuilt) once by whoever gets the lock first, in a temporary folder renamed into place."""
    home = prepare_home(home)
    final = home / source.name
    if _usable(Mirror(final, source), identity):
        return Mirror(final, source)
    with _locked(home / f".{source.name}.lock"):
        if _usable(Mirror(final, source), identity):  # another builder finished while we waited
            return Mirror(final, source)
        for leftover in [*home.glob(f".build-{source.name}-*"), *home.glob(f".trash-{source.name}-*")]:
            shutil.rmtree(leftover, ignore_errors=True)  # a builder that died holding the lock
        start = time.monotonic()
        work = Path(tempfile.mkdtemp(prefix=f".build-{source.name}-", dir=home))
        try:
            stats = _build(source, work, final, identity)
            os.chmod(work, 0o755)
            if os.path.lexists(final):  # broken or half-built: out of the way, then gone
                trash = Path(tempfile.mkdtemp(prefix=f".trash-{source.name}-", dir=home))
                os.rename(final, trash / "old")
                shutil.rmtree(trash, ignore_errors=True)
            os.rename(work, final)
        except TreeError as exc:
            shutil.rmtree(work, ignore_errors=True)
            raise MirrorUnavailable(str(exc)) from exc
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        mirror = Mirror(final, source, True, time.monotonic() - start, stats)
        try:
            verify(mirror, identity)
        except MirrorUnavailable:
            shutil.rmtree(final, ignore_errors=True)
            raise
        return mirror


def _usable(mirror: Mirror, identity: Identity) -> bool:
    if not _complete(mirror.root, mirror.source):
        return False
    try:
        verify(mirror, identity)
        return True
    except MirrorUnavailable:
        return False


def _complete(final: Path, source: Source) -> bool:
    try:
        marker = json.loads((final / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("name") == final.name == source.name and (final / "venv" / "bin" / source.executable_name).exists()


def verify(mirror: Mirror, identity: Identity) -> None:
    """Start the mirrored interpreter as ``identity`` (empty environment, from ``/``): it must come
    up with the mirror as its prefix."""
    try:
        done = subprocess.run([str(mirror.python), "-c", VERIFY], env={}, cwd="/", capture_output=True, timeout=60,
                              preexec_fn=partial(become, identity) if identity.uid != os.geteuid() else None)
    except (OSError, subprocess.SubprocessError) as exc:
        raise MirrorUnavailable(f"the mirrored Python does not start: {exc}") from exc
    expected = [str(mirror.root / "venv"), str(mirror.root / "base")]
    if done.returncode != 0 or done.stdout.decode(errors="replace").strip() != json.dumps(expected):
        error = done.stderr.decode(errors="replace").strip().splitlines()
        raise MirrorUnavailable(f"the mirrored Python fails as uid {identity.uid}: "
                                f"{error[-1] if error else done.stdout.decode(errors='replace')[:200]}")


def _build(source: Source, work: Path, final: Path, identity: Identity) -> dict:
    moved = source.moved(final)
    copier = TreeCopier(agent_uid=identity.uid, relocate=lambda p: _relocate(p, moved))
    for src, dst in moved:
        copier.mirror(src, work / dst.relative_to(final))
    _make_venv(source, work / "venv", final)
    marker = {"name": final.name, "source": source.fingerprint(), "built": time.time(), **copier.stats}
    (work / MARKER).write_text(json.dumps(marker, indent=1))
    os.chmod(work / MARKER, 0o644)
    return copier.stats


def _relocate(path: Path, moved: list[tuple[Path, Path]]) -> Path | None:
    for src, dst in moved:
        if _under(path, src):
            return dst / path.relative_to(src)
    return None


def _make_venv(source: Source, venv: Path, final: Path) -> None:
    bin_dir = venv / "bin"
    mkdirs(bin_dir)
    site_dir = venv / "lib" / f"python{source.short_version}" / "site-packages"
    mkdirs(site_dir)
    real = final / "base" / source.interpreter.relative_to(source.base)
    os.symlink(real, bin_dir / source.executable_name)
    for alias in ("python", f"python{source.short_version.split('.')[0]}"):
        os.symlink(source.executable_name, bin_dir / alias)
    write_file(venv / "pyvenv.cfg", f"home = {real.parent}\n"
                                f"include-system-site-packages = {str(source.include_system_site).lower()}\n"
                                f"version = {source.version}\n")
    if source.linked_sites:
        write_file(site_dir / SITES_PTH, "import site; " + "; ".join(f"site.addsitedir({str(s)!r})"
                                                                 for s in source.linked_sites) + "\n")
    if source.package is not None:
        write_file(site_dir / ROOTS_PTH, f"{final / 'roots' / '0'}\n")
    if source.venv is not None:  # the venv's console scripts (pytest, pip, ...), run by the mirror
        real_bin = source.venv / "bin"
        for entry in sorted(os.listdir(real_bin)) if real_bin.is_dir() else []:
            target = bin_dir / entry
            if not os.path.lexists(target):
                copy_script(real_bin / entry, target,
                             lambda p: final / "venv" / "bin" / p.name if p.parent == real_bin else None)
