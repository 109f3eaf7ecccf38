"""LDCT-IQA grader: one quality score per test image, no prediction files."""

from __future__ import annotations

import shutil
from pathlib import Path

from ...graders.base import SAMPLE_SUBMISSION, Grader, write_submission_csv
from ...metrics.correlation import correlation_scores
from ...submission import SUBMISSION_CSV, CaseTable, read_answers


class QualityScore(Grader):
    prediction_format = "number"
    prediction_columns = ("quality_score",)
    answer_columns = ("quality_score",)

    def score(self, submission: CaseTable, answers: CaseTable) -> dict[str, float]:
        import numpy as np  # validation and the baseline need neither NumPy nor SciPy

        ids = answers.ids
        pred = np.array([submission.number(i, "quality_score") for i in ids])
        truth = np.array([float(answers.value(i, "quality_score")) for i in ids])
        return correlation_scores(pred, truth)

    def check_case(self, submission: CaseTable, case_id: str, public_dir: Path) -> None:
        submission.number(case_id, "quality_score")

    def write_baseline(self, public_dir: Path, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(public_dir / SAMPLE_SUBMISSION, out_dir / SUBMISSION_CSV)

    def write_perfect(self, answers_dir: Path, out_dir: Path) -> None:
        answers = read_answers(answers_dir, self.id_column, self.answer_columns)
        write_submission_csv(out_dir, self.id_column,
                             ({self.id_column: i, "quality_score": answers.value(i, "quality_score")} for i in answers.ids),
                             self.prediction_columns)
