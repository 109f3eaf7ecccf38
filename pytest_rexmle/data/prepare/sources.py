"""Raw sources: which files a task needs, where they come from, and their one shared raw folder.

All tasks of a competition share ``<data>/raw/<source>/``: the six TopCoW tasks download and
extract ``TopCoW2024_Data_Release.zip`` once. A source is split into *parts* (one archive, or every
file of a record); each part is extracted into its own sub-folder under a lock and marked done with a
small JSON file, so a task needing only some parts (PUMA tissue vs nuclei, PANTHER task 1 vs 2) fetches
only those, and an interrupted run redoes only the unfinished part.

Google Drive files cannot be fetched reliably without a browser (quota and virus-scan pages), so they
are *manual* parts: ``rexmle prepare`` names the page and the file, and ``--raw-archive PATH`` supplies it.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from filelock import FileLock

from ...errors import TaskConfigError
from ...task import Task, competition_module, registry
from .download import NoNetwork, RemoteFile, download, figshare_files, is_downloaded, require_space, zenodo_files
from .errors import ManualDownloadRequired, PrepareError
from .extract import Limits, safe_extract
from .recognise import ARCHIVE_SUFFIXES, Contents, inspect, is_archive_name, is_debris

STATE = ".rexmle"           # per-source bookkeeping folder: markers and downloads
GDRIVE_PAGE = "https://drive.google.com/file/d/{id}/view"


@dataclass(frozen=True)
class Part:
    """One unit of a raw source, extracted into ``raw/<source>/<dest>/``."""

    name: str                       # what the user sees, e.g. "PANTHER_Task1.zip"
    origin: str                     # "zenodo", "figshare" or "manual"
    dest: str
    record: str | None = None       # Zenodo record id / figshare article id
    version: int | None = None      # figshare version
    files: tuple[str, ...] | None = None   # file names in the record; None = every file
    pattern: str | None = None      # regex for the file name when the exact name is not listed
    page: str | None = None         # manual: where to fetch it
    nested: bool = False            # expand archives found inside (SEG.A article download)
    #: content recognition (recognise.py): regexes (case-insensitive, on '/'-prefixed member paths) that
    #: must all match some member of a supplied file, ones that must match none, and the words for users
    signature: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()
    expects: str = ""
    many: bool = False              # several supplied files together make this part (SEG.A centre zips)
    alternates: tuple[str, ...] = ()    # newer versions of ``record``, used only when it cannot deliver

    @property
    def single(self) -> bool:
        return self.files is not None and len(self.files) == 1

    def recognises(self, contents: Contents) -> bool:
        """The supplied file is this part, by what it holds (by its name when no signature is known)."""
        if not self.signature:
            return self.named(contents.path.name)
        return all(contents.search(r) for r in self.signature) and not any(contents.search(r) for r in self.excludes)

    def named(self, name: str) -> bool:
        return bool((self.files and name in self.files) or (self.pattern and re.search(self.pattern, name)))


#: release file name → (member regexes identifying it, words for users)
Signatures = dict[str, tuple[tuple[str, ...], str]]


def parts_for(task: Task) -> list[Part]:
    """The raw parts a task needs: ``parts(task)`` of its competition's ``source.py``, which reads task.yaml's
    ``source``; a ``source.py`` holding only ``SIGNATURES`` has the Zenodo files as parts (so has a task
    with no preparer, recognised by name)."""
    if task.prepare is None:
        return zenodo_parts(task, {})
    name = competition_module(task, "prepare", "source")
    try:
        source = importlib.import_module(name)
    except ImportError as exc:
        raise TaskConfigError(f"{task.folder / 'task.yaml'}: field 'prepare' needs the competition's source.py "
                              f"({name}), which cannot be loaded: {exc}") from exc
    if hasattr(source, "parts"):
        return source.parts(task)
    return zenodo_parts(task, checked_signatures(source))


def checked_signatures(source: ModuleType) -> Signatures:
    """``source.SIGNATURES``, checked to be ``{file name: ((member regex, ...), words for users)}``: a
    wrong shape would otherwise surface as a bare unpacking error in ``rexmle info``."""
    where = source.__file__ or source.__name__
    shape = ("must map each release file name to a pair (a tuple of member-path regexes, a description), e.g. "
             "{'Release.zip': ((r'case_\\d+\\.nii\\.gz$',), 'the release volumes (case_*.nii.gz)')}")
    signatures = getattr(source, "SIGNATURES", None)
    if signatures is None:
        raise TaskConfigError(f"{where}: defines neither parts(task) nor SIGNATURES")
    if not isinstance(signatures, dict):
        raise TaskConfigError(f"{where}: SIGNATURES {shape}; got a {type(signatures).__name__}")
    for file_name, entry in signatures.items():
        ok = (isinstance(file_name, str) and isinstance(entry, tuple) and len(entry) == 2
              and isinstance(entry[0], tuple) and all(isinstance(r, str) for r in entry[0])
              and isinstance(entry[1], str))
        if not ok:
            raise TaskConfigError(f"{where}: SIGNATURES[{file_name!r}] is {entry!r}; SIGNATURES {shape}")
    return signatures


def zenodo_parts(task: Task, signatures: Signatures) -> list[Part]:
    """One part per Zenodo file the task uses (``files_used``, else ``files``), each extracted into its own
    folder and recognised by its ``signatures`` entry; newer records listed in task.yaml are fallbacks."""
    src = task.source
    newer = tuple(str(r) for r in src.get("newer_record_ids") or ())
    out = []
    for name in src.get("files_used") or src.get("files") or []:
        signature, expects = signatures.get(name, ((), ""))
        out.append(Part(name, "zenodo", _stem(name), record=str(src["record_id"]), files=(name,), signature=signature,
                        expects=expects, alternates=newer))
    return out


def _stem(name: str) -> str:
    for suffix in ARCHIVE_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name


def raw_dir(task: Task, data_dir: Path) -> Path:
    return data_dir / "raw" / task.source["raw"]


def _marker(raw: Path, part: Part) -> Path:
    return raw / STATE / f"{part.dest}.done.json"


def part_done(raw: Path, part: Part) -> bool:
    return _marker(raw, part).is_file() and (raw / part.dest).is_dir()


def part_record(raw: Path, part: Part) -> dict | None:
    """What the done marker of an installed part says (its files and where they came from)."""
    try:
        return json.loads(_marker(raw, part).read_text())
    except (OSError, ValueError):
        return None


def where_to_fetch(part: Part) -> str:
    """The page a user opens to fetch ``part`` by hand (what ``rexmle info`` shows as the source)."""
    if part.origin == "zenodo":
        return f"https://zenodo.org/records/{part.record}"
    if part.origin == "figshare":
        return part.page or f"https://figshare.com/articles/dataset/{part.record}"
    return part.page or "the source page"


#: how ``--raw-archive`` takes what was downloaded by hand (said once where several downloads are listed)
ONCE_PER_FILE = " once per file (any file name, any order; `--check` lists what is found)"


def manual_message(task: Task, part: Part) -> str:
    return (f"{task.id}: the raw file {part.name!r} must be downloaded by hand: open {part.page} in a browser, "
            f"download {part.name!r}, then run `rexmle prepare {task.id} --raw-archive PATH/{part.name}`")


def _expected(parts: Sequence[Part]) -> str:
    return "; ".join(f"{p.name}: {p.expects or 'a file named ' + p.name}" for p in parts)


def identify(task: Task, parts: Sequence[Part], path: Path, wanted: Sequence[Part] | None = None,
             fallback: Sequence[Part] = ()) -> tuple[Part, Contents]:
    """The one part ``path`` is, by content (a file name only breaks a tie); a one-line error otherwise.

    ``wanted``: the parts the message lists as expected (default: ``parts``); ``fallback``: parts tried
    only when none of ``parts`` matches (unused files known by name).
    """
    contents = inspect(path)
    hits = [p for p in parts if p.recognises(contents)]
    if not hits:
        hits = [p for p in fallback if p.recognises(contents)]
    if len(hits) > 1:
        hits = [p for p in hits if p.named(path.name)] or hits
    if not hits:
        raise PrepareError(f"{task.id}: --raw-archive {path} is none of the raw files this task uses "
                           f"(expected {_expected(wanted or parts)}); found inside: {contents.summary()}")
    if len(hits) > 1:
        raise PrepareError(f"{task.id}: --raw-archive {path} looks like several raw files at once "
                           f"({', '.join(p.name for p in hits)}); found inside: {contents.summary()}")
    return hits[0], contents


def expand_folders(paths: Sequence[Path]) -> list[Path]:
    """A folder holding downloaded archives stands for those archives; any other folder for itself."""
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            inner = sorted(p for p in path.iterdir() if p.is_file() and is_archive_name(p.name) and not is_debris(p.name))
            others = [p for p in path.iterdir() if not is_debris(p.name) and p not in inner]
            if inner and not others:
                out += inner
                continue
        out.append(path)
    return out


def source_parts(task: Task) -> list[Part]:
    """Every part of the task's raw source, including those only its sibling tasks use (PUMA nuclei for
    a tissue task): a file of the same release is recognised, and then not used, instead of refused."""
    out = {p.dest: p for p in parts_for(task)}
    for other in registry():
        if other.source.get("raw") == task.source.get("raw"):
            for part in parts_for(other):
                out.setdefault(part.dest, part)
    return list(out.values())


def unused_listed(task: Task) -> list[Part]:
    """Files the record publishes that no task uses (ISLES'22 center_ids.xlsx, CellSeg Testing.zip), known
    by name only and consulted last, so that passing the whole record is fine."""
    known = source_parts(task)
    return [Part(name, "zenodo", f"unused:{name}", files=(name,)) for name in task.source.get("files") or []
            if isinstance(name, str) and not any(p.named(name) or p.dest == _stem(name) for p in known)]


def assign(task: Task, parts: Sequence[Part], missing: Sequence[Part], supplied: Sequence[Path]
           ) -> dict[str, list[Path]]:
    """Map each supplied file or folder to the part it is (``part.dest`` → paths), whatever its name
    and order; files of parts already present or not used by this task are reported and skipped."""
    out: dict[str, list[Path]] = {}
    open_dests = {p.dest for p in missing}
    own = {p.dest for p in parts}
    known = list(parts) + [p for p in source_parts(task) if p.dest not in own]
    for path in expand_folders([Path(p) for p in supplied]):
        part, _ = identify(task, known, path, parts, unused_listed(task))
        if part.dest not in own:
            print(f"rexmle prepare: {task.id}: {path.name} is {part.name}, which this task does not use; skipped",
                  file=sys.stderr)
            continue
        if part.dest not in open_dests:
            print(f"rexmle prepare: {task.id}: {path.name} is {part.name}, already present under raw/; not used",
                  file=sys.stderr)
            continue
        taken = out.setdefault(part.dest, [])
        if taken and not part.many:
            raise PrepareError(f"{task.id}: --raw-archive {taken[0]} and {path} are both {part.name} "
                               f"({part.expects or 'same content'}); pass one of them")
        taken.append(path)
    return out


def _files_of_record(part: Part, record: str) -> list[RemoteFile]:
    listing = zenodo_files(record) if part.origin == "zenodo" else figshare_files(record, part.version)
    if part.files is None:
        if not listing:
            raise PrepareError(f"{part.name}: the source lists no files")
        return listing
    chosen = []
    for name in part.files:
        hits = [f for f in listing if f.name == name]
        if not hits and part.pattern:
            hits = [f for f in listing if re.search(part.pattern, f.name)]
        if len(hits) != 1:
            listed = ", ".join(f.name for f in listing)
            raise PrepareError(f"{part.name}: expected one file named {name!r} in record {record}, "
                               f"found {len(hits)} (the record lists: {listed})")
        chosen.append(hits[0])
    return chosen


def _remote_files(part: Part) -> tuple[list[RemoteFile], dict[str, str]]:
    """The files to download and where they came from: the pinned record, else a listed newer version.

    A newer version of a record (PUMA 15050523 beside the pinned 14869398) is used only when the pinned
    one cannot deliver the file, and the manifest then says so: the answers may differ from the pinned
    release's.
    """
    if part.record is None:
        raise PrepareError(f"{part.name}: task.yaml names no {part.origin} record to download it from")
    try:
        return _files_of_record(part, part.record), {"record": part.record}
    except NoNetwork:
        raise
    except PrepareError as pinned_failure:
        for other in part.alternates:
            try:
                files = _files_of_record(part, other)
            except NoNetwork:
                raise
            except PrepareError:
                continue
            note = (f"taken from record {other}, a newer version of the pinned record {part.record} "
                    f"(the pinned one failed: {pinned_failure})")
            print(f"rexmle prepare: {part.name}: {note}", file=sys.stderr)
            return files, {"record": other, "note": note}
        raise


def ensure_raw(task: Task, data_dir: Path, raw_archives: Sequence[Path] = (), progress: bool = True,
               keep_archives: bool = False, limits: Limits | None = None) -> Path:
    """Make every raw part the task needs present under ``raw/<source>/`` (locked per source)."""
    raw = raw_dir(task, data_dir)
    parts = parts_for(task)
    (raw / STATE).mkdir(parents=True, exist_ok=True)
    with FileLock(str(raw / STATE / "source.lock")):
        missing = [p for p in parts if not part_done(raw, p)]
        if not missing:
            return raw
        supplied = assign(task, parts, missing, [Path(p) for p in raw_archives])
        for part in missing:
            if part.origin == "manual" and part.dest not in supplied:
                raise ManualDownloadRequired(manual_message(task, part))
        plans: list[tuple[Part, list[tuple[Path, bool]]]] = []
        remotes: list[tuple[Part, list[RemoteFile]]] = []
        offline: list[Part] = []
        provenance: dict[str, dict[str, str]] = {}
        for part in missing:
            if part.dest in supplied:
                plans.append((part, [(path, False) for path in supplied[part.dest]]))
            else:
                try:
                    files, origin = _remote_files(part)
                    remotes.append((part, files))
                    provenance[part.dest] = origin
                except NoNetwork as exc:
                    offline.append(part)
                    unreachable_why = str(exc).split(". No network here?")[0]
                except PrepareError as exc:
                    hint = f"; or download {part.page} by hand and pass it with --raw-archive" if part.page else ""
                    raise PrepareError(f"{task.id}: {exc}{hint}") from None
        if offline:
            raise NoNetwork(f"{task.id}: {unreachable_why}. Download by hand on a machine with network: "
                            + "; ".join(f"{p.name} from {where_to_fetch(p)}" for p in offline)
                            + f"; then run `rexmle prepare {task.id} --raw-archive PATH`{ONCE_PER_FILE}")
        downloads = raw / STATE / "downloads"
        pending = sum((f.size or 0) for _, files in remotes for f in files
                      if not is_downloaded(f, downloads / f.name))
        if pending:
            # the archives plus roughly as much again once extracted (they are deleted afterwards)
            require_space(raw, 2 * pending, f"{task.id}: downloading and extracting {task.source['raw']}")
        for part, files in remotes:
            plans.append((part, [(download(f, downloads / f.name, progress), not keep_archives) for f in files]))
        for part, local_files in plans:
            _install(raw, part, local_files, limits, provenance.get(part.dest))
    return raw


def _install(raw: Path, part: Part, files: list[tuple[Path, bool]], limits: Limits | None,
             provenance: dict[str, str] | None = None) -> None:
    """Extract/copy ``files`` into ``raw/<part.dest>`` via a temporary folder, then mark the part done."""
    dest = raw / part.dest
    if dest.exists():
        shutil.rmtree(dest)  # left by an interrupted run (no marker)
    tmp = Path(tempfile.mkdtemp(prefix=f".{part.dest}.", dir=raw))
    try:
        content = tmp / "content"
        whole = len(files) == 1 and (part.single or part.origin == "manual" or part.nested)
        content.mkdir()
        for path, _ in files:
            target = content if whole else content / _stem(path.name)
            if path.is_dir():
                _copy_folder(path, target)
            elif is_archive_name(path.name) or zipfile.is_zipfile(path):
                if target.exists():
                    shutil.rmtree(target)
                safe_extract(path, target, limits)
                _flatten(target)
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target / path.name)
        if part.nested:
            _expand_nested(content, limits)
        os.replace(content, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    info: dict[str, object] = {"part": part.name, "files": [{"name": p.name, "bytes": _size(p)} for p, _ in files],
            **(provenance or {"supplied": [str(p) for p, _ in files]})}
    marker = _marker(raw, part)
    marker.write_text(json.dumps(info, indent=2) + "\n")
    for path, delete in files:
        if delete:
            path.unlink(missing_ok=True)


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def _copy_folder(src: Path, target: Path) -> None:
    """An already-extracted folder, OS debris left out; hard links where possible (it can be large)."""
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if not path.is_file() or path.is_symlink() or is_debris(rel.as_posix()):
            continue
        dst = target / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, dst)
        except OSError:
            shutil.copyfile(path, dst)
    target.mkdir(parents=True, exist_ok=True)
    _flatten(target)


def _flatten(folder: Path) -> None:
    """Drop an archive's single top folder (``TopCoW2024_Data_Release/…`` → ``…``), as TopCoW and TopBrain ship."""
    entries = [p for p in folder.iterdir() if not is_debris(p.name)]
    if len(entries) != 1 or not entries[0].is_dir():
        return
    aside = folder.with_name(f".{folder.name}.flatten")
    os.replace(folder, aside)
    os.replace(aside / entries[0].name, folder)
    shutil.rmtree(aside)


def _expand_nested(root: Path, limits: Limits | None) -> None:
    """Extract archives found inside an extracted archive next to themselves (SEG.A centre zips)."""
    for inner in sorted(p for p in root.rglob("*") if p.is_file() and is_archive_name(p.name)):
        target = inner.with_name(_stem(inner.name))
        if target.exists():
            raise PrepareError(f"{inner}: cannot extract next to itself, {target.name} exists")
        safe_extract(inner, target, limits)
        _flatten(target)
        inner.unlink()
