"""Safe extraction of zip and tar archives downloaded from the internet.

A release archive is untrusted input: a member named ``../../.bashrc`` or ``/etc/x`` (zip-slip), a link
pointing outside the folder, a device file, or a "zip bomb" would otherwise write anywhere or fill the
disk. Every member is therefore checked before anything is written, sizes are limited both as declared
and as actually streamed, and links are never materialised (a link to a place inside the folder is
skipped; one pointing outside rejects the whole archive). Extraction goes to a temporary
sibling folder that is renamed into place, so an interrupted extraction never looks complete.
"""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from .download import require_space
from .errors import UnsafeArchive

COPY_CHUNK = 1 << 20
SKIP_PREFIXES = ("__MACOSX/",)


@dataclass(frozen=True)
class Limits:
    """Upper bounds an archive must respect (defaults are far above every real release)."""

    max_total_bytes: int = 200 * 1024 ** 3
    max_members: int = 2_000_000
    max_ratio: float = 2000.0  # uncompressed / compressed, zip only, for members above 1 MiB


def _safe_relpath(name: str, archive: Path) -> PurePosixPath | None:
    """The member's path relative to the destination, or raise when it would leave it."""
    cleaned = name.replace("\\", "/")
    if cleaned.startswith("/") or (len(cleaned) > 1 and cleaned[1] == ":"):
        raise UnsafeArchive(f"{archive.name}: member {name!r} has an absolute path; refusing to extract")
    parts = [p for p in PurePosixPath(cleaned).parts if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise UnsafeArchive(f"{archive.name}: member {name!r} leaves the extraction folder ('..'); refusing to extract")
    if not parts or cleaned.startswith(SKIP_PREFIXES):
        return None
    return PurePosixPath(*parts)


def _link_inside(member: PurePosixPath, target: str, hard: bool) -> bool:
    target = target.replace("\\", "/")
    if target.startswith("/"):
        return False
    base = PurePosixPath() if hard else member.parent
    depth = 0
    for part in (base / target).parts:
        depth += -1 if part == ".." else 0 if part == "." else 1
        if depth < 0:
            return False
    return True


def _check_totals(archive: Path, count: int, total: int, limits: Limits) -> None:
    if count > limits.max_members:
        raise UnsafeArchive(f"{archive.name}: {count} members exceed the limit of {limits.max_members}")
    if total > limits.max_total_bytes:
        raise UnsafeArchive(f"{archive.name}: {total} uncompressed bytes exceed the limit of {limits.max_total_bytes}")


def _copy_limited(src, dst: Path, budget: list[int], archive: Path, name: str) -> None:
    """Stream one member, counting real bytes against the archive budget (declared sizes can lie)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with dst.open("wb") as out:
        while True:
            block = src.read(COPY_CHUNK)
            if not block:
                break
            budget[0] -= len(block)
            if budget[0] < 0:
                raise UnsafeArchive(f"{archive.name}: member {name!r} expands beyond the size limit")
            out.write(block)


def _write_plan(archive: Path, dest: Path, plan: list, total: int, limits: Limits,
                open_member: Callable[[Any], IO[bytes] | None], name_of: Callable[[Any], str]) -> None:
    """Write a checked extraction plan (``(relative path, member or None for a folder)``) under the limits."""
    _check_totals(archive, len(plan), total, limits)
    require_space(dest.parent, total, f"extracting {archive.name}")
    budget = [limits.max_total_bytes]
    for rel, member in plan:
        target = dest.joinpath(*rel.parts)
        if member is None:
            target.mkdir(parents=True, exist_ok=True)
            continue
        src = open_member(member)
        if src is None:  # tar members without data
            continue
        with src:
            _copy_limited(src, target, budget, archive, name_of(member))


@dataclass(frozen=True)
class _Entry:
    """One archive member as zip and tar both describe it."""

    member: Any
    name: str
    link: str | None        # a link's target; None for anything else
    hard: bool
    folder: bool
    size: int
    refusal: str | None     # why the member is refused outright (zip bomb, device file), if it is


def _plan(archive: Path, entries: Iterable[_Entry]) -> tuple[list, int]:
    """The checked extraction plan of one archive and its declared size: unsafe paths dropped, links that
    stay inside skipped, links that leave the folder or refused members an error."""
    plan = []
    total = 0
    for entry in entries:
        rel = _safe_relpath(entry.name, archive)
        if rel is None:
            continue
        if entry.link is not None:
            if not _link_inside(rel, entry.link, hard=entry.hard):
                raise UnsafeArchive(f"{archive.name}: link {entry.name!r} points outside the folder ({entry.link!r})")
            continue
        if entry.folder:
            plan.append((rel, None))
            continue
        if entry.refusal:
            raise UnsafeArchive(f"{archive.name}: member {entry.name!r} {entry.refusal}")
        total += entry.size
        plan.append((rel, entry.member))
    return plan, total


def _zip_entries(zf: zipfile.ZipFile, limits: Limits) -> Iterator[_Entry]:
    for info in zf.infolist():
        link = zf.read(info).decode("utf-8", "replace") if stat.S_ISLNK(info.external_attr >> 16) else None
        bomb = info.file_size > 1 << 20 and info.file_size > limits.max_ratio * max(info.compress_size, 1)
        yield _Entry(info, info.filename, link, False, info.is_dir(), info.file_size,
                     f"has a compression ratio above {limits.max_ratio:g} (zip bomb?)" if bomb else None)


def _tar_entries(tf: tarfile.TarFile) -> Iterator[_Entry]:
    for m in tf.getmembers():
        link = m.linkname if m.issym() or m.islnk() else None
        special = link is None and not m.isdir() and not m.isfile()
        yield _Entry(m, m.name, link, m.islnk(), m.isdir(), m.size,
                     "is a device, FIFO or other special file" if special else None)


def _extract_zip(archive: Path, dest: Path, limits: Limits) -> None:
    with zipfile.ZipFile(archive) as zf:
        plan, total = _plan(archive, _zip_entries(zf, limits))
        _write_plan(archive, dest, plan, total, limits, zf.open, lambda info: info.filename)


def _extract_tar(archive: Path, dest: Path, limits: Limits) -> None:
    with tarfile.open(archive) as tf:
        plan, total = _plan(archive, _tar_entries(tf))
        _write_plan(archive, dest, plan, total, limits, tf.extractfile, lambda m: m.name)


def safe_extract(archive: Path, dest: Path, limits: Limits | None = None) -> None:
    """Extract ``archive`` into the new folder ``dest`` (must not exist), atomically."""
    limits = limits or Limits()
    if dest.exists():
        raise FileExistsError(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".extract-{dest.name}.", dir=dest.parent))
    try:
        if zipfile.is_zipfile(archive):
            _extract_zip(archive, tmp, limits)
        elif tarfile.is_tarfile(archive):
            _extract_tar(archive, tmp, limits)
        else:
            raise UnsafeArchive(f"{archive.name}: neither a zip nor a tar archive")
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
