"""The session's one note about data that is not prepared: grouped by release, with the command and the size.

Why: ``pytest --agent=X -k topcow`` on a machine without data used to print the same three-line skip for
each of the six TopCoW challenges, each naming its own ``rexmle prepare`` command, none saying that the
six share one 14.4 GB download. The session knows its selection before any run, so it says it once: per
release (``source.raw``), the challenges selected, the download size where the source publishes one
(``source.download_gb`` in task.yaml) and one command that prepares them all. Each item still skips, with
a one-line reason.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import DataNotPreparedError
from ..task import Task
from .taskdata import prepared_data


def missing(tasks: list[Task], data_dir: Path) -> list[Task]:
    """Those of ``tasks`` whose prepared data is not in ``data_dir``, each once, in order."""
    out: dict[str, Task] = {}
    for task in tasks:
        try:
            prepared_data(task, data_dir)
        except DataNotPreparedError:
            out.setdefault(task.id, task)
    return list(out.values())


def size_of(task: Task) -> str:
    gb = task.source.get("download_gb")
    return f"{gb:g} GB download" if isinstance(gb, (int, float)) else "download size not published"


def _by_release(tasks: list[Task], data_dir: Path, lead: str) -> list[str]:
    """``lead`` (filled with the folder and the count), then one line per release (``source.raw``): its size
    and the one command that prepares its challenges; none when every selected challenge is prepared."""
    absent = missing(tasks, data_dir)
    if not absent:
        return []
    by_release: dict[str, list[Task]] = {}
    for task in absent:
        by_release.setdefault(str(task.source["raw"]), []).append(task)
    return [lead.format(f"data not prepared in {data_dir} for {len(absent)} selected task(s)"),
            *(f"  {release} ({size_of(group[0])}, {len(group)} task(s)): "
              f"rexmle prepare {' '.join(t.id for t in group)} --data-dir {data_dir}"
              for release, group in by_release.items())]


def missing_note(tasks: list[Task], data_dir: Path) -> list[str]:
    """The note's lines (none when every selected challenge is prepared)."""
    return _by_release(tasks, data_dir, "rexmle: {}; they are skipped. Prepare them (once, resumable), or use "
                       "--rexmle-data=synthetic for the small twins:")


def missing_lines(tasks: list[Task], data_dir: Path) -> list[str]:
    """The same facts as one problem of the session's preflight: said beside the other problems, so that one
    more attempt is enough."""
    return _by_release(tasks, data_dir, "{}: prepare them (once, resumable), or use --rexmle-data=synthetic for "
                       "the small twins:")


def skip_reason(task: Task, data_dir: Path) -> str:  # noqa: ARG001  (the note names the folder)
    """An item's own one-line reason (the session's note has the rest: the folder, the release, the size)."""
    return f"data not prepared: rexmle prepare {task.id}"
