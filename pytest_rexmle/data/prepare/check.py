"""``rexmle prepare TASK --check``: what a manual download amounts to, before anything is written.

The first thing a user runs after downloading by hand: each ``--raw-archive`` is listed and told
apart by content (recognise.py), and the report says which raw part each file is, which parts are
already present under ``raw/<source>/``, which are still missing (and where to get them), and what is
unusual (OS debris, a file saved under another name, the same part twice, a file for a part already
present). Nothing is downloaded, extracted or written.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import RexmleError
from ...task import Task
from .recognise import Contents, inspect
from .sources import Part, expand_folders, part_done, parts_for, raw_dir, source_parts, unused_listed, where_to_fetch

SEGA_CENTRES = {"d": "Dongyang", "k": "KiTS", "r": "Rider"}


@dataclass
class CheckReport:
    task: Task
    found: list[str] = field(default_factory=list)       # "path: part (kind, n files)"
    present: list[str] = field(default_factory=list)     # parts already under raw/
    missing: list[str] = field(default_factory=list)     # parts neither present nor supplied (how to get them)
    unusual: list[str] = field(default_factory=list)
    unrecognised: list[str] = field(default_factory=list)
    blocking: bool = False                               # prepare would stop: a manual part or a file is wrong

    def lines(self) -> list[str]:
        out = [f"{self.task.id}: raw files"]
        for title, items in (("found", self.found), ("already present", self.present), ("missing", self.missing),
                             ("unusual", self.unusual), ("not recognised", self.unrecognised)):
            if items:
                out.append(f"  {title}:")
                out += [f"    - {item}" for item in items]
        verdict = "cannot be prepared yet" if self.blocking else "ready: `rexmle prepare` can go on"
        out.append(f"  => {verdict}")
        return out


def _sega_centres(contents: Contents) -> set[str]:
    """Centres a SEG.A file holds, from its case ids (D1…, K1…, R1…) or its centre zip names."""
    found = set()
    for member in contents.members:
        name = member.rsplit("/", 1)[-1].lower()
        match = re.match(r"^([dkr])\d+\.seg\.nrrd$", name)
        if match:
            found.add(SEGA_CENTRES[match.group(1)])
        for centre in SEGA_CENTRES.values():
            if name == f"{centre.lower()}.zip":
                found.add(centre)
    return found


def _describe(path: Path, part: Part, contents: Contents) -> str:
    top = f", {contents.debris} OS debris entries ignored" if contents.debris else ""
    return f"{path} -> {part.name} ({contents.kind}, {len(contents.members)} files{top})"


def check_raw(task: Task, data_dir: Path, supplied: Sequence[Path]) -> CheckReport:
    """The report for ``task``: reads the supplied files and the raw folder, writes nothing."""
    report = CheckReport(task)
    parts = parts_for(task)
    raw = raw_dir(task, Path(data_dir).expanduser().absolute())
    done = {p.dest for p in parts if part_done(raw, p)}
    taken: dict[str, list[Path]] = {}
    sega: set[str] = set()
    for path in expand_folders([Path(p) for p in supplied]):
        try:
            contents = inspect(path)
        except RexmleError as exc:
            report.unrecognised.append(str(exc))
            report.blocking = True
            continue
        own = {p.dest for p in parts}
        hits = [p for p in parts + [q for q in source_parts(task) if q.dest not in own] if p.recognises(contents)] \
            or [p for p in unused_listed(task) if p.recognises(contents)]
        if len(hits) > 1:
            hits = [p for p in hits if p.named(path.name)] or hits
        if len(hits) != 1:
            what = "several raw files at once" if hits else "none of this task's raw files"
            report.unrecognised.append(f"{path}: {what}; found inside: {contents.summary()}")
            report.blocking = True
            continue
        part = hits[0]
        if part.dest not in own:
            report.unusual.append(f"{path.name} is {part.name}, which {task.id} does not use (it is not needed)")
            continue
        report.found.append(_describe(path, part, contents))
        if part.files and path.name not in part.files and path.is_file():
            report.unusual.append(f"{path.name} is published as {' / '.join(part.files)} (recognised by content)")
        if contents.debris:
            report.unusual.append(f"{path.name}: {contents.debris} OS debris entries (__MACOSX, ._*, .DS_Store, "
                                  f"Thumbs.db) will be skipped")
        if part.dest in done:
            report.unusual.append(f"{path.name}: {part.name} is already present under {raw}; this file is not used")
        elif taken.get(part.dest) and not part.many:
            report.unusual.append(f"{path.name}: {part.name} was already given as {taken[part.dest][0]}")
            report.blocking = True
        taken.setdefault(part.dest, []).append(path)
        if task.source.get("raw") == "seg-a":
            sega |= _sega_centres(contents)
    for part in parts:
        if part.dest in done:
            report.present.append(f"{part.name} ({raw / part.dest})")
        elif part.dest not in taken:
            how = "download by hand" if part.origin == "manual" else "downloaded automatically (or by hand)"
            report.missing.append(f"{part.name}: {how} from {where_to_fetch(part)}")
            report.blocking |= part.origin == "manual"
    if task.source.get("raw") == "seg-a" and taken and sega != set(SEGA_CENTRES.values()):
        absent = sorted(set(SEGA_CENTRES.values()) - sega)
        report.missing.append(f"SEG.A centres without cases in the given files: {', '.join(absent)}")
        report.blocking = True
    return report
