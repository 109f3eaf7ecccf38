"""Reading what an agent left behind as the hostile input it is.

Everything in a run folder after the runtime returns was written by the agent under test, and an agent
that wants a better score (or a dead session) has every reason to leave traps: a FIFO where the host
expects a JSON file (an endless ``read``), a symbolic link to ``/dev/zero`` (an endless, growing read),
a sparse file declaring a terabyte, JSON nested 200,000 deep or holding 5,000-digit numbers, folders
1,500 levels deep (recursive walkers die), a setuid-root binary or a device node for the host disk, and
ANSI escapes that rewrite the terminal when quoted in a FAIL reason.

So every host read of agent output goes through this module:

* :func:`scrub_run_folder` runs first, right after the runtime returns: without following anything it
  removes device nodes, FIFOs, sockets and symbolic links that could point outside the folder, and
  strips setuid/setgid bits and file capabilities. It walks with one directory descriptor at a time, so
  no depth can exhaust the stack or the descriptor table, and it stops at an entry and a time budget.
* :func:`read_bytes` and friends open regular files only (``lstat`` first, then
  ``O_NOFOLLOW | O_NONBLOCK``, then ``fstat`` to confirm the same inode), refuse what is larger than the
  caller's cap before reading, and stop at a time cap.
* :func:`load_json` bounds nesting depth and number length before and while parsing.
* :func:`walk_files` walks a folder iteratively with depth and entry bounds.
* :func:`clean_text` strips ANSI escapes and control characters from agent text quoted in reasons.

Each refusal is a :class:`RefusedFile`, an :class:`~pytest_rexmle.errors.InvalidSubmission` with a reason,
so a grader that meets one grades the submission INVALID and never crashes the session.
"""

from __future__ import annotations

import io
import json
import os
import re
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO, cast

from .errors import InvalidSubmission

#: default cap for a single file read whole (JSON, CSV)
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
#: wall-clock cap of one read (a regular file of bounded size reads in far less on any local disk)
READ_SECONDS = 60.0
#: JSON bounds: nesting depth, characters of one number, digits of an integer kept exact
JSON_MAX_DEPTH = 64
JSON_MAX_NUMBER_CHARS = 10_000
JSON_INT_DIGITS = 100
#: folders below a submission: deeper than this is refused (real submissions are 1–3 levels deep)
MAX_TREE_DEPTH = 32
MAX_TREE_ENTRIES = 200_000
#: scrubbing budget for one run folder
SCRUB_MAX_ENTRIES = 2_000_000
SCRUB_SECONDS = 300.0
_SHOWN = 50

_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SUID = stat.S_ISUID | stat.S_ISGID


class RefusedFile(InvalidSubmission):
    """A file or folder the agent left that the host will not read; the message says why."""


def kind_of(mode: int) -> str:
    """What a non-regular entry is, in words for a reason."""
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return "a special file"


# -- text -----------------------------------------------------------------------------------------------
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"            # CSI: colours, cursor movement, screen clearing
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window titles, hyperlinks
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"      # DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]"                    # two- and three-character escapes
    r"|\x9b[0-?]*[ -/]*[@-~]")             # 8-bit CSI
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
#: characters a reader cannot see that change what they see: bidi embeddings, overrides, isolates and
#: marks (U+202A–U+202E, U+2066–U+2069, U+200E/F, U+061C), zero-width ones (U+200B–U+200D, U+2060–U+2064,
#: U+FEFF) and the line and paragraph separators (U+2028, U+2029)
_INVISIBLE = re.compile("[\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")


def reveal(text: str) -> str:
    """``text`` with every invisible or reordering character written as a visible ``\\uXXXX`` marker: a
    tool named ``read_file \\u202egnp.tsil-srewsna`` then reads as that, not as ``read_file
    answers-list.png`` — removing the character would hide that the agent used one."""
    return _INVISIBLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def clean_text(text: str, *, keep_newlines: bool = False, limit: int | None = None) -> str:
    """Agent text made safe to quote in a terminal, Markdown or HTML report.

    ANSI escape sequences go first (so their printable tails go too), then every other C0/C1 control
    character and the Unicode bidirectional overrides that reorder what a reader sees. Tabs are kept;
    newlines are kept only with ``keep_newlines`` (otherwise a reason stays on one line). ``limit`` cuts
    the result to that many characters, marking the cut.
    """
    text = _ESCAPES.sub("", text)
    if not keep_newlines:
        text = text.replace("\r\n", " ").replace("\n", " ")
    text = _CONTROLS.sub("", text)
    if limit is not None and len(text) > limit:
        text = text[:max(0, limit - 1)] + "…"
    return text


#: a task or folder name read from a downloaded report or run.json: one plain path component
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")


def plain_name(value: object) -> str | None:
    """``value`` when it is one plain path component that is safe to join to a folder (no separator, no
    ``..``, no control, bidi or other invisible character), else None."""
    return value if isinstance(value, str) and _PLAIN_NAME.fullmatch(value) and value not in (".", "..") else None


def show(value: object, limit: int = 60) -> str:
    """``repr`` of an agent value for a reason: cleaned and cut short."""
    return clean_text(repr(value), limit=limit)


# -- opening and reading ---------------------------------------------------------------------------------
def open_regular(path: Path | str, what: str | None = None) -> int:
    """A read-only descriptor of a regular file; anything else is refused without blocking on it.

    ``lstat`` first (a FIFO or a device is refused before ``open`` could block or touch hardware), then
    ``O_NOFOLLOW | O_NONBLOCK``, then ``fstat`` to confirm the descriptor is the inode ``lstat`` saw.
    """
    what = what or Path(path).name
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise RefusedFile(f"{what} does not exist") from None
    except OSError as exc:
        raise RefusedFile(f"{what} cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise RefusedFile(f"{what} is {kind_of(st.st_mode)}, not a regular file")
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise RefusedFile(f"{what} cannot be opened ({exc.strerror})") from None
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            raise RefusedFile(f"{what} changed while it was being opened")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _too_big(what: str, size: int, limit: int) -> RefusedFile:
    return RefusedFile(f"{what} is {size} bytes, more than the {limit} bytes the host reads")


def _read_fd(fd: int, count: int, what: str, deadline: float) -> bytes:
    chunks, total = [], 0
    while total < count:
        block = os.read(fd, min(1 << 20, count - total))
        if not block:
            break
        chunks.append(block)
        total += len(block)
        if time.monotonic() > deadline:
            raise RefusedFile(f"{what}: reading took longer than {READ_SECONDS:.0f} s")
    return b"".join(chunks)


def _open_capped(path: Path | str, limit: int, what: str) -> int:
    """:func:`open_regular`, refusing a file larger than ``limit`` bytes before anything is read."""
    fd = open_regular(path, what)
    size = os.fstat(fd).st_size
    if size > limit:
        os.close(fd)
        raise _too_big(what, size, limit)
    return fd


def read_bytes(path: Path | str, limit: int = DEFAULT_MAX_BYTES, what: str | None = None) -> bytes:
    """The whole content of a regular file of at most ``limit`` bytes (checked before reading)."""
    what = what or Path(path).name
    fd = _open_capped(path, limit, what)
    try:
        data = _read_fd(fd, limit + 1, what, time.monotonic() + READ_SECONDS)
    except OSError as exc:
        raise RefusedFile(f"{what} cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise _too_big(what, len(data), limit)
    return data


def read_head_tail(path: Path | str, head: int, tail: int, what: str | None = None) -> tuple[bytes, bytes, int]:
    """(first ``head`` bytes, last ``tail`` bytes, bytes skipped between them) of a regular file.

    A 1 GiB log costs ``head + tail`` bytes of reading, whatever its size or sparseness.
    """
    what = what or Path(path).name
    fd = open_regular(path, what)
    deadline = time.monotonic() + READ_SECONDS
    try:
        size = os.fstat(fd).st_size
        if size <= head + tail:
            return _read_fd(fd, head + tail, what, deadline), b"", 0
        first = _read_fd(fd, head, what, deadline)
        os.lseek(fd, size - tail, os.SEEK_SET)
        last = _read_fd(fd, tail, what, deadline)
        return first, last, size - len(first) - len(last)
    except OSError as exc:
        raise RefusedFile(f"{what} cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)


def log_tail(path: Path | str, limit: int) -> str:
    """The last ``limit`` characters of a log, read within bounds (a FIFO or a link to /dev/zero gives
    nothing) and stripped of escapes and control characters before it is quoted anywhere, on one line."""
    try:
        first, last, _ = read_head_tail(path, 0, limit * 8)
    except RefusedFile:
        return ""
    text = clean_text((first + last).decode("utf-8", "replace"), keep_newlines=True).strip()[-limit:]
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())


def open_reader(path: Path | str, limit: int, what: str | None = None) -> BinaryIO:
    """A binary file object over :func:`open_regular`, for libraries that take a file handle (Pillow,
    tifffile): they then read the inode that was checked, never what a path resolves to later."""
    file = os.fdopen(_open_capped(path, limit, what or Path(path).name), "rb")
    cast(io.FileIO, file.raw).name = str(path)  # libraries show and split the name; the descriptor is what is read
    return file


# -- JSON ------------------------------------------------------------------------------------------------
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_DEPTH_CHUNK = 4 * 1024 * 1024
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
#: up to this many brackets a Python loop is faster than importing NumPy (the box, edge and nuclei
#: JSON an agent or the validator reads hold a few hundred)
_PYTHON_LOOP_BRACKETS = 200_000


class _NumberTooLong(ValueError):
    pass


def json_depth(data: bytes) -> int:
    """Deepest bracket nesting of a JSON text, strings excluded; linear time, small bounded memory."""
    brackets = _JSON_STRING.sub(b'""', data).translate(None, _NOT_BRACKETS)
    if len(brackets) <= _PYTHON_LOOP_BRACKETS:
        depth = peak = 0
        for byte in brackets:
            if byte in b"[{":
                depth += 1
                peak = max(peak, depth)
            else:
                depth -= 1
        return peak
    import numpy as np  # only for huge bracket counts, not for every importer of this module

    arr = np.frombuffer(brackets, dtype=np.uint8)
    depth = peak = 0
    for start in range(0, arr.size, _DEPTH_CHUNK):
        chunk = arr[start:start + _DEPTH_CHUNK]
        step = ((chunk == 0x5B) | (chunk == 0x7B)).astype(np.int32) - ((chunk == 0x5D) | (chunk == 0x7D))
        running = np.cumsum(step, dtype=np.int64) + depth
        if running.size:
            peak = max(peak, int(running.max()))
            depth = int(running[-1])
    return peak


def _parse_int(text: str):
    """Integers longer than JSON_INT_DIGITS become floats (±inf past ~309 digits): converting a huge
    digit string to an int costs quadratic time, and no task has a use for such a number; the graders'
    finiteness and range rules then refuse it with their own reason."""
    return int(text) if len(text) <= JSON_INT_DIGITS else _parse_float(text)


def _parse_float(text: str):
    if len(text) > JSON_MAX_NUMBER_CHARS:
        raise _NumberTooLong(f"a number of {len(text)} characters (at most {JSON_MAX_NUMBER_CHARS})")
    return float(text)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a number allowed in JSON")


def load_json(data: bytes, what: str, max_depth: int = JSON_MAX_DEPTH, kind: str = "JSON",
              allow_constants: bool = False):
    """Parse agent JSON with bounded nesting and number length; NaN/Infinity are not JSON.

    The depth is measured before parsing (a 200,000-deep list never reaches the recursive parser);
    numbers are checked by the parser's hooks before they are converted: a 5,000-digit integer is never
    built as an int (it reads as a float, +inf), and a number of more than 10,000 characters is refused.
    ``NaN``/``Infinity`` are refused unless ``allow_constants`` (then the caller's finiteness rule speaks).
    """
    data = data.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte order mark
    depth = json_depth(data)
    if depth > max_depth:
        raise RefusedFile(f"{what} is not valid {kind} for this task: nested {depth} levels deep (at most {max_depth})")
    try:
        text = data.decode("utf-8")
        return json.loads(text, parse_int=_parse_int, parse_float=_parse_float,
                          parse_constant=float if allow_constants else _reject_constant)
    except _NumberTooLong as exc:
        raise RefusedFile(f"{what} is not valid {kind} for this task: {exc}") from None
    except UnicodeDecodeError as exc:
        raise RefusedFile(f"{what} is not valid {kind} (not UTF-8: {exc.reason} at byte {exc.start})") from None
    except (ValueError, RecursionError) as exc:
        raise RefusedFile(f"{what} is not valid {kind} ({clean_text(str(exc), limit=120)})") from None


def read_json(path: Path | str, limit: int = 16 * 1024 * 1024, what: str | None = None,
              max_depth: int = JSON_MAX_DEPTH, kind: str = "JSON", allow_constants: bool = False):
    """:func:`read_bytes` then :func:`load_json`."""
    what = what or Path(path).name
    return load_json(read_bytes(path, limit, what), what, max_depth, kind, allow_constants)


# -- walking a submission --------------------------------------------------------------------------------
def walk_files(root: Path, *, max_depth: int = MAX_TREE_DEPTH, max_entries: int = MAX_TREE_ENTRIES,
               what: str = "the submission") -> Iterator[tuple[str, os.stat_result]]:
    """(relative path, lstat) of every entry below ``root``, iteratively, never following a link.

    Deeper than ``max_depth`` levels or more than ``max_entries`` entries is refused: a walker that
    recursed would die at ~1,000 levels, and a million empty files would only cost time.
    """
    stack: list[tuple[Path, str, int]] = [(root, "", 0)]
    seen = 0
    while stack:
        folder, rel, depth = stack.pop()
        try:
            with os.scandir(folder) as entries:
                listing = sorted(((e.name, e.stat(follow_symlinks=False)) for e in entries), reverse=True)
        except OSError as exc:
            raise RefusedFile(f"{what}: folder {rel or '.'!r} cannot be listed ({exc.strerror})") from None
        for name, st in listing:
            seen += 1
            if seen > max_entries:
                raise RefusedFile(f"{what} holds more than {max_entries} files and folders")
            child = f"{rel}/{name}" if rel else name
            yield child, st
            if stat.S_ISDIR(st.st_mode):
                if depth + 1 >= max_depth:
                    raise RefusedFile(f"{what} is nested more than {max_depth} folders deep "
                                      f"(at {show(child[:120], 130)})")
                stack.append((folder / name, child, depth + 1))


# -- scrubbing a run folder ------------------------------------------------------------------------------
@dataclass
class ScrubReport:
    """What :func:`scrub_run_folder` found and did; stored in ``run.json`` under ``scrub``."""

    removed: list[str] = field(default_factory=list)
    n_removed: int = 0
    neutralised: list[str] = field(default_factory=list)
    n_neutralised: int = 0
    entries: int = 0
    complete: bool = True
    note: str | None = None

    def _add(self, bucket: list[str], rel: str, why: str) -> None:
        if len(bucket) < _SHOWN:
            bucket.append(f"{clean_text(rel, limit=200)} ({why})")

    def remove(self, rel: str, why: str) -> None:
        self.n_removed += 1
        self._add(self.removed, rel, why)

    def neutralise(self, rel: str, why: str) -> None:
        self.n_neutralised += 1
        self._add(self.neutralised, rel, why)


def _escapes(target: str) -> bool:
    """A link target that could lead outside its folder: absolute, or climbing with ``..``.

    Lexical containment is not enough (a link to ``.`` followed by ``..`` climbs out), so any ``..`` at
    all counts; links that only descend can only ever reach things below themselves.
    """
    pure = PurePosixPath(target)
    return pure.is_absolute() or ".." in pure.parts or not target


def _capability_xattr(fd: int, name: str) -> bool:
    try:
        return "security.capability" in os.listxattr(f"/proc/self/fd/{fd}/{name}", follow_symlinks=False)
    except OSError:
        return False


def _scrub_entry(fd: int, name: str, rel: str, st: os.stat_result, report: ScrubReport) -> None:
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        try:
            target = os.readlink(name, dir_fd=fd)
        except OSError:
            target = ""
        if _escapes(target):
            os.unlink(name, dir_fd=fd)
            report.remove(rel, f"symbolic link to {target!r}")
        return
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        os.unlink(name, dir_fd=fd)
        report.remove(rel, kind_of(mode))
        return
    if mode & _SUID:
        what = "setuid" if mode & stat.S_ISUID else "setgid"
        if stat.S_ISREG(mode) and st.st_nlink > 1:
            # a hard link may share its inode with a host file: never chmod that, drop the link
            os.unlink(name, dir_fd=fd)
            report.remove(rel, f"{what} file with {st.st_nlink} hard links")
            return
        try:
            os.chmod(name, stat.S_IMODE(mode) & ~_SUID, dir_fd=fd)
            report.neutralise(rel, f"{what} bit cleared")
        except OSError:
            if stat.S_ISDIR(mode):
                raise
            os.unlink(name, dir_fd=fd)
            report.remove(rel, f"{what} file that could not be changed")
            return
    if stat.S_ISREG(mode) and _capability_xattr(fd, name):
        try:
            os.removexattr(f"/proc/self/fd/{fd}/{name}", "security.capability", follow_symlinks=False)
            report.neutralise(rel, "file capabilities removed")
        except OSError:
            os.unlink(name, dir_fd=fd)
            report.remove(rel, "file with capabilities that could not be removed")


def _open_dir(fd: int, name: str, st: os.stat_result) -> int:
    try:
        child = os.open(name, _DIR_FLAGS, dir_fd=fd)
    except PermissionError:  # a folder the agent made unreadable to us: we own it, so open it up
        os.chmod(name, stat.S_IMODE(st.st_mode) | stat.S_IRWXU, dir_fd=fd)
        child = os.open(name, _DIR_FLAGS, dir_fd=fd)
    now = os.fstat(child)
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
        os.close(child)
        raise OSError(f"{name!r} changed while being opened")
    return child


def scrub_run_folder(root: Path, *, max_entries: int = SCRUB_MAX_ENTRIES, seconds: float = SCRUB_SECONDS) -> ScrubReport:
    """Neutralise what the agent left in ``root`` before anything on the host touches it.

    Removes device nodes, FIFOs, sockets and symbolic links that could lead outside (see
    :func:`_escapes`); clears setuid/setgid bits (a setuid file with several hard links is unlinked
    instead, since its inode may be a host file) and file capabilities. Nothing is followed: each
    folder is opened relative to its parent with ``O_NOFOLLOW``, and the walk climbs back with ``..``,
    holding one descriptor, so 1,500-level folders cost nothing special. Other file systems mounted
    below ``root`` are not entered. Past the entry or time budget the report says the scrub is
    incomplete; it never raises for what it finds.
    """
    report = ScrubReport()
    deadline = time.monotonic() + seconds
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        report.complete, report.note = False, f"run folder cannot be opened ({exc.strerror})"
        return report
    device = os.fstat(fd).st_dev
    frames: list[tuple[list[str], int, str]] = []
    try:
        frames.append((sorted(os.listdir(fd)), 0, ""))
        while frames:
            names, index, rel = frames[-1]
            if index >= len(names):
                frames.pop()
                if frames:
                    parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
                    os.close(fd)
                    fd = parent
                continue
            frames[-1] = (names, index + 1, rel)
            name = names[index]
            child_rel = f"{rel}/{name}" if rel else name
            report.entries += 1
            if report.entries > max_entries or time.monotonic() > deadline:
                report.complete = False
                report.note = (f"stopped after {report.entries - 1} entries" if report.entries > max_entries
                               else f"stopped after {seconds:.0f} s")
                break
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                _scrub_entry(fd, name, child_rel, st, report)
                if not stat.S_ISDIR(st.st_mode):
                    continue
                if st.st_dev != device:
                    report.neutralise(child_rel, "another file system mounted here; not entered")
                    continue
                child = _open_dir(fd, name, st)
                try:
                    listing = sorted(os.listdir(child))
                except OSError:
                    os.close(child)
                    raise
            except FileNotFoundError:
                continue
            except OSError as exc:
                report.complete = False
                report.note = f"{clean_text(child_rel, limit=200)}: {exc.strerror or exc}"
                continue
            os.close(fd)
            fd = child
            frames.append((listing, 0, child_rel))
    finally:
        os.close(fd)
    return report
