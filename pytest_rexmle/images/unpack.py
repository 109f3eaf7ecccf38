"""Applying an image's layers to a root folder without trusting them.

A layer is a tar archive written by whoever built the image. Extracting it naively lets it write outside
the root (``../../etc/cron.d/x``, an absolute name, a symlink to ``/`` followed by a file through it),
create device nodes, or plant setuid binaries. So every entry is placed by :class:`LayerWriter` here:

* names are relative and free of ``..``; an absolute name or a ``..`` component refuses the whole image;
* the folders leading to an entry are resolved inside the root only (a symlink in them is followed as if
  the root were ``/``, never onto the host), and the entry itself replaces whatever was at its place,
  never writes through a symlink;
* hard links must point at a regular file already inside the root;
* device nodes and FIFOs are skipped (counted), setuid/setgid bits are dropped (counted), ownership is
  the importer's;
* whiteouts (``.wh.NAME``) remove a lower layer's entry, opaque whiteouts (``.wh..wh..opq``) a folder's
  lower contents (OCI image spec, "Representing Changes");
* the bytes written per layer and in total are capped (declared sizes checked before writing, actual
  bytes while writing: a sparse or lying entry cannot fill the disk).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
MAX_SYMLINKS = 40
CHUNK = 1 << 20
#: default caps: an agent image with CUDA and PyTorch is 10-20 GB unpacked
DEFAULT_MAX_LAYER = 64 << 30
DEFAULT_MAX_TOTAL = 128 << 30


class ImageRejected(Exception):
    """The image cannot be unpacked safely; the message names the entry and why."""


@dataclass
class UnpackReport:
    """What extraction neutralised, said by ``rexmle images import`` and kept in the image's manifest."""

    bytes_written: int = 0
    devices_skipped: list[str] = field(default_factory=list)
    setuid_stripped: list[str] = field(default_factory=list)

    def notes(self) -> list[str]:
        out = []
        if self.devices_skipped:
            out.append(f"skipped {len(self.devices_skipped)} device node(s)/FIFO(s) (e.g. {self.devices_skipped[0]})")
        if self.setuid_stripped:
            out.append(f"dropped setuid/setgid bits of {len(self.setuid_stripped)} file(s) "
                       f"(e.g. {self.setuid_stripped[0]})")
        return out


def clean_name(name: str) -> str:
    """A layer entry's name relative to the root (``''`` for the root itself); refuses absolute names and
    ``..`` components."""
    if "\0" in name:
        raise ImageRejected(f"entry name {name!r} contains a NUL byte")
    if name.startswith("/"):
        raise ImageRejected(f"entry {name!r} has an absolute name (it would be written outside the image's root)")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ImageRejected(f"entry {name!r} climbs out of the image's root with '..'")
    return "/".join(parts)


def resolve_inside(root: Path, rel: str) -> Path:
    """The host path of ``rel`` with every symlink along it resolved as if ``root`` were ``/``: the result
    lies inside ``root`` whatever the links say. The last component is resolved too."""
    root_s = os.fspath(root)
    todo = [p for p in rel.split("/") if p not in ("", ".")]
    done: list[str] = []
    follows = 0
    while todo:
        part = todo.pop(0)
        if part == "..":
            if done:
                done.pop()
            continue
        here = os.path.join(root_s, *done, part)
        if os.path.islink(here):
            follows += 1
            if follows > MAX_SYMLINKS:
                raise ImageRejected(f"too many levels of symbolic links resolving {rel!r}")
            target = os.readlink(here)
            if target.startswith("/"):
                done = []
            todo = [p for p in target.split("/") if p not in ("", ".")] + todo
            continue
        done.append(part)
    return Path(root_s, *done)


def parent_inside(root: Path, rel: str) -> tuple[Path, str]:
    """The resolved folder holding ``rel`` and its last name: the entry is then placed there, replacing
    whatever is there (a symlink included) rather than following it."""
    head, _, last = rel.rpartition("/")
    parent = resolve_inside(root, head) if head else root
    return parent, last


def _remove(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path)


def _ensure_dirs(root: Path, folder: Path) -> None:
    """Create ``folder`` (inside ``root``) and its missing parents, replacing a non-folder in the way."""
    rel = folder.relative_to(root)
    current = root
    for part in rel.parts:
        current = current / part
        if current.is_symlink() or (current.exists() and not current.is_dir()):
            current.unlink()
        if not current.exists():
            current.mkdir(mode=0o755)


class LayerWriter:
    """Applies layers, lowest first, onto ``root`` under the caps; see the module's docstring."""

    def __init__(self, root: Path, max_layer: int = DEFAULT_MAX_LAYER, max_total: int = DEFAULT_MAX_TOTAL) -> None:
        self.root = root
        self.max_layer, self.max_total = max_layer, max_total
        self.report = UnpackReport()
        self._layer_bytes = 0
        self._added: set[str] = set()  # entries the current layer made (an opaque whiteout keeps those)

    def apply(self, stream: BinaryIO, label: str) -> str:
        """Apply one uncompressed layer read from ``stream``; returns the sha256 of its bytes (its diff id)."""
        hashed = _HashingReader(stream)
        self._layer_bytes = 0
        self._added = set()
        try:
            with tarfile.open(fileobj=hashed, mode="r|") as tar:
                for member in tar:
                    self._entry(tar, member, label)
        except tarfile.TarError as exc:
            raise ImageRejected(f"{label}: not a readable tar layer: {exc}") from None
        hashed.drain()
        return "sha256:" + hashed.digest.hexdigest()

    # -- one entry ---------------------------------------------------------------------------------
    def _entry(self, tar: tarfile.TarFile, member: tarfile.TarInfo, label: str) -> None:
        rel = clean_name(member.name)
        if not rel:
            return  # the root itself: its mode stays ours
        parent, last = parent_inside(self.root, rel)
        if last == OPAQUE:
            self._opaque(parent)
            return
        if last.startswith(WHITEOUT):
            target = parent / last[len(WHITEOUT):]
            if target.is_symlink() or target.exists():
                _remove(target)
            return
        _ensure_dirs(self.root, parent)
        path = parent / last
        self._added.add(os.fspath(path))
        if member.isdir():
            if path.is_symlink() or (path.exists() and not path.is_dir()):
                path.unlink()
            if not path.exists():
                path.mkdir(mode=0o755)
            os.chmod(path, self._mode(member, rel) | 0o700)  # the importer can always write it
            return
        if path.is_symlink() or path.exists():
            _remove(path)
        if member.issym():
            os.symlink(member.linkname, path)  # resolved later only inside the root (here and in the sandbox)
        elif member.islnk():
            self._hardlink(member, path, rel)
        elif member.isreg():
            self._file(tar, member, path, rel, label)
        else:  # character/block devices, FIFOs, anything else: never created
            self.report.devices_skipped.append(rel)

    def _opaque(self, folder: Path) -> None:
        """Remove what lower layers put in ``folder``; keep what this layer already added there."""
        if not folder.is_dir() or folder.is_symlink():
            return
        for child in folder.iterdir():
            if os.fspath(child) not in self._added:
                _remove(child)

    def _hardlink(self, member: tarfile.TarInfo, path: Path, rel: str) -> None:
        target_rel = clean_name(member.linkname)
        parent, last = parent_inside(self.root, target_rel)
        target = parent / last
        if not target_rel or target.is_symlink() or not target.is_file():
            raise ImageRejected(f"hard link {rel!r} points at {member.linkname!r}, not a regular file inside the image")
        os.link(target, path)

    def _file(self, tar: tarfile.TarFile, member: tarfile.TarInfo, path: Path, rel: str, label: str) -> None:
        self._charge(member.size, rel, label, declared=True)
        source = tar.extractfile(member)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            while chunk := source.read(CHUNK):
                self._charge(len(chunk), rel, label)
                out.write(chunk)
        os.chmod(path, self._mode(member, rel))

    def _mode(self, member: tarfile.TarInfo, rel: str) -> int:
        mode = member.mode & 0o7777
        if not member.isdir() and mode & (stat.S_ISUID | stat.S_ISGID):
            self.report.setuid_stripped.append(rel)
        # no setuid/setgid, and nobody but the importer writes the shared copy (a world-writable folder of
        # the image would let any local user plant files in every later run)
        return mode & 0o1755

    def _charge(self, size: int, rel: str, label: str, declared: bool = False) -> None:
        layer = self._layer_bytes + size
        total = self.report.bytes_written + size
        what = "declares" if declared else "writes"
        if layer > self.max_layer:
            raise ImageRejected(f"{label}: entry {rel!r} {what} {size} bytes, past the per-layer cap of "
                                f"{self.max_layer} bytes (--max-layer-size)")
        if total > self.max_total:
            raise ImageRejected(f"{label}: entry {rel!r} {what} {size} bytes, past the image's cap of "
                                f"{self.max_total} bytes (--max-image-size)")
        if not declared:
            self._layer_bytes, self.report.bytes_written = layer, total


class _HashingReader:
    """A read-only stream that hashes what passes through (a layer's diff id is the sha256 of its tar)."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.digest = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.digest.update(data)
        return data

    def drain(self) -> None:
        while self.read(CHUNK):
            pass
