"""TopBrain graders: whole-brain multi-class vessel label volumes.

The organisers' ``topbrain25_eval`` definitions: class-average Dice, clDice, B0 error and HD95 over
the labels present in G or P (HD95 290 mm for a label missing on one side), the invalid-neighbour
error of the prediction against the modality's valid-neighbour table (``tasks/<id>/valid_neighbors_*``)
and the pooled detection F1 of the small "side-road" vessels. Loading, cropping and the per-label
scores are shared with TopCoW task 1 (:mod:`.topcow`, :mod:`.cow_volumes`); the scoring functions
import them (and NumPy) when called, so the baseline and the validator's header checks do not.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import TYPE_CHECKING

from ...errors import TaskConfigError
from ...metrics.topology import TN, mean_detection_f1, neighbor_error
from ...submission import CaseTable
from ...task import Task
from ..topcow.cow_volumes import adjacency_task, class_means, label_indexes, label_scores
from ..topcow.grade import _LabelVolumeGrader

if TYPE_CHECKING:
    import numpy as np

HD95_ABSENT_MM = 290.0


@dataclass(frozen=True)
class Track:
    """What differs between the CTA and MRA tracks."""

    table: str                      # valid-neighbour JSON in the task folder
    n_labels: int                   # labels 1..n_labels are allowed (plus 0)
    side_road: tuple[int, ...]


TRACKS = {
    "cta": Track("valid_neighbors_ct_all.json", 40,
                 (8, 9, 10, 15, 16, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 37, 38, 39)),
    "mra": Track("valid_neighbors_mr_all.json", 42,
                 (8, 9, 10, 15, 16, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 41, 42)),
}


def load_valid_neighbors(path: Path) -> dict[int, frozenset[int]]:
    """Label → labels allowed to touch it (keys are label ids as strings in the file)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return {int(k): frozenset(int(v) for v in vs) for k, vs in raw.items()}
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise TaskConfigError(f"{path}: cannot read the valid-neighbour table: {exc}") from exc


@dataclass(frozen=True)
class BrainCase:
    means: dict[str, float]
    detections: dict[int, str]


def score_brain_case(pred: np.ndarray, truth: np.ndarray, spacing: Sequence[float],
                     valid: Mapping[int, frozenset[int]], side_road: Sequence[int]) -> BrainCase:
    """TopBrain's per-case quantities from two (z, y, x) label arrays on the same grid."""
    indexes = label_indexes(pred, truth)
    scores, (adjacency,) = label_scores(pred, truth, spacing, HD95_ABSENT_MM, with_cldice=True,
                                        also=[adjacency_task(pred, indexes[0])], indexes=indexes)
    means = class_means(scores, with_cldice=True)
    means["neighbor_error"] = neighbor_error(adjacency, valid)
    detections = {label: scores[label].detection if label in scores else TN for label in side_road}
    return BrainCase(means, detections)


def aggregate_brain(cases: Sequence[BrainCase], side_road: Sequence[int]) -> dict[str, float]:
    out = {k: float(mean(c.means[k] for c in cases))
           for k in ("dice", "cldice", "b0_error", "hd95", "neighbor_error")}
    out["f1_side_road"] = mean_detection_f1((c.detections for c in cases), side_road)
    return out


class Segmentation(_LabelVolumeGrader):
    """TopBrain CTA / MRA, chosen by the task's modality."""

    def __init__(self, task: Task) -> None:
        super().__init__(task)
        if task.modality not in TRACKS:
            raise TaskConfigError(f"{task.folder / 'task.yaml'}: TopBrain has no track for modality {task.modality!r}")
        self.track = TRACKS[task.modality]
        self.allowed_labels = frozenset(range(self.track.n_labels + 1))
        self.valid = load_valid_neighbors(task.folder / self.track.table)

    def score(self, submission: CaseTable, answers: CaseTable) -> dict[str, float]:
        cases = [score_brain_case(pred, truth, spacing, self.valid, self.track.side_road)
                 for _, pred, truth, spacing in self.load_cases(submission, answers)]
        return aggregate_brain(cases, self.track.side_road)
