"""TopCoW graders.

Task 1 (:class:`Segmentation`): a 13-class label volume per case, scored with the organisers'
``topcow24_eval`` definitions. Task 2 (:class:`BoxDetection`): one 3-D box per volume as JSON.
Task 3 (:class:`EdgeClassification`): the 8 CoW edges per volume as JSON.

Segmentation volumes are large (512×512×256 CTA) while the vessels fill a few per mille of them, so
scoring works on the bounding box of the prediction's and the ground truth's foreground: every task-1
quantity is translation invariant (the flip test compares two medians of one array), and the crop
holds every non-zero voxel of both volumes, so the prediction's value check on the crop sees every
voxel that could be invalid (NaN, fractions, negatives and forbidden labels are all non-zero).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from statistics import mean

from ...agent_output import read_json
from ...errors import InvalidSubmission
from ...graders.base import Grader
from ...medimage.geometry import header_geometry
from ...medimage.nifti import read_header
from ...metrics.boxes import box_scores
from ...metrics.cow_anatomy import ANTERIOR_EDGES, COW_LABELS, POSTERIOR_EDGES
from ...metrics.topology import balanced_accuracy, variant
from ...submission import CaseTable, read_answers
from .cow_volumes import aggregate_cow, check_prediction, read_pair, score_cow_case

#: a box or edge JSON is a few hundred bytes
MAX_JSON_BYTES = 1024 * 1024


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
    data = read_json(path, MAX_JSON_BYTES, f"{where}: {path.name}")  # bounded size, depth and numbers
    if not isinstance(data, dict) or "size" not in data or "location" not in data:
        raise InvalidSubmission(f"{where}: box JSON must be an object with 'size' and 'location'")
    return _int_list(data["size"], "size", 1, where), _int_list(data["location"], "location", 0, where)


def volume_size(path: Path) -> list[int]:
    """(x, y, z) voxel counts of a test volume: from a plain 3-D NIfTI-1 header directly, else SimpleITK's."""
    found = read_header(path)
    if found is not None and len(found.shape) == 3:
        return list(found.shape)

    return list(header_geometry(path).size)


class BoxDetection(Grader):
    prediction_format = "json"
    prediction_columns = ("predicted_bbox_path",)
    answer_columns = ("label_path",)
    prediction_file = "predictions/{}.json"
    test_input = "test/images/{}_0000.nii.gz"

    def score(self, submission: CaseTable, answers: CaseTable) -> dict[str, float]:
        per_case = [box_scores(*read_box(predicted, case_id), *read_box(reference, case_id))
                    for case_id, predicted, reference in self.case_files(submission, answers)]
        return {key: mean(c[key] for c in per_case) for key in ("boundary_iou", "iou")}

    def check_case(self, submission: CaseTable, case_id: str, public_dir: Path) -> None:
        read_box(submission.file(case_id, "predicted_bbox_path"), case_id)

    def write_baseline(self, public_dir: Path, out_dir: Path) -> None:
        """The whole volume as the box: valid, and a fair 'no localisation' floor."""
        self.write_files(out_dir, self.public_test_ids(public_dir), lambda i, path: path.write_text(json.dumps(
            {"size": volume_size(self.test_input_path(public_dir, i)), "location": [0, 0, 0]})))


# == Task 1: multi-class segmentation (volume reading and scoring: cow_volumes.py) ====================
class _LabelVolumeGrader(Grader):
    """Shared plumbing of the label-volume tasks (TopCoW task 1, TopBrain): one mask per case."""

    prediction_format = "volume"
    prediction_columns = ("predicted_mask_path",)
    answer_columns = ("label_path",)
    prediction_file = "predictions/{}.nii.gz"
    test_input = "test/images/{}_0000.nii.gz"
    allowed_labels: frozenset[int] = COW_LABELS

    def check_case(self, submission: CaseTable, case_id: str, public_dir: Path) -> None:
        ref = header_geometry(self.test_input_path(public_dir, case_id))
        check_prediction(submission.file(case_id, "predicted_mask_path"), ref, case_id, self.allowed_labels)

    def load_cases(self, submission: CaseTable, answers: CaseTable):
        """Yield (case id, prediction, ground truth, spacing), validating each prediction."""
        for case_id, predicted, reference in self.case_files(submission, answers):
            pred, truth, truth_img = read_pair(predicted, reference, case_id, self.allowed_labels)
            yield case_id, pred, truth, truth_img.GetSpacing()

    def write_baseline(self, public_dir: Path, out_dir: Path) -> None:
        """An empty (all-background) label volume on each test image's grid."""
        self.write_empty_masks(public_dir, out_dir)

    def write_perfect(self, answers_dir: Path, out_dir: Path) -> None:
        answers = read_answers(answers_dir, self.id_column, self.answer_columns)
        self.copy_answers(answers_dir, out_dir, lambda i: "predictions/" + Path(answers.value(i, "label_path")).name)


class Segmentation(_LabelVolumeGrader):
    """TopCoW task 1: the nine organisers' metrics, all ranking."""

    allowed_labels = COW_LABELS

    def score(self, submission: CaseTable, answers: CaseTable) -> dict[str, float]:
        cases = [score_cow_case(pred, truth, spacing)
                 for _, pred, truth, spacing in self.load_cases(submission, answers)]
        return aggregate_cow(cases)


# == Task 3: graph-edge classification =================================================================
def read_edges(path: Path, case_id: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(anterior, posterior) edge vectors in TopCoW's edge order; exactly the 2×4 keys with integer 0/1 values."""
    where = f"case {case_id!r}"
    data = read_json(path, MAX_JSON_BYTES, f"{where}: {path.name}")  # bounded size, depth and numbers
    if not isinstance(data, dict) or set(data) != {"anterior", "posterior"}:
        raise InvalidSubmission(f"{where}: edge JSON must be an object with exactly the keys 'anterior' and 'posterior'")
    vectors = []
    for region, names in (("anterior", ANTERIOR_EDGES), ("posterior", POSTERIOR_EDGES)):
        part = data[region]
        if not isinstance(part, dict) or set(part) != set(names):
            raise InvalidSubmission(f"{where}: '{region}' must be an object with exactly the keys {list(names)}")
        values = []
        for name in names:
            value = part[name]
            if isinstance(value, bool) or not isinstance(value, int) or value not in (0, 1):
                raise InvalidSubmission(f"{where}: '{region}'.'{name}' must be the integer 0 or 1, got {value!r}")
            values.append(value)
        vectors.append(tuple(values))
    return vectors[0], vectors[1]


def edges_json(anterior: Sequence[int], posterior: Sequence[int]) -> str:
    """The submission / training-label JSON form of two edge vectors."""
    return json.dumps({"anterior": dict(zip(ANTERIOR_EDGES, map(int, anterior), strict=False)),
                       "posterior": dict(zip(POSTERIOR_EDGES, map(int, posterior), strict=False))})


class EdgeClassification(Grader):
    """TopCoW task 3: variant-balanced accuracy of the anterior and posterior patterns."""

    prediction_format = "json"
    prediction_columns = ("predicted_edges_path",)
    answer_columns = ("label_path",)
    prediction_file = "predictions/{}.json"

    def score(self, submission: CaseTable, answers: CaseTable) -> dict[str, float]:
        truth, pred = [], []
        for case_id, predicted, reference in self.case_files(submission, answers):
            pred.append(read_edges(predicted, case_id))
            truth.append(read_edges(reference, case_id))
        out = {}
        for i, region in enumerate(("anterior", "posterior")):
            out[f"{region}_acc"] = balanced_accuracy([variant(region, t[i]) for t in truth],
                                                     [variant(region, p[i]) for p in pred])
        return out

    def check_case(self, submission: CaseTable, case_id: str, public_dir: Path) -> None:
        read_edges(submission.file(case_id, "predicted_edges_path"), case_id)

    def write_baseline(self, public_dir: Path, out_dir: Path) -> None:
        """The most frequent training variant of each region for every case (all edges if no labels)."""
        labels = sorted((public_dir / "train" / "labels").glob("*.json"))
        known = [read_edges(p, p.stem) for p in labels]
        ant = Counter(k[0] for k in known).most_common(1)[0][0] if known else (1, 1, 1, 1)
        pos = Counter(k[1] for k in known).most_common(1)[0][0] if known else (1, 1, 1, 1)
        self.write_files(out_dir, self.public_test_ids(public_dir),
                         lambda i, path: path.write_text(edges_json(ant, pos)))
