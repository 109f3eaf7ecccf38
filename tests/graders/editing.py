"""Editing a copied submission in grader tests: read and rewrite its CSV, reach its files."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path


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
