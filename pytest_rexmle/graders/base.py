"""What every grader provides, so the harness, the validator and the tests treat all 20 tasks alike.

A grader knows one submission format. Besides scoring it writes two reference submissions: a trivial
*baseline* built from public data only (what the ``sample`` agent submits, the floor of every report)
and a *perfect* one converted from the private answers (the self-consistency check of the tests).
"""

from __future__ import annotations

import csv
import shutil
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import ClassVar

from ..errors import InvalidSubmission
from ..submission import SUBMISSION_CSV, CaseTable, read_answers, read_case_table, read_submission
from ..task import Task, resolve

SAMPLE_SUBMISSION = "sample_submission.csv"
#: what a submission's prediction is: a number in a CSV cell, or a file per case of one of these kinds
#: (a 3-D volume: NIfTI, MHA or NRRD; a TIFF or PNG image; a JSON document)
PREDICTION_FORMATS = ("number", "volume", "tiff", "png", "json")


class Grader(ABC):
    #: the task's prediction format, one of :data:`PREDICTION_FORMATS`: the contract tests pick the
    #: malformed submissions that apply from it and check the twin's files against it
    prediction_format: ClassVar[str]
    #: columns of submission.csv besides the id column
    prediction_columns: ClassVar[tuple[str, ...]]
    #: columns of private/answers.csv besides the id column
    answer_columns: ClassVar[tuple[str, ...]]
    #: where the reference submissions put a case's prediction file (``{}`` is the case id)
    prediction_file: ClassVar[str] = ""
    #: a case's public test input below the public folder (``{}`` is the case id), where there is one file
    test_input: ClassVar[str] = ""

    def __init__(self, task: Task) -> None:
        self.task = task

    @property
    def id_column(self) -> str:
        return self.task.id_column

    def test_input_path(self, public_dir: Path, case_id: str) -> Path:
        return public_dir / self.test_input.format(case_id)

    # -- grading -------------------------------------------------------------------------------------
    def grade(self, submission_dir: Path, answers_dir: Path) -> dict[str, float]:
        """Validate then score; raises InvalidSubmission for any format problem."""
        answers = read_answers(answers_dir, self.id_column, self.answer_columns)
        submission = read_submission(submission_dir, self.id_column, self.prediction_columns, answers.ids)
        return self.score(submission, answers)

    @abstractmethod
    def score(self, submission: CaseTable, answers: CaseTable) -> dict[str, float]:
        """Every metric of the task (ranking keys and documented extras)."""

    def case_files(self, submission: CaseTable, answers: CaseTable) -> Iterator[tuple[str, Path, Path]]:
        """(case id, predicted file, reference file) per test case, for a grader whose submission and answers
        each have one file column: the loop most ``score`` methods start from."""
        (predicted,), (reference,) = self.prediction_columns, self.answer_columns
        for case_id in answers.ids:
            yield case_id, submission.file(case_id, predicted), answers.root / answers.value(case_id, reference)

    # -- agent-side validation (public data only) ----------------------------------------------------
    def public_test_ids(self, public_dir: Path) -> list[str]:
        table = read_case_table(public_dir / SAMPLE_SUBMISSION, self.id_column, self.prediction_columns, None,
                                what=SAMPLE_SUBMISSION)
        return table.ids

    def validate(self, submission_dir: Path, public_dir: Path) -> CaseTable:
        """Check a submission's format against the public test ids and inputs, never against answers."""
        submission = read_submission(submission_dir, self.id_column, self.prediction_columns,
                                     self.public_test_ids(public_dir))
        for case_id in submission.ids:
            self.check_case(submission, case_id, public_dir)
        return submission

    def check_case(self, submission: CaseTable, case_id: str, public_dir: Path) -> None:
        """Per-case public check; the default only requires that referenced files exist."""
        for column in self.prediction_columns:
            if column.endswith("_path") or column.endswith("_json"):
                submission.file(case_id, column)

    # -- reference submissions -----------------------------------------------------------------------
    @abstractmethod
    def write_baseline(self, public_dir: Path, out_dir: Path) -> None:
        """A valid trivial submission made from public data only."""

    def write_perfect(self, answers_dir: Path, out_dir: Path) -> None:
        """The private answers converted to a submission (scores the best value on every metric); by
        default the answer files themselves, for formats where a ground-truth file is a valid prediction."""
        self.copy_answers(answers_dir, out_dir)

    # -- helpers for the two above ---------------------------------------------------------------------
    def write_files(self, out_dir: Path, case_ids: Iterable[str], write: Callable[[str, Path], object],
                    rel_for: Callable[[str], str] | None = None) -> None:
        """One prediction file per case (``write(case_id, path)``, at :attr:`prediction_file` unless
        ``rel_for`` says otherwise) and the CSV naming them."""
        column = self.prediction_columns[0]
        rows = []
        for case_id in case_ids:
            rel = rel_for(case_id) if rel_for else self.prediction_file.format(case_id)
            (out_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            write(case_id, out_dir / rel)
            rows.append({self.id_column: case_id, column: rel})
        write_submission_csv(out_dir, self.id_column, rows, self.prediction_columns)

    def copy_answers(self, answers_dir: Path, out_dir: Path, rel_for: Callable[[str], str] | None = None) -> None:
        """Each case's answer file (the first answer column) copied as its prediction."""
        answers = read_answers(answers_dir, self.id_column, self.answer_columns)
        column = self.answer_columns[0]
        self.write_files(out_dir, answers.ids,
                         lambda case_id, path: shutil.copyfile(answers_dir / answers.value(case_id, column), path),
                         rel_for)

    def write_empty_masks(self, public_dir: Path, out_dir: Path) -> None:
        """A baseline of all-background volumes, each on the grid of its public test input.

        NIfTI to NIfTI is written from the source header alone (:mod:`..nifti`: no SimpleITK, no
        NumPy); other formats through SimpleITK, whose header-only reference image already is that
        volume (uint8, zero-filled, the file's geometry)."""
        # start-up: keeps 155 lines out of every pytest session (the plugin)
        from ..medimage.nifti import write_empty_like

        def empty(case_id: str, path: Path) -> None:
            grid = self.test_input_path(public_dir, case_id)
            if not write_empty_like(grid, path):
                # start-up: keeps SimpleITK out of every pytest session (the plugin)
                from ..medimage.geometry import reference_geometry, write_image

                write_image(reference_geometry(grid), path)

        self.write_files(out_dir, self.public_test_ids(public_dir), empty)


def write_submission_csv(out_dir: Path, id_column: str, rows: Iterable[Mapping[str, object]],
                         columns: Iterable[str]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    fields = [id_column, *columns]
    with (out_dir / SUBMISSION_CSV).open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: row[k] for k in fields})


def load_grader(task: Task) -> Grader:
    """Instantiate the grader named in task.yaml (``grader: <competition>:<Class>``, in the competition's ``grade.py``)."""
    return resolve(task, "grader")(task)


__all__ = ["Grader", "InvalidSubmission", "load_grader", "write_submission_csv", "SAMPLE_SUBMISSION"]
