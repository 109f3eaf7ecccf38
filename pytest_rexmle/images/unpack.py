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
* every entry is charged, whatever it makes: its header and padding bytes count against the byte caps
  (so a folder, an empty file or a link is never free), the entries of an image are counted (``max_entries``,
  each one an inode), names are at most 4096 bytes (255 a component) and 256 folders deep, link targets at
  most 4096 bytes; whiteouts naming ``''``, ``.`` or ``..`` are refused;
* the bytes written per layer and in total are capped (declared sizes checked before writing, actual
  bytes while writing: a sparse member is charged its full logical size and written with its holes, a
  lying entry cannot fill the disk), and the file system must keep ``min_free`` bytes free after each file;
* the layer's stream itself is metered: bytes read that no entry accounts for (an oversized PAX header,
  zeros or junk after the tar's end, which the diff id still hashes) are capped at 8 MiB, so the work done
  for a layer is bounded by its caps, not by how well its bytes compress;
* one deadline covers the whole import.

Bounded by construction: nothing an archive says is trusted for a size, a count or a depth.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
import tarfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, cast

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
MAX_SYMLINKS = 40
CHUNK = 1 << 20
ZEROS = bytes(CHUNK)
#: default caps: an agent image with CUDA and PyTorch is 10-20 GB unpacked
DEFAULT_MAX_LAYER = 64 << 30
DEFAULT_MAX_TOTAL = 128 << 30
#: entries (inodes) of one image: CUDA + PyTorch + an agent is 100-400 thousand
DEFAULT_MAX_ENTRIES = 2_000_000
#: one import, all layers: a 20 GB image unpacks in minutes
DEFAULT_MAX_SECONDS = 4 * 3600
#: what the file system must keep free after each file (the cache is shared with runs' outputs)
DEFAULT_MIN_FREE = 1 << 30
MAX_NAME = 4096  # bytes of a path or a link target (PATH_MAX)
MAX_COMPONENT = 255  # bytes of one name (NAME_MAX)
MAX_DEPTH = 256  # folders an entry may lie under, links resolved
MAX_UNCOUNTED = 8 << 20  # stream bytes no entry accounts for: headers in flight, the tar's end, a tail


class ImageRejected(Exception):
    """The image cannot be unpacked safely; the message names the entry and why."""


@dataclass
class UnpackReport:
    """What extraction neutralised, said by ``rexmle images import`` and kept in the image's manifest."""

    bytes_written: int = 0  # file bytes plus every entry's header and padding: what the caps count
    entries: int = 0
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


class Deadline:
    """One clock for a whole import: every entry, chunk and read checks it, so no archive makes it run on."""

    def __init__(self, seconds: float = DEFAULT_MAX_SECONDS) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds
        #: the wall-clock end, written into the staging folder's name: past it, the folder is stale for sure
        self.wall_end = time.time() + seconds

    def check(self, what: str) -> None:
        if time.monotonic() > self.end:
            raise ImageRejected(f"the import ran past its deadline of {self.seconds:g} s ({what}; "
                                "--max-import-seconds)")


def clean_name(name: str) -> str:
    """A layer entry's name relative to the root (``''`` for the root itself); refuses absolute names,
    ``..`` components and names longer or deeper than any file system holds."""
    if "\0" in name:
        raise ImageRejected(f"entry name {name!r} contains a NUL byte")
    if name.startswith("/"):
        raise ImageRejected(f"entry {name!r} has an absolute name (it would be written outside the image's root)")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ImageRejected(f"entry {name!r} climbs out of the image's root with '..'")
    check_name_size(parts, name)
    return "/".join(parts)


def check_name_size(parts: list[str], name: str) -> None:
    """Refuse a name over ``MAX_NAME`` bytes, a component over ``MAX_COMPONENT`` or deeper than ``MAX_DEPTH``."""
    if len(name.encode("utf-8", "surrogateescape")) > MAX_NAME:
        raise ImageRejected(f"entry {name[:80]!r}... has a name longer than {MAX_NAME} bytes")
    if len(parts) > MAX_DEPTH + 1:
        raise ImageRejected(f"entry {name[:80]!r}... lies {len(parts) - 1} folders deep, more than {MAX_DEPTH}")
    long = next((p for p in parts if len(p.encode("utf-8", "surrogateescape")) > MAX_COMPONENT), None)
    if long is not None:
        raise ImageRejected(f"entry {name[:80]!r} has a component longer than {MAX_COMPONENT} bytes")


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
        if len(done) > MAX_DEPTH + 1:
            raise ImageRejected(f"{rel[:80]!r} resolves (through its links) more than {MAX_DEPTH} folders deep")
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
        remove_tree(path)


def remove_tree(top: Path) -> None:
    """Remove ``top`` and everything under it, read-only folders included, without recursion: a tree
    deeper than Python's recursion limit (which ``shutil.rmtree`` and ``os.walk`` hit) goes as well."""
    stack: list[tuple[str, bool]] = [(os.fspath(top), False)]
    while stack:
        path, emptied = stack.pop()
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(path)
        elif emptied:
            os.rmdir(path)
        else:
            os.chmod(path, 0o700)
            stack.append((path, True))
            with os.scandir(path) as children:
                stack.extend((child.path, False) for child in children)


def _ensure_dirs(root: Path, folder: Path) -> None:
    """Create ``folder`` (inside ``root``) and its missing parents, replacing a non-folder in the way."""
    current = root
    for part in folder.relative_to(root).parts:
        current = current / part
        _make_dir(current)


def _make_dir(path: Path) -> None:
    """A folder at ``path``: a link or a non-folder there is replaced, never followed."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    if not path.exists():
        path.mkdir(mode=0o755)


def check_free(root: Path, size: int, min_free: int, what: str) -> None:
    """Refuse ``what`` (``size`` bytes) when writing it would leave less than ``min_free`` bytes, or almost no
    inodes, on ``root``'s file system (the image cache shares it with runs and other sessions)."""
    fs = os.statvfs(root)
    free = fs.f_bavail * fs.f_frsize
    if free - size < min_free:
        raise ImageRejected(f"{what} ({size} bytes) would leave {max(free - size, 0)} bytes free on the image "
                            f"cache's file system, under the {min_free} bytes kept free")
    if fs.f_files and fs.f_favail < 1000:
        raise ImageRejected(f"{what}: the image cache's file system has only {fs.f_favail} inodes left")


class LayerWriter:
    """Applies layers, lowest first, onto ``root`` under the caps; see the module's docstring."""

    def __init__(self, root: Path, max_layer: int = DEFAULT_MAX_LAYER, max_total: int = DEFAULT_MAX_TOTAL,
                 max_entries: int = DEFAULT_MAX_ENTRIES, deadline: Deadline | None = None,
                 min_free: int = DEFAULT_MIN_FREE) -> None:
        self.root = root
        self.max_layer, self.max_total, self.max_entries = max_layer, max_total, max_entries
        self.deadline = deadline or Deadline()
        self.min_free = min_free
        self.report = UnpackReport()
        self._layer_bytes = 0
        self._added: set[str] = set()  # entries the current layer made (an opaque whiteout keeps those)

    def apply(self, stream: BinaryIO, label: str) -> str:
        """Apply one uncompressed layer read from ``stream``; returns the sha256 of its bytes (its diff id)."""
        meter = _Meter(stream, lambda: self._layer_bytes, self.deadline, label)
        self._layer_bytes = 0
        self._added = set()
        try:
            with tarfile.open(fileobj=cast(BinaryIO, meter), mode="r|") as tar:
                for member in tar:
                    self.deadline.check(label)
                    self._entry(tar, member, label)
            meter.drain()
        except (tarfile.TarError, EOFError, ValueError, zlib.error, gzip.BadGzipFile) as exc:
            raise ImageRejected(f"{label}: not a readable tar layer: {exc}") from None
        return "sha256:" + meter.digest.hexdigest()

    # -- one entry ---------------------------------------------------------------------------------
    def _entry(self, tar: tarfile.TarFile, member: tarfile.TarInfo, label: str) -> None:
        rel = clean_name(member.name)
        self._count(member, rel or ".", label)
        if not rel:
            return  # the root itself: its mode stays ours
        parent, last = parent_inside(self.root, rel)
        if last == OPAQUE:
            self._opaque(parent)
            return
        if last.startswith(WHITEOUT):
            self._whiteout(parent, last, rel)
            return
        _ensure_dirs(self.root, parent)
        path = parent / last
        self._added.add(os.fspath(path))
        if member.isdir():
            _make_dir(path)
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

    def _count(self, member: tarfile.TarInfo, rel: str, label: str) -> None:
        """Charge the entry itself: one more of ``max_entries``, and its header and padding bytes against the
        byte caps (a regular file's own bytes are charged as they are written)."""
        self.report.entries += 1
        if self.report.entries > self.max_entries:
            raise ImageRejected(f"{label}: entry {rel!r} is past the image's cap of {self.max_entries} entries "
                                "(--max-entries)")
        if len(member.linkname.encode("utf-8", "surrogateescape")) > MAX_NAME:
            raise ImageRejected(f"{label}: entry {rel!r} links to a name longer than {MAX_NAME} bytes")
        span = -(-member.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE if member.isreg() or member.type not in tarfile.SUPPORTED_TYPES else 0
        body = member.size if member.isreg() else 0
        header = max(member.offset_data - member.offset, tarfile.BLOCKSIZE)
        self._charge(header + span - body, rel, label, what="takes")

    def _whiteout(self, parent: Path, last: str, rel: str) -> None:
        name = last[len(WHITEOUT):]
        if name in ("", ".", ".."):  # would remove the folder holding it, or the one above (the root's: ours)
            raise ImageRejected(f"whiteout {rel!r} names {name!r}, not an entry of its folder")
        target = parent / name
        if target.is_symlink() or target.exists():
            _remove(target)

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
        self._charge(member.size, rel, label, what="declares", check_only=True)
        check_free(self.root, member.size, self.min_free, f"{label}: entry {rel!r}")
        source = tar.extractfile(member)
        assert source is not None  # a regular member always has a body
        sparse = member.issparse()  # charged at its logical size above, written with its holes kept
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            while chunk := source.read(CHUNK):
                self._charge(len(chunk), rel, label)
                self.deadline.check(f"{label}, {rel!r}")
                if sparse and chunk == ZEROS[:len(chunk)]:
                    out.seek(len(chunk), os.SEEK_CUR)
                else:
                    out.write(chunk)
            out.truncate()  # a hole at the end: the file still ends at its logical size
        os.chmod(path, self._mode(member, rel))

    def _mode(self, member: tarfile.TarInfo, rel: str) -> int:
        mode = member.mode & 0o7777
        if not member.isdir() and mode & (stat.S_ISUID | stat.S_ISGID):
            self.report.setuid_stripped.append(rel)
        # no setuid/setgid, and nobody but the importer writes the shared copy (a world-writable folder of
        # the image would let any local user plant files in every later run)
        return mode & 0o1755

    def _charge(self, size: int, rel: str, label: str, what: str = "writes", check_only: bool = False) -> None:
        layer = self._layer_bytes + size
        total = self.report.bytes_written + size
        if layer > self.max_layer:
            raise ImageRejected(f"{label}: entry {rel!r} {what} {size} bytes, past the per-layer cap of "
                                f"{self.max_layer} bytes (--max-layer-size)")
        if total > self.max_total:
            raise ImageRejected(f"{label}: entry {rel!r} {what} {size} bytes, past the image's cap of "
                                f"{self.max_total} bytes (--max-image-size)")
        if not check_only:
            self._layer_bytes, self.report.bytes_written = layer, total


class _Meter:
    """The layer's stream as tarfile reads it: hashed (a layer's diff id is the sha256 of its tar), timed,
    and metered: bytes read beyond what the layer's entries were charged (``charged()``) may not exceed
    ``MAX_UNCOUNTED``, so neither a huge header nor a tail after the tar's end is read or hashed unbounded."""

    def __init__(self, stream: BinaryIO, charged: Callable[[], int], deadline: Deadline, label: str) -> None:
        self.stream, self.charged, self.deadline, self.label = stream, charged, deadline, label
        self.digest = hashlib.sha256()
        self.count = 0

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0 or size > CHUNK:
            size = CHUNK  # tarfile reads in records; a caller asking for all is served in chunks
        data = self.stream.read(size)
        self.count += len(data)
        self.digest.update(data)
        if self.count - self.charged() > MAX_UNCOUNTED:
            raise ImageRejected(f"{self.label}: more than {MAX_UNCOUNTED} bytes of the layer are neither an entry "
                                "nor a file's contents (an oversized header, or data after the tar's end)")
        self.deadline.check(self.label)
        return data

    def drain(self) -> None:
        """Hash what follows the tar's end-of-archive blocks (part of the diff id), within the same meter."""
        while self.read(CHUNK):
            pass
