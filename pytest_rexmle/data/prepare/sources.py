"""Raw sources: which files a task needs, where they come from, and their one shared raw folder.

All tasks of a competition share ``<data>/raw/<source>/`` (§0.2): the six TopCoW tasks download and
extract ``TopCoW2024_Data_Release.zip`` once. A source is split into *parts* (one archive, or every
file of a record); each part is extracted into its own sub-folder under a lock and marked done with a
small JSON file, so a task needing only some parts (PUMA tissue vs nuclei, PANTHER task 1 vs 2) fetches
only those, and an interrupted run redoes only the unfinished part.

Google Drive files cannot be fetched reliably without a browser (quota and virus-scan pages), so they
are *manual* parts: ``rexmle prepare`` names the page and the file, and ``--raw-archive PATH`` supplies it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from filelock import FileLock

from ...task import Task
from .download import RemoteFile, download, figshare_files, is_downloaded, require_space, zenodo_files
from .errors import ManualDownloadRequired, PrepareError
from .extract import Limits, is_archive, safe_extract

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

    @property
    def single(self) -> bool:
        return self.files is not None and len(self.files) == 1


def parts_for(task: Task) -> list[Part]:
    """The raw parts a task needs, from task.yaml's ``source`` plus the spec's per-source facts."""
    src = task.source
    raw = src["raw"]
    if raw == "usenhance":
        return [Part("train_dataset.zip", "manual", "train_dataset", page=GDRIVE_PAGE.format(id=src["file_id"]),
                     files=("train_dataset.zip",))]
    if raw == "ldct-iqa":
        return [Part(f"Zenodo record {src['train']['record_id']} (all files)", "zenodo", "train",
                     record=str(src["train"]["record_id"])),
                Part("test_dataset.zip", "manual", "test", files=("test_dataset.zip",),
                     page=GDRIVE_PAGE.format(id=src["test"]["file_id"]))]
    if raw == "seg-a":
        return [Part(f"figshare article {src['article_id']} v{src.get('version', 1)}", "figshare", "article",
                     record=str(src["article_id"]), version=int(src.get("version", 1)), nested=True,
                     page=src.get("download_url"))]
    record = str(src["record_id"])
    names = src.get("files_used") or src.get("files") or []
    parts = []
    for name in names:
        if raw == "panther":
            number = re.search(r"Task(\d)", name).group(1)
            parts.append(Part(name, "zenodo", f"task{number}", record=record, files=(name,),
                              pattern=rf"(?i)task[_ -]?{number}\b.*\.zip$"))
        else:
            parts.append(Part(name, "zenodo", _stem(name), record=record, files=(name,)))
    return parts


def _stem(name: str) -> str:
    for suffix in (".tar.gz", ".tar.bz2", ".tar.xz", ".tgz", ".zip", ".tar"):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name


def raw_dir(task: Task, data_dir: Path) -> Path:
    return data_dir / "raw" / task.source["raw"]


def _marker(raw: Path, part: Part) -> Path:
    return raw / STATE / f"{part.dest}.done.json"


def part_done(raw: Path, part: Part) -> bool:
    return _marker(raw, part).is_file() and (raw / part.dest).is_dir()


def raw_ready(task: Task, data_dir: Path) -> bool:
    raw = raw_dir(task, data_dir)
    return all(part_done(raw, p) for p in parts_for(task))


def manual_message(task: Task, part: Part) -> str:
    return (f"{task.id}: the raw file {part.name!r} must be downloaded by hand: open {part.page} in a browser, "
            f"download {part.name!r}, then run `rexmle prepare {task.id} --raw-archive PATH/{part.name}`")


def _assign(task: Task, missing: list[Part], supplied: Sequence[Path]) -> dict[str, Path]:
    """Map each user-supplied archive to the part it provides (by file name, else the only open slot)."""
    out: dict[str, Path] = {}
    for path in supplied:
        if not path.is_file():
            raise PrepareError(f"{task.id}: --raw-archive {path} is not a file")
        by_name = [p for p in missing if p.dest not in out and (
            (p.files and path.name in p.files) or (p.pattern and re.search(p.pattern, path.name)))]
        open_slots = [p for p in missing if p.dest not in out and (p.origin == "manual" or not p.single)]
        chosen = by_name or open_slots
        if len(chosen) != 1:
            expected = ", ".join(p.name for p in missing) or "nothing (the raw data is complete)"
            raise PrepareError(f"{task.id}: cannot tell which raw file --raw-archive {path.name} is; "
                               f"still needed: {expected}")
        out[chosen[0].dest] = path
    return out


def _remote_files(part: Part) -> list[RemoteFile]:
    listing = zenodo_files(part.record) if part.origin == "zenodo" else figshare_files(part.record, part.version)
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
            raise PrepareError(f"{part.name}: expected one file named {name!r} in record {part.record}, "
                               f"found {len(hits)} (the record lists: {listed})")
        chosen.append(hits[0])
    return chosen


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
        supplied = _assign(task, missing, [Path(p) for p in raw_archives])
        for part in missing:
            if part.origin == "manual" and part.dest not in supplied:
                raise ManualDownloadRequired(manual_message(task, part))
        plans: list[tuple[Part, list[tuple[Path, bool]]]] = []
        remotes: list[tuple[Part, list[RemoteFile]]] = []
        for part in missing:
            if part.dest in supplied:
                plans.append((part, [(supplied[part.dest], False)]))
            else:
                try:
                    remotes.append((part, _remote_files(part)))
                except PrepareError as exc:
                    hint = f"; or download {part.page} by hand and pass it with --raw-archive" if part.page else ""
                    raise PrepareError(f"{task.id}: {exc}{hint}") from None
        downloads = raw / STATE / "downloads"
        pending = sum((f.size or 0) for _, files in remotes for f in files
                      if not is_downloaded(f, downloads / f.name))
        if pending:
            # the archives plus roughly as much again once extracted (they are deleted afterwards)
            require_space(raw, 2 * pending, f"{task.id}: downloading and extracting {task.source['raw']}")
        for part, files in remotes:
            plans.append((part, [(download(f, downloads / f.name, progress), not keep_archives) for f in files]))
        for part, files in plans:
            _install(raw, part, files, limits)
    return raw


def _install(raw: Path, part: Part, files: list[tuple[Path, bool]], limits: Limits | None) -> None:
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
            if is_archive(path):
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
    info = {"part": part.name, "files": [{"name": p.name, "bytes": p.stat().st_size} for p, _ in files]}
    marker = _marker(raw, part)
    marker.write_text(json.dumps(info, indent=2) + "\n")
    for path, delete in files:
        if delete:
            path.unlink(missing_ok=True)


def _flatten(folder: Path) -> None:
    """Drop an archive's single top folder (``TopCoW2024_Data_Release/…`` → ``…``), as §7/§21 describe."""
    entries = [p for p in folder.iterdir() if p.name != "__MACOSX"]
    if len(entries) != 1 or not entries[0].is_dir():
        return
    aside = folder.with_name(f".{folder.name}.flatten")
    os.replace(folder, aside)
    os.replace(aside / entries[0].name, folder)
    shutil.rmtree(aside)


def _expand_nested(root: Path, limits: Limits | None) -> None:
    """Extract archives found inside an extracted archive next to themselves (SEG.A centre zips)."""
    for inner in sorted(p for p in root.rglob("*") if p.is_file() and is_archive(p)):
        target = inner.with_name(_stem(inner.name))
        if target.exists():
            raise PrepareError(f"{inner}: cannot extract next to itself, {target.name} exists")
        safe_extract(inner, target, limits)
        _flatten(target)
        inner.unlink()
