"""``rexmle prepare``: real releases → the prepared layout (:mod:`pytest_rexmle.data.taskdata`).

Public API (wired into the plugin and the CLI by their owners):

* ``prepare_task(task, data_dir, raw_archive=None, progress=True) -> TaskData`` — locked, idempotent,
  atomic preparation of one task (download, safe extraction, split, manifest);
* ``data_status(task, data_dir) -> dict`` — "not downloaded" | "raw" | "prepared", counts and bytes;
* ``add_prepare_arguments(parser)`` and ``run_prepare(args) -> int`` — the ``rexmle prepare`` sub-command.

Modules: ``download`` (Zenodo/figshare APIs, resumable verified HTTP), ``extract`` (safe zip/tar),
``sources`` (raw parts per competition, shared ``raw/<source>/``), ``core`` (the task transaction),
``layout`` (preparer helpers) and one preparer module per competition.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

from ...errors import RexmleError
from ...paths import default_data_dir
from ...task import get_task, registry
from .core import RULE_VERSION, data_status, prepare_task
from .download import NoNetwork
from .errors import ChecksumMismatch, ManualDownloadRequired, NotEnoughDiskSpace, PrepareError, UnsafeArchive
from .recognise import inspect
from .sources import ONCE_PER_FILE, expand_folders, parts_for, source_parts, unused_listed


def add_prepare_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``rexmle prepare TASK|all``."""
    parser.add_argument("task", nargs="+", help="task id(s), reference id(s), or 'all' (challenges sharing a release "
                        "download it once)")
    parser.add_argument("--data-dir", default=str(default_data_dir()),
                        help="data root holding raw/ and one folder per task (default: $REXMLE_DATA_DIR "
                             "or ~/.cache/rexmle/data)")
    parser.add_argument("--raw-archive", action="append", default=[], metavar="PATH",
                        help="a raw file or folder downloaded by hand (Google Drive sources, or any archive you "
                             "already have), under any name and in any order: it is recognised by its content; "
                             "repeat for several files")
    parser.add_argument("--no-progress", action="store_true", help="no download progress bars")
    parser.add_argument("--keep-archives", action="store_true",
                        help="keep downloaded archives after extraction (default: delete them)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing: say which raw files were found (by content), which part each is, "
                             "what is missing and what is unusual; run it first after a manual download")
    parser.add_argument("--verify", action="store_true",
                        help="re-hash every prepared file against the manifest (default: sizes only)")


def _archives_for(task, archives: list[Path], many: bool) -> list[Path]:
    """With ``all``, offer each task only the archives that are, by content, one of its parts."""
    if not many:
        return archives
    parts = parts_for(task)
    out = []
    for path in expand_folders(archives):
        try:
            contents = _listing(path)
        except RexmleError:
            continue  # reported once for the whole command, not once per task
        if any(part.recognises(contents) for part in parts):
            out.append(path)
    return out


def _known_to_any(path: Path, tasks) -> bool:
    """``path`` is some task's raw file, or a file a record publishes that no task uses."""
    contents = _listing(path)
    return any(part.recognises(contents) for t in tasks for part in source_parts(t) + unused_listed(t))


@functools.cache
def _listing(path: Path):
    """Each supplied archive is listed once per command, not once per task (tar.gz listing reads it all)."""
    return inspect(path)


def _run_check(tasks, archives: list[Path], data_dir: Path) -> int:
    """``--check``: one report per task; 1 when any task could not be prepared from what is there."""
    from .check import check_raw  # data.prepare imports this module at its top

    blocking = False
    if len(tasks) > 1:
        for path in expand_folders(archives):
            try:
                contents = _listing(path)
            except RexmleError as exc:
                print(f"not recognised: {exc}")
                blocking = True
                continue
            if not _known_to_any(path, tasks):
                print(f"not recognised: {path} is no raw file of any task; found inside: {contents.summary()}")
                blocking = True
    for task in tasks:
        offered = _archives_for(task, archives, len(tasks) > 1)
        report = check_raw(task, data_dir, offered)
        print("\n".join(report.lines()))
        blocking |= report.blocking
    return 1 if blocking else 0


def run_prepare(args: argparse.Namespace) -> int:
    """Prepare the selected tasks; 0 when all are prepared, 1 when any could not be (reason printed)."""
    names = [args.task] if isinstance(args.task, str) else list(args.task)
    tasks = list(registry()) if "all" in names else list({t.id: t for t in map(get_task, names)}.values())
    archives = [Path(p).expanduser() for p in args.raw_archive]
    data_dir = Path(args.data_dir).expanduser()
    _listing.cache_clear()
    if getattr(args, "check", False):
        return _run_check(tasks, archives, data_dir)
    if len(tasks) > 1:
        try:
            unused = [p for p in expand_folders(archives) if not _known_to_any(p, tasks)]
        except RexmleError as exc:
            print(f"rexmle prepare: {exc}", file=sys.stderr)
            return 1
        for path in unused:
            print(f"rexmle prepare: --raw-archive {path} is no raw file of any task; found inside: "
                  f"{_listing(path).summary()}", file=sys.stderr)
        if unused:
            return 1
    failed = 0
    unfetched: dict[tuple[str, ...], tuple[str, list[str]]] = {}  # a download's key -> (why, its challenges)
    for task in tasks:
        key = download_key(task)
        if key in unfetched:  # the same download that just could not be fetched: said once, below
            unfetched[key][1].append(task.id)
            failed += 1
            continue
        try:
            data = prepare_task(task, data_dir, _archives_for(task, archives, len(tasks) > 1),
                                progress=not args.no_progress, verify=args.verify,
                                keep_archives=args.keep_archives)
        except (ManualDownloadRequired, NoNetwork) as exc:
            unfetched[key] = (str(exc), [task.id])
            failed += 1
            continue
        except RexmleError as exc:
            print(f"rexmle prepare: {task.id}: failed: {exc}", file=sys.stderr)
            failed += 1
            continue
        status = data_status(task, data_dir)
        counts = status.get("counts") or {}
        print(f"{task.id}: prepared in {data.root} ({counts.get('train', '?')} train / {counts.get('test', '?')} test, "
              f"{status.get('files', '?')} files, {status.get('bytes', 0) / 1e6:.1f} MB)")
    for line in unfetched_lines(list(unfetched.values())):
        print(line, file=sys.stderr)
    if failed and len(tasks) > 1:
        downloads = f" ({len(unfetched)} download(s) to fetch by hand, above)" if unfetched else ""
        print(f"rexmle prepare: {failed} of {len(tasks)} task(s) not prepared{downloads}", file=sys.stderr)
    return 1 if failed else 0


def download_key(task) -> tuple[str, ...]:
    """What a task downloads: its release and raw files. Challenges with the same key (the six TopCoW ones) need
    the same download, so a download that cannot be fetched is said once for all of them."""
    return (str(task.source["raw"]), *sorted(part.name for part in parts_for(task)))


#: where a NoNetwork message's cause (the host and the resolver's or socket's error) ends and its route begins
BY_HAND = ". Download by hand on a machine with network: "


def unfetched_lines(unfetched: list[tuple[str, list[str]]]) -> list[str]:
    """One line per download that could not be fetched; the cause they share (the host that cannot be reached)
    is said once above them instead of in each."""
    by_cause: dict[str, list[str]] = {}
    lines = []
    for why, ids in unfetched:
        message = download_message(why, ids)
        lead, sep, route = message.partition(": ")
        cause, split, rest = route.partition(BY_HAND)
        if sep and split:
            by_cause.setdefault(cause, []).append(f"  {lead}: {rest.removesuffix(ONCE_PER_FILE)}")
        else:
            lines.append(f"rexmle prepare: {message}")
    for cause, routes in by_cause.items():
        lines += [f"rexmle prepare: {cause}; download these by hand on a machine with network, then pass them with "
                  f"--raw-archive{ONCE_PER_FILE}:", *routes]
    return lines


def download_message(why: str, ids: list[str]) -> str:
    """The first challenge's message, said for every challenge of the download: its lead-in and its command
    name them all (``rexmle prepare`` takes several challenges and one ``--raw-archive`` per file)."""
    first = ids[0]
    why = why.removeprefix(f"{first}: ")
    if len(ids) == 1:
        return f"{first}: {why}"
    return (f"{' '.join(ids)} (one download for the {len(ids)}): "
            + why.replace(f"rexmle prepare {first} ", f"rexmle prepare {' '.join(ids)} "))


__all__ = ["prepare_task", "data_status", "add_prepare_arguments", "run_prepare", "RULE_VERSION", "PrepareError",
           "ManualDownloadRequired", "ChecksumMismatch", "UnsafeArchive", "NotEnoughDiskSpace"]
