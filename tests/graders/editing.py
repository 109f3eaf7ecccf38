"""Editing a copied submission in grader tests: read and rewrite its CSV, reach its files."""

from __future__ import annotations

import csv
import os
import shutil
from pathlib import Path, PurePosixPath


def copy_of(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def header(sub: Path) -> list[str]:
    with (sub / "submission.csv").open(newline="") as fh:
        return next(csv.reader(fh))


def rows(sub: Path) -> list[dict[str, str]]:
    with (sub / "submission.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def write_rows(sub: Path, records: list[dict[str, str]]) -> None:
    """Rewrite submission.csv with ``records`` under its existing header."""
    fields = header(sub)
    with (sub / "submission.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(records)


def first_file(sub: Path) -> Path:
    """The prediction file of the first row (the column after the id)."""
    return sub / rows(sub)[0][header(sub)[1]]


# -- the malformed-submission edits every grader test applies ----------------------------------------
def drop_row(sub: Path) -> None:
    write_rows(sub, rows(sub)[1:])


def duplicate_row(sub: Path) -> None:
    write_rows(sub, rows(sub) + [rows(sub)[0]])


def extra_row(unknown_id: str):
    """An edit adding a row for ``unknown_id`` that reuses the first row's prediction file."""
    def edit(sub: Path) -> None:
        first = rows(sub)[0]
        write_rows(sub, rows(sub) + [{**first, header(sub)[0]: unknown_id}])
    return edit


def set_first_path(value: str):
    """An edit pointing the first row's prediction column at ``value``."""
    def edit(sub: Path) -> None:
        records = rows(sub)
        records[0][header(sub)[1]] = value
        write_rows(sub, records)
    return edit


def symlink_first(sub: Path) -> None:
    """Replace the first prediction by a symbolic link to it, next to it, named ``link<suffix>``."""
    rel = PurePosixPath(rows(sub)[0][header(sub)[1]])
    target = sub / rel
    os.symlink(target, target.with_name("link" + target.suffix))
    set_first_path(str(rel.with_name("link" + target.suffix)))(sub)


def assert_refused(grader, perfect: Path, twin, edit, reason: str, tmp_path: Path, *,
                   validate_names_it: bool = True) -> None:
    """Apply ``edit`` to a copy of ``perfect``: grading must refuse it naming ``reason`` (a regular
    expression), and so must the agent-side validation from public data (``validate_names_it=False``:
    refuse it at all, where the public check words it differently)."""
    import pytest

    from pytest_rexmle.errors import InvalidSubmission

    sub = copy_of(perfect, tmp_path / "submission")
    edit(sub)
    with pytest.raises(InvalidSubmission, match=reason):
        grader.grade(sub, twin.private)
    with pytest.raises(InvalidSubmission, match=reason if validate_names_it else None):
        grader.validate(sub, twin.public)
