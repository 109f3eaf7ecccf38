"""COCO bounding-box evaluation for DENTEX's hierarchical labels, via pycocotools.

Each annotation carries three labels (quadrant, tooth, diagnosis). Every level is evaluated on its own:
the boxes are the same, only ``category_id`` is taken from ``category_id_k`` and the category list from
``categories_k``. Ids stay in the source's 0-based space (the organisers' rule).

pycocotools quirks handled here rather than in the grader:

* it prints progress on stdout, which would pollute pytest/CLI output — silenced;
* ``loadRes`` cannot take an empty result list — an empty submission is defined as 0.0 everywhere;
* it reports −1 when a level has no ground truth — mapped to 0.0 (the spec's rule);
* it marks a ground-truth box as matched by storing the detection's id and tests ``> 0``, so an
  annotation id of 0 would let several detections match one box; annotation ids are therefore
  renumbered 1..N (ids carry no meaning in the metric).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterable, Mapping, Sequence
from statistics import mean

LEVELS: tuple[tuple[str, int], ...] = (("quadrant", 1), ("enumeration", 2), ("diagnosis", 3))
#: metric prefix -> index into COCOeval.stats (AP@[.5:.95], AP50, AP75, AR@100 over all areas)
STATS: tuple[tuple[str, int], ...] = (("ap", 0), ("ap50", 1), ("ap75", 2), ("ar", 8))


def metric_keys() -> list[str]:
    """The 16 DENTEX keys: the four means first, then each level's four values."""
    levels = ["mean"] + [name for name, _ in LEVELS]
    return [f"{stat}_{level}" for level in levels for stat, _ in STATS]


def _quiet():
    return contextlib.redirect_stdout(io.StringIO())


def coco_bbox_stats(images: Sequence[Mapping], annotations: Sequence[Mapping], categories: Sequence[Mapping],
                    detections: Sequence[Mapping]) -> dict[str, float]:
    """ap, ap50, ap75, ar of ``COCOeval(gt, dt, "bbox")`` with default parameters.

    ``annotations`` need ``image_id``, ``bbox`` [x, y, w, h] and ``category_id``; ``detections`` the same
    plus ``score``. No detection at all gives 0.0 on every value; −1 (no ground truth) becomes 0.0.
    """
    if not detections:
        return {stat: 0.0 for stat, _ in STATS}
    from pycocotools.coco import COCO  # imported when there is something to evaluate
    from pycocotools.cocoeval import COCOeval  # start-up: pycocotools only where this runs
    gt_anns = []
    for i, ann in enumerate(annotations, start=1):
        x, y, w, h = (float(v) for v in ann["bbox"])
        gt_anns.append({"id": i, "image_id": ann["image_id"], "category_id": int(ann["category_id"]),
                        "bbox": [x, y, w, h], "area": w * h, "iscrowd": 0})
    dataset = {"images": [dict(im) for im in images], "annotations": gt_anns,
               "categories": [dict(c) for c in categories]}
    results = [{"image_id": d["image_id"], "category_id": int(d["category_id"]),
                "bbox": [float(v) for v in d["bbox"]], "score": float(d["score"])} for d in detections]
    with _quiet():
        gt = COCO()
        gt.dataset = dataset
        gt.createIndex()
        dt = gt.loadRes(results)
        evaluator = COCOeval(gt, dt, "bbox")
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    out = {}
    for stat, index in STATS:
        value = float(evaluator.stats[index])
        out[stat] = 0.0 if value < 0 else value
    return out


def hierarchical_scores(images: Sequence[Mapping], annotations: Iterable[Mapping],
                        categories: Mapping[int, Sequence[Mapping]], detections: Iterable[Mapping]) -> dict[str, float]:
    """The 16 DENTEX keys from annotations/detections carrying ``category_id_1..3``.

    ``categories`` maps level k (1, 2, 3) to the source's ``categories_k`` list.
    """
    annotations, detections = list(annotations), list(detections)
    out: dict[str, float] = {}
    for level, k in LEVELS:
        field = f"category_id_{k}"
        level_gt = [{"image_id": a["image_id"], "bbox": a["bbox"], "category_id": a[field]} for a in annotations]
        level_dt = [{"image_id": d["image_id"], "bbox": d["bbox"], "category_id": d[field], "score": d["score"]}
                    for d in detections]
        for stat, value in coco_bbox_stats(images, level_gt, categories[k], level_dt).items():
            out[f"{stat}_{level}"] = value
    for stat, _ in STATS:
        out[f"{stat}_mean"] = mean(out[f"{stat}_{level}"] for level, _ in LEVELS)
    return {key: out[key] for key in metric_keys()}
