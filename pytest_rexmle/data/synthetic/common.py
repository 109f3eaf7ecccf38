"""Small helpers the synthetic generators share: CSV writing and the public/private split."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Iterable, Mapping, Sequence


def write_csv(path: Path, columns: Sequence[str], rows: Iterable[Mapping[str, object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(columns), lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({c: row[c] for c in columns})


def write_sample_submission(public: Path, id_column: str, column: str, ids: Iterable[str], value) -> None:
    """``value`` is a constant or a function of the case id (e.g. ``lambda i: f"predictions/{i}.json"``)."""
    write_csv(public / "sample_submission.csv", [id_column, column],
              ({id_column: i, column: value(i) if callable(value) else value} for i in sorted(ids)))


def write_answers(private: Path, id_column: str, column: str, paths: Mapping[str, str]) -> None:
    write_csv(private / "answers.csv", [id_column, column],
              ({id_column: i, column: paths[i]} for i in sorted(paths)))
