"""Small helpers the synthetic generators and the preparers share: CSV writing and the public/private split."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path


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


def write_answers(private: Path, id_column: str, column: str, paths: Mapping[str, object]) -> None:
    write_csv(private / "answers.csv", [id_column, column],
              ({id_column: i, column: paths[i]} for i in sorted(paths)))


def write_tables(public: Path, private: Path, id_column: str, test: Iterable[str], column: str,
                 path_of: Callable[[str], object] | object, answer_column: str, answers: Mapping[str, object]
                 ) -> None:
    """``sample_submission.csv`` (each test case's conventional prediction path, or a constant) and
    ``answers.csv``."""
    write_sample_submission(public, id_column, column, test, path_of)
    write_answers(private, id_column, answer_column, answers)


def case_paths(public: Path, private: Path, case_id: str, train: bool, image_name: str, label_name: str,
               answers: dict[str, str]) -> tuple[Path, Path]:
    """Where a case's image and reference label go in the prepared layout: both under
    ``public/train/`` for a training case; for a test case the image under ``public/test/`` and the label,
    an answer, under ``private/test/``, recorded in ``answers`` by its path below ``private/``."""
    split = "train" if train else "test"
    if not train:
        answers[case_id] = f"test/labels/{label_name}"
    return public / split / "images" / image_name, (public if train else private) / split / "labels" / label_name
