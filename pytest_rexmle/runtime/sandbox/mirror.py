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
  is looked up in the unreachable place.
* ``venv/``: a small virtual environment whose ``pyvenv.cfg`` ``home`` is ``base/bin``, so the
  mirrored interpreter behaves as the harness's venv: the venv's site-packages are named in a ``.pth``
  (``site.addsitedir``) when the agent reaches them, else mirrored here; its scripts are copied with
  the mirrored interpreter in their ``#!``.
* ``roots/``: this package's folder and the task registry, only when the agent cannot reach them.
* ``rexmle-mirror.json``, written last. A mirror is built in a temporary folder beside the final one,
  under a file lock (several xdist workers and sessions race for it), and renamed into place; one
  without its marker is half-built or broken and is rebuilt.

The key names the source interpreter (path, size and mtime of the binary, version), the mtime of the
site-packages folders it copies (a ``pip install`` changes them) and the content listing of copied
package roots, so an upgraded Python gets a new mirror. Old mirrors are not removed (a running agent
may use one); with hard links they cost inodes, not data.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import site
import stat
import struct
import subprocess
import sys
import sysconfig
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .elf import ELF_MAGIC, ElfError, relocate_run_paths, run_paths
from .identity import Identity, unreachable

FORMAT = 1
MARKER = "rexmle-mirror.json"
SITES_PTH = "_rexmle_sites.pth"
ROOTS_PTH = "00_rexmle_roots.pth"
SCRIPT_LIMIT = 1 << 20
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

    @property
    def name(self) -> str:
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
    """The finished mirror of ``source`` under ``home``, built once (whoever gets the lock first) and
    checked by running it as ``identity``."""
    home = prepare_home(home)
    final = home / source.name
    if _complete(final, source):
        return Mirror(final, source)
    with _locked(home / f".{source.name}.lock"):
        if _complete(final, source):
            return Mirror(final, source)
        for leftover in home.glob(f".build-{source.name}-*"):  # a builder that died holding the lock
            shutil.rmtree(leftover, ignore_errors=True)
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


def _complete(final: Path, source: Source) -> bool:
    try:
        marker = json.loads((final / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("name") == final.name == source.name and (final / "venv" / "bin" / source.executable_name).exists()


def verify(mirror: Mirror, identity: Identity) -> None:
    """Start the mirrored interpreter as ``identity`` (empty environment, from ``/``): it must come
    up with the mirror as its prefix."""
    def switch() -> None:
        os.setgroups([])
        os.setresgid(identity.gid, identity.gid, identity.gid)
        os.setresuid(identity.uid, identity.uid, identity.uid)

    try:
        done = subprocess.run([str(mirror.python), "-c", VERIFY], env={}, cwd="/", capture_output=True, timeout=60,
                              preexec_fn=switch if identity.uid != os.geteuid() else None)
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
    _mkdirs(bin_dir)
    site_dir = venv / "lib" / f"python{source.short_version}" / "site-packages"
    _mkdirs(site_dir)
    real = final / "base" / source.interpreter.relative_to(source.base)
    os.symlink(real, bin_dir / source.executable_name)
    for alias in ("python", f"python{source.short_version.split('.')[0]}"):
        os.symlink(source.executable_name, bin_dir / alias)
    _write(venv / "pyvenv.cfg", f"home = {real.parent}\n"
                                f"include-system-site-packages = {str(source.include_system_site).lower()}\n"
                                f"version = {source.version}\n")
    if source.linked_sites:
        _write(site_dir / SITES_PTH, "import site; " + "; ".join(f"site.addsitedir({str(s)!r})"
                                                                 for s in source.linked_sites) + "\n")
    if source.package is not None:
        _write(site_dir / ROOTS_PTH, f"{final / 'roots' / '0'}\n")
    if source.venv is not None:  # the venv's console scripts (pytest, pip, ...), run by the mirror
        real_bin = source.venv / "bin"
        for entry in sorted(os.listdir(real_bin)) if real_bin.is_dir() else []:
            target = bin_dir / entry
            if not os.path.lexists(target):
                _copy_script(real_bin / entry, target,
                             lambda p: final / "venv" / "bin" / p.name if p.parent == real_bin else None)


def _copy_script(src: Path, dst: Path, relocate) -> bool:
    """Copy a ``#!`` script whose interpreter ``relocate`` maps, naming the mapped one; False if not one."""
    try:
        st = os.lstat(src)
        if not stat.S_ISREG(st.st_mode) or st.st_size > SCRIPT_LIMIT:
            return False
        data = src.read_bytes()
    except OSError:
        return False
    if not data.startswith(b"#!"):
        return False
    first, _, rest = data.partition(b"\n")
    interpreter, _, args = first[2:].strip().partition(b" ")
    mapped = relocate(Path(os.fsdecode(interpreter))) if interpreter.startswith(b"/") else None
    if mapped is None:
        return False
    line = b"#!" + os.fsencode(str(mapped)) + (b" " + args if args else b"")
    dst.write_bytes(line + b"\n" + rest)
    os.chmod(dst, stat.S_IMODE(st.st_mode) & 0o755)
    return True


def _mkdirs(path: Path) -> None:
    """``mkdir -p`` with mode 0755 for each folder it creates (whatever the umask)."""
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        os.mkdir(folder, 0o755)
        os.chmod(folder, 0o755)


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    os.chmod(path, 0o644)


class TreeCopier:
    """Recreates a folder tree for the agent: folders 0755, files hard-linked when that is safe and
    possible, else copied; never a setuid/setgid bit, never a file the agent can write."""

    def __init__(self, agent_uid: int, relocate=lambda p: None) -> None:
        self.agent_uid = agent_uid
        self.relocate = relocate  # source path -> its place in the finished mirror (or None)
        self._root = Path("/")
        self.stats = {"linked": 0, "copied": 0, "patched": 0, "links": 0, "folders": 0, "skipped": 0, "bytes_copied": 0}

    def mirror(self, src: Path, dst: Path) -> None:
        self._root = src
        device = os.stat(src).st_dev
        for folder, dirs, files in os.walk(src):
            here = Path(folder)
            target = dst / here.relative_to(src)
            _mkdirs(target)
            self.stats["folders"] += 1
            for name in list(dirs):
                if os.path.islink(here / name):  # os.walk lists links to folders here, without entering them
                    dirs.remove(name)
                    files.append(name)
            for name in files:
                self._entry(here / name, target / name, device)

    def _entry(self, src: Path, dst: Path, device: int) -> None:
        st = os.lstat(src)
        if stat.S_ISLNK(st.st_mode):
            link = os.readlink(src)
            mapped = self.relocate(Path(link)) if os.path.isabs(link) else None
            os.symlink(str(mapped) if mapped else link, dst)
            self.stats["links"] += 1
            return
        if not stat.S_ISREG(st.st_mode):  # FIFOs, sockets, devices: nothing an interpreter needs
            self.stats["skipped"] += 1
            return
        mode = stat.S_IMODE(st.st_mode)
        if src.parent.name == "bin" and mode & 0o111 and _copy_script(src, dst, self.relocate):
            self.stats["patched"] += 1
            return
        if (".so" in src.name or mode & 0o111) and self._relocated_elf(src, dst, mode):
            return
        safe = (st.st_uid in (0, os.geteuid()) and st.st_uid != self.agent_uid
                and not mode & (stat.S_ISUID | stat.S_ISGID | stat.S_IWGRP | stat.S_IWOTH))
        if safe and st.st_dev == device:
            try:
                os.link(src, dst, follow_symlinks=False)
                self.stats["linked"] += 1
                return
            except OSError:  # another filesystem below a mount point, or links refused: copy
                pass
        shutil.copyfile(src, dst, follow_symlinks=False)
        os.chmod(dst, mode & 0o755)
        self.stats["copied"] += 1
        self.stats["bytes_copied"] += st.st_size

    def _relocated_elf(self, src: Path, dst: Path, mode: int) -> bool:
        """An ELF file whose run path names a mirrored folder: a private copy with ``$ORIGIN`` paths."""
        try:
            with open(src, "rb") as fh:
                if fh.read(4) != ELF_MAGIC:
                    return False
                fh.seek(0)
                data = fh.read()
            paths = run_paths(data)
        except (OSError, ElfError, struct.error):
            return False
        # made relative only within the tree being mirrored: only there is the layout the same
        if not any(_names_under(entry, self._root) for path in paths for entry in path.entries):
            return False
        dst.write_bytes(data)
        try:
            relocate_run_paths(dst, src.parent, [self._root])
        except ElfError as exc:
            raise MirrorUnavailable(str(exc)) from exc
        os.chmod(dst, mode & 0o755)
        self.stats["patched"] += 1
        self.stats["bytes_copied"] += len(data)
        return True


def _names_under(entry: str, root: Path) -> bool:
    return entry.startswith("/") and _under(Path(os.path.normpath(entry)), root)
