"""DENTEX grader: per test X-ray a JSON list of hierarchically labelled boxes.

Each detection is ``{"bbox": [x, y, w, h], "category_id_1": q, "category_id_2": t, "category_id_3": d,
"score": s}`` in the source's 0-based id space. Nothing is guessed or defaulted (the reference guessed
xyxy boxes and defaulted missing fields); every deviation is an invalid submission naming the case,
the detection index and the rule. Scores: pycocotools at three levels, see ``metrics.detection``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ...agent_output import read_json
from ...errors import InvalidSubmission
from ...graders.base import Grader
from ...metrics.detection import LEVELS, hierarchical_scores
from ...submission import CaseTable, read_answers

#: level k -> number of classes (quadrants 0–3, teeth 0–7, diagnoses 0–3)
N_CLASSES = {1: 4, 2: 8, 3: 4}
FIELDS = tuple(f"category_id_{k}" for _, k in LEVELS)
MAX_JSON_BYTES = 64 * 1024 * 1024
GT_FILE = "test_annotations.json"


def _show(value) -> str:
    """repr for messages, cut short: agent JSON may hold huge numbers or long strings."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _finite_number(value, what: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidSubmission(f"{where}: {what} must be a number, got {_show(value)}")
    try:
        number = float(value)
    except OverflowError:  # a JSON integer beyond the float range
        number = math.inf
    if not math.isfinite(number):
        raise InvalidSubmission(f"{where}: {what} must be finite, got {_show(value)}")
    return number


def _class_id(value, field: str, n: int, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        raise InvalidSubmission(f"{where}: '{field}' must be an integer id, got {_show(value)}")
    if not 0 <= value < n:
        raise InvalidSubmission(f"{where}: '{field}' must be in 0..{n - 1} (0-based ids of the source), got {_show(value)}")
    return int(value)


def parse_detection(item, where: str) -> dict:
    """One detection dict, checked field by field; extra fields are ignored."""
    if not isinstance(item, dict):
        raise InvalidSubmission(f"{where}: each detection must be a JSON object, got {type(item).__name__}")
    missing = [f for f in ("bbox", *FIELDS, "score") if f not in item]
    if missing:
        raise InvalidSubmission(f"{where}: missing field(s) {missing} (no defaults are applied)")
    bbox = item["bbox"]
    if not isinstance(bbox, list) or len(bbox) != 4:
        raise InvalidSubmission(f"{where}: 'bbox' must be a list [x, y, w, h] of 4 numbers, got {_show(bbox)}")
    x, y, w, h = (_finite_number(v, "'bbox' values", where) for v in bbox)
    if w <= 0 or h <= 0:
        raise InvalidSubmission(f"{where}: 'bbox' is [x, y, width, height] (COCO); width and height must be > 0, "
                                f"got {_show(bbox)}")
    out = {"bbox": [x, y, w, h], "score": _finite_number(item["score"], "'score'", where)}
    for (_, k), field in zip(LEVELS, FIELDS, strict=True):
        out[field] = _class_id(item[field], field, N_CLASSES[k], where)
    return out


def read_detections(path: Path, case_id: str) -> list[dict]:
    """A predictions JSON file: a (possibly empty) list of detections."""
    where = f"case {case_id!r}"
    data = read_json(path, MAX_JSON_BYTES, f"{where}: {path.name}")  # bounded size, depth and numbers
    if not isinstance(data, list):
        raise InvalidSubmission(f"{where}: {path.name} must hold a JSON list of detections, got {type(data).__name__}")
    return [parse_detection(item, f"{where}, detection {i}") for i, item in enumerate(data)]


def load_ground_truth(answers_dir: Path) -> dict:
    with (answers_dir / GT_FILE).open(encoding="utf-8") as fh:
        return json.load(fh)


class HierarchicalDetection(Grader):
    prediction_format = "json"
    prediction_columns = ("predictions_json",)
    answer_columns = ("coco_image_id",)
    prediction_file = "predictions/{}.json"

    def score(self, submission: CaseTable, answers: CaseTable) -> dict[str, float]:
        coco = load_ground_truth(answers.root)
        coco_ids = {case_id: int(answers.value(case_id, "coco_image_id")) for case_id in answers.ids}
        wanted = set(coco_ids.values())
        images = [{"id": im["id"], "width": im["width"], "height": im["height"], "file_name": im["file_name"]}
                  for im in coco["images"] if im["id"] in wanted]
        lacking = wanted - {im["id"] for im in images}
        if lacking:
            raise RuntimeError(f"private {GT_FILE} lacks test image id(s) {sorted(lacking)[:5]}")
        annotations = [a for a in coco["annotations"] if a["image_id"] in wanted]
        detections = []
        for case_id in answers.ids:
            for det in read_detections(submission.file(case_id, "predictions_json"), case_id):
                detections.append({**det, "image_id": coco_ids[case_id]})
        categories = {k: coco[f"categories_{k}"] for _, k in LEVELS}
        return hierarchical_scores(images, annotations, categories, detections)

    def check_case(self, submission: CaseTable, case_id: str, public_dir: Path) -> None:
        read_detections(submission.file(case_id, "predictions_json"), case_id)

    def write_baseline(self, public_dir: Path, out_dir: Path) -> None:
        """No detection on any image: valid, and scores 0.0 on every key (the empty-submission rule of the organisers' evaluation)."""
        self.write_files(out_dir, self.public_test_ids(public_dir),
                         lambda i, path: path.write_text("[]\n", encoding="utf-8"))

    def write_perfect(self, answers_dir: Path, out_dir: Path) -> None:
        """Every ground-truth box with score 1.0."""
        answers = read_answers(answers_dir, self.id_column, self.answer_columns)
        coco = load_ground_truth(answers_dir)

        def write(case_id: str, path: Path) -> None:
            image_id = int(answers.value(case_id, "coco_image_id"))
            dets = [{"bbox": a["bbox"], **{f: a[f] for f in FIELDS}, "score": 1.0}
                    for a in coco["annotations"] if a["image_id"] == image_id]
            path.write_text(json.dumps(dets), encoding="utf-8")

        self.write_files(out_dir, answers.ids, write)
