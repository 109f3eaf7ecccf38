"""TopCoW graders (challenges.md §7–§13).

Task 1 (:class:`Segmentation`): a 13-class label volume per case, scored with the organisers'
``topcow24_eval`` definitions. Task 2 (:class:`BoxDetection`): one 3-D box per volume as JSON.
Task 3 (:class:`EdgeClassification`): the 8 CoW edges per volume as JSON.

Segmentation volumes are large (512×512×256 CTA) while the vessels fill a few per mille of them, so
scoring works on the bounding box of the prediction's and the ground truth's foreground: every §7
quantity is translation invariant (the flip test compares two medians of one array), and the crop
holds every non-zero voxel of both volumes, so the prediction's value check on the crop sees every
voxel that could be invalid (NaN, fractions, negatives and forbidden labels are all non-zero).
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import Sequence

import numpy as np
import SimpleITK as sitk
from scipy import ndimage

from ..errors import InvalidSubmission
from ..imaging import check_geometry, image_like, label_array, read_image, reference_geometry, write_image
from ..metrics.boxes import box_scores
from ..metrics.surface import bounding_box, hd95, union_box
from ..metrics.topology import (ANTERIOR_EDGES, ANTERIOR_LABELS, POSTERIOR_EDGES, POSTERIOR_LABELS, TN,
                                TP, FN, FP, balanced_accuracy, cldice, components, detection, edge_lists,
                                f1_from_counts, label_adjacency, lr_flipped, region_matches, variant)
from ..submission import CaseTable, read_answers
from .base import Grader, write_submission_csv


def _int_list(value, name: str, minimum: int, where: str) -> list[int]:
    if not isinstance(value, list) or len(value) != 3:
        raise InvalidSubmission(f"{where}: '{name}' must be a list of 3 integers, got {value!r}")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")) \
                or int(v) != v:
            raise InvalidSubmission(f"{where}: '{name}' must hold integer values, got {value!r}")
        if v < minimum:
            raise InvalidSubmission(f"{where}: '{name}' values must be >= {minimum}, got {value!r}")
        out.append(int(v))
    return out


def read_box(path: Path, case_id: str) -> tuple[list[int], list[int]]:
    """(size, location) in SimpleITK (x, y, z) voxel order; anything else is invalid."""
    where = f"case {case_id!r}"
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidSubmission(f"{where}: {path.name} is not valid JSON ({exc})") from None
    if not isinstance(data, dict) or "size" not in data or "location" not in data:
        raise InvalidSubmission(f"{where}: box JSON must be an object with 'size' and 'location'")
    return _int_list(data["size"], "size", 1, where), _int_list(data["location"], "location", 0, where)


def test_image(public_dir: Path, case_id: str) -> Path:
    return public_dir / "test" / "images" / f"{case_id}_0000.nii.gz"


class BoxDetection(Grader):
    prediction_columns = ("predicted_bbox_path",)
    answer_columns = ("label_path",)

    def score(self, submission: CaseTable, answers: CaseTable) -> dict[str, float]:
        per_case = []
        for case_id in answers.ids:
            pred = read_box(submission.file(case_id, "predicted_bbox_path"), case_id)
            truth = read_box(answers.root / answers.value(case_id, "label_path"), case_id)
            per_case.append(box_scores(pred[0], pred[1], truth[0], truth[1]))
        return {key: mean(c[key] for c in per_case) for key in ("boundary_iou", "iou")}

    def check_case(self, submission: CaseTable, case_id: str, public_dir: Path) -> None:
        read_box(submission.file(case_id, "predicted_bbox_path"), case_id)

    def write_baseline(self, public_dir: Path, out_dir: Path) -> None:
        """The whole volume as the box: valid, and a fair 'no localisation' floor."""
        rows = []
        for case_id in self.public_test_ids(public_dir):
            size = list(reference_geometry(test_image(public_dir, case_id)).GetSize())
            rel = f"predictions/{case_id}.json"
            (out_dir / "predictions").mkdir(parents=True, exist_ok=True)
            (out_dir / rel).write_text(json.dumps({"size": size, "location": [0, 0, 0]}))
            rows.append({self.id_column: case_id, "predicted_bbox_path": rel})
        write_submission_csv(out_dir, self.id_column, rows, self.prediction_columns)

    def write_perfect(self, answers_dir: Path, out_dir: Path) -> None:
        answers = read_answers(answers_dir, self.id_column, self.answer_columns)
        rows = []
        for case_id in answers.ids:
            rel = f"predictions/{case_id}.json"
            (out_dir / "predictions").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(answers_dir / answers.value(case_id, "label_path"), out_dir / rel)
            rows.append({self.id_column: case_id, "predicted_bbox_path": rel})
        write_submission_csv(out_dir, self.id_column, rows, self.prediction_columns)
