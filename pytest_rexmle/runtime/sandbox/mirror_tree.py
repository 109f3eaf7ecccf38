"""Recreating a folder tree for another uid: folders 0755, files hard-linked when that is safe.

Used by :mod:`.mirror` to give the agent's uid a Python it can reach. A hard link shares the inode
(mode, owner, ACL) with its source, so it is made only for a file owned by root (or the harness) that
nobody else can write and that carries no setuid/setgid bit; anything else is copied with those bits
off. Paths the finished tree must name (absolute symlinks, ``#!`` lines, ELF run paths) are rewritten
to their place in it, so nothing reaches back into the source.
"""

from __future__ import annotations

import os
import shutil
import stat
import struct
from pathlib import Path
from typing import Callable

from .elf import ELF_MAGIC, ElfError, relocate_run_paths, run_paths

SCRIPT_LIMIT = 1 << 20

#: a source path -> where it lies in the finished tree (None: outside what is mirrored)
Relocate = Callable[[Path], "Path | None"]


class TreeError(RuntimeError):
    """A file of the tree cannot be made safe to run from its new place."""


def copy_script(src: Path, dst: Path, relocate: Relocate) -> bool:
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


def mkdirs(path: Path) -> None:
    """``mkdir -p`` with mode 0755 for each folder it creates (whatever the umask)."""
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        os.mkdir(folder, 0o755)
        os.chmod(folder, 0o755)


def write_file(path: Path, text: str) -> None:
    """A small file everyone may read and only its owner write."""
    path.write_text(text)
    os.chmod(path, 0o644)


class TreeCopier:
    """Recreates a folder tree for the agent: folders 0755, files hard-linked when that is safe and
    possible, else copied; never a setuid/setgid bit, never a file the agent can write."""

    def __init__(self, agent_uid: int, relocate: Relocate = lambda p: None) -> None:
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
            mkdirs(target)
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
        if src.parent.name == "bin" and mode & 0o111 and copy_script(src, dst, self.relocate):
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
            raise TreeError(str(exc)) from exc
        os.chmod(dst, mode & 0o755)
        self.stats["patched"] += 1
        self.stats["bytes_copied"] += len(data)
        return True


def _names_under(entry: str, root: Path) -> bool:
    if not entry.startswith("/"):
        return False
    path = Path(os.path.normpath(entry))
    return path == root or root in path.parents
