"""Grading a submission folder into an outcome, keeping agent faults and harness faults apart."""

from __future__ import annotations

import math
import traceback
from dataclasses import dataclass
from pathlib import Path

from ..agent_output import clean_text
from ..errors import InvalidSubmission
from ..graders.base import load_grader
from ..leaderboard import Leaderboard
from ..medimage.header_notes import collecting
from ..submission import SUBMISSION_CSV
from ..task import Task
from .ranking import rank
from .result import ERROR, INVALID, MISSING, OK, TaskResult

MAX_REASON_CHARS = 2000


@dataclass(frozen=True)
class GradeOutcome:
    status: str
    metrics: dict[str, float] | None
    reason: str | None = None
    traceback: str | None = None
    #: what did not stop grading but the agent should know (a prediction header unlike the ground truth's)
    warnings: tuple[str, ...] = ()


def grade_submission(task: Task, submission_dir: Path, answers_dir: Path) -> GradeOutcome:
    if not (submission_dir / SUBMISSION_CSV).exists() and not (submission_dir / SUBMISSION_CSV).is_symlink():
        return GradeOutcome(MISSING, None, f"no {SUBMISSION_CSV} in the submission folder")
    try:
        with collecting() as notes:
            metrics = load_grader(task).grade(submission_dir, answers_dir)
    except InvalidSubmission as exc:  # the reason may quote agent text: no escapes or controls reach a report
        return GradeOutcome(INVALID, None, clean_text(str(exc), limit=MAX_REASON_CHARS))
    except Exception as exc:  # a grader bug: FAIL for the agent, but reported as the harness's error
        return GradeOutcome(ERROR, None, clean_text(f"grader error: {type(exc).__name__}: {exc}", limit=MAX_REASON_CHARS),
                            traceback.format_exc())
    bad = [k for k, v in metrics.items() if isinstance(v, float) and math.isnan(v)]
    missing = [m.key for m in task.ranking_metrics if m.key not in metrics]
    if bad or missing:
        return GradeOutcome(ERROR, None, f"grader error: NaN metrics {bad}, missing metrics {missing}")
    warnings = tuple(clean_text(note, limit=MAX_REASON_CHARS) for note in notes.messages())
    return GradeOutcome(OK, {k: float(v) for k, v in metrics.items()}, warnings=warnings)


def result_from_grade(task: Task, outcome: GradeOutcome, **extra) -> TaskResult:
    board = Leaderboard.read(task.leaderboard_path)
    if outcome.status != OK:
        return TaskResult.failed(task, outcome.status, outcome.reason or outcome.status, board.n,
                                      traceback=outcome.traceback, **extra)
    assert outcome.metrics is not None  # an OK outcome always carries its metrics
    return TaskResult.graded(task, outcome.metrics, rank(task, outcome.metrics, board),
                                  warnings=list(outcome.warnings), **extra)
