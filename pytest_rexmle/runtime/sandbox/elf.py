"""Reading and rewriting the run path (``DT_RUNPATH``/``DT_RPATH``) of an ELF file, in place.

A Python built with ``--enable-shared`` (pyenv's default) records where its ``libpython`` lives as an
absolute run path — ``/root/.pyenv/versions/3.11.7/lib`` here. A mirror of that installation would
still look there first (and find nothing, since the agent's uid cannot enter ``/root``), so the mirror's
copies get ``$ORIGIN``-relative run paths instead: the loader then finds the mirrored library next to
the mirrored binary. The new string is written over the old one in ``.dynstr`` and padded with NULs, so
it must not be longer; an ``$ORIGIN`` path to a nearby folder is shorter than the absolute one.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

ELF_MAGIC = b"\x7fELF"
PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_STRTAB, DT_RPATH, DT_RUNPATH = 0, 5, 15, 29


class ElfError(ValueError):
    """Not an ELF file we can read, or a run path that cannot be rewritten in place."""


@dataclass(frozen=True)
class RunPath:
    """One run-path string of a file: where it lies in the file and what it says."""
    offset: int
    value: str

    @property
    def entries(self) -> list[str]:
        return [e for e in self.value.split(":") if e]


def is_elf(path: Path | str) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == ELF_MAGIC
    except OSError:
        return False


def run_paths(data: bytes) -> list[RunPath]:
    """Every ``DT_RPATH``/``DT_RUNPATH`` string of the ELF image ``data`` (empty: none)."""
    if data[:4] != ELF_MAGIC or len(data) < 64:
        raise ElfError("not an ELF file")
    wide = {1: False, 2: True}.get(data[4])
    order = {1: "<", 2: ">"}.get(data[5])
    if wide is None or order is None:
        raise ElfError("unknown ELF class or byte order")
    if wide:
        phoff, = struct.unpack_from(order + "Q", data, 32)
        phentsize, phnum = struct.unpack_from(order + "HH", data, 54)
        phdr, dyn = order + "IIQQQQQQ", order + "qQ"
    else:
        phoff, = struct.unpack_from(order + "I", data, 28)
        phentsize, phnum = struct.unpack_from(order + "HH", data, 42)
        phdr, dyn = order + "IIIIIIII", order + "iI"
    loads, dynamic = [], None
    for i in range(phnum):
        fields = struct.unpack_from(phdr, data, phoff + i * phentsize)
        if wide:
            p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = fields[:6]
        else:
            p_type, p_offset, p_vaddr, _paddr, p_filesz = fields[:5]
        if p_type == PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return []
    strtab, wanted = None, []
    step = struct.calcsize(dyn)
    for pos in range(dynamic[0], dynamic[0] + dynamic[1] - step + 1, step):
        tag, value = struct.unpack_from(dyn, data, pos)
        if tag == DT_NULL:
            break
        if tag == DT_STRTAB:
            strtab = value
        elif tag in (DT_RPATH, DT_RUNPATH):
            wanted.append(value)
    if not wanted:
        return []
    if strtab is None:
        raise ElfError("a run path but no string table")
    base = next((off + strtab - vaddr for vaddr, off, size in loads if vaddr <= strtab < vaddr + size), None)
    if base is None:
        raise ElfError("the string table lies outside every loaded segment")
    out = []
    for index in wanted:
        start = base + index
        end = data.index(b"\0", start)
        out.append(RunPath(start, data[start:end].decode("utf-8", "surrogateescape")))
    return out


def relocate_run_paths(path: Path, source_dir: Path, moved: list[Path]) -> list[str]:
    """Rewrite, in the file ``path`` (a private copy), every run-path entry under one of ``moved``
    as ``$ORIGIN``-relative to ``source_dir`` (the folder the original file lives in: the mirror keeps
    the layout, so the relative way is the same). Returns the new strings; raises :class:`ElfError`
    when a new string would be longer than the old one."""
    data = path.read_bytes()
    changed = []
    with open(path, "r+b") as fh:
        for run_path in run_paths(data):
            entries = [_relative(entry, source_dir, moved) for entry in run_path.entries]
            value = ":".join(entries)
            if value == run_path.value:
                continue
            encoded = value.encode("utf-8", "surrogateescape")
            old_length = len(run_path.value.encode("utf-8", "surrogateescape"))
            if len(encoded) > old_length:
                raise ElfError(f"{path}: the relocated run path {value!r} is longer than {run_path.value!r}")
            fh.seek(run_path.offset)
            fh.write(encoded.ljust(old_length, b"\0"))
            changed.append(value)
    return changed


def _relative(entry: str, source_dir: Path, moved: list[Path]) -> str:
    if not entry.startswith("/"):
        return entry  # already $ORIGIN-relative (or relative to the working directory: left alone)
    target = Path(os.path.normpath(entry))
    if not any(target == root or root in target.parents for root in moved):
        return entry
    rel = os.path.relpath(target, source_dir)
    return "$ORIGIN" if rel == "." else f"$ORIGIN/{rel}"
