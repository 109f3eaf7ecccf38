"""The toy's grader: one label per test image (1 = referable retinopathy, 0 = not), in submission.csv.

The ranking metric is balanced accuracy (the mean of the two classes' recalls), so a submission that says
"0" everywhere scores 0.5 however rare the disease is; plain accuracy is reported beside it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ...errors import InvalidSubmission
from ...graders.base import SAMPLE_SUBMISSION, Grader
from ...submission import SUBMISSION_CSV, CaseTable

LABELS = (0, 1)


def read_label(table: CaseTable, case_id: str) -> int:
    """The case's label as an int; anything but 0 or 1 is INVALID, naming the case."""
    value = table.number(case_id, "label")
    if value not in LABELS:
        raise InvalidSubmission(f"case {case_id!r}: label must be 0 or 1, got {value:g}")
    return int(value)


class ReferableRetinopathy(Grader):
    prediction_format = "number"
    prediction_columns = ("label",)
    answer_columns = ("label",)

    def score(self, submission: CaseTable, answers: CaseTable) -> dict[str, float]:
        pairs = [(read_label(submission, i), read_label(answers, i)) for i in answers.ids]
        recalls = []
        for label in LABELS:
            truth_is_label = [pred for pred, truth in pairs if truth == label]
            if truth_is_label:
                recalls.append(sum(pred == label for pred in truth_is_label) / len(truth_is_label))
        return {"balanced_accuracy": sum(recalls) / len(recalls),
                "accuracy": sum(pred == truth for pred, truth in pairs) / len(pairs)}

    def check_case(self, submission: CaseTable, case_id: str, public_dir: Path) -> None:
        read_label(submission, case_id)

    def write_baseline(self, public_dir: Path, out_dir: Path) -> None:
        """The sample submission (every image 0): valid, and balanced accuracy 0.5."""
        out_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(public_dir / SAMPLE_SUBMISSION, out_dir / SUBMISSION_CSV)

    def write_perfect(self, answers_dir: Path, out_dir: Path) -> None:
        """answers.csv has the submission's columns: it is the perfect submission as it stands."""
        out_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(answers_dir / "answers.csv", out_dir / SUBMISSION_CSV)
