"""LDCT-IQA 2023 (challenges.md §2): CT slices with radiologists' scores; the organisers' own test set."""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..split import write_split
from .errors import PrepareError
from .layout import Context, check_id, write_csv

IMAGE_SUFFIXES = (".tif", ".tiff")


def _scored_set(ctx: Context, json_name: str, image_dir: str) -> dict[str, tuple[Path, float]]:
    """id → (image, score) for one JSON score file and its image folder; only images with a score."""
    hits = [p for p in ctx.files(json_name) if (p.parent / image_dir).is_dir()]
    if len(hits) != 1:
        raise PrepareError(f"{ctx.task.id}: expected one {json_name} next to an {image_dir}/ folder under {ctx.raw}, "
                           f"found {len(hits)}")
    scores_raw = json.loads(hits[0].read_text(encoding="utf-8"))
    if not isinstance(scores_raw, dict):
        raise PrepareError(f"{hits[0]}: expected an object {{file name: score}}")
    scores: dict[str, float] = {}
    for key, value in scores_raw.items():
        stem = Path(str(key)).stem if Path(str(key)).suffix.lower() in IMAGE_SUFFIXES else str(key)
        try:
            score = float(value)
        except (TypeError, ValueError):
            raise PrepareError(f"{hits[0]}: score of {key!r} is not a number: {value!r}") from None
        if not math.isfinite(score):
            raise PrepareError(f"{hits[0]}: score of {key!r} is not finite")
        if stem in scores:
            raise PrepareError(f"{hits[0]}: two entries map to the image id {stem!r}")
        scores[stem] = score
    images: dict[str, Path] = {}
    for path in sorted((hits[0].parent / image_dir).iterdir()):
        if path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES:
            case_id = check_id(ctx.task, path.stem, path)
            if case_id in images:
                raise PrepareError(f"{ctx.task.id}: two images map to the id {case_id!r}: {images[case_id]}, {path}")
            images[case_id] = path
    unscored, missing = sorted(set(images) - set(scores)), sorted(set(scores) - set(images))
    if unscored or missing:
        ctx.notes.setdefault("incomplete_cases", {})[json_name] = {"images_without_score": unscored[:50],
                                                                   "scores_without_image": missing[:50]}
    return {i: (images[i], scores[i]) for i in sorted(set(images) & set(scores))}


def prepare(ctx: Context) -> dict[str, int]:
    train = _scored_set(ctx, "train.json", "image")
    test = _scored_set(ctx, "test.json", "images")
    if not train or not test:
        raise PrepareError(f"{ctx.task.id}: found {len(train)} scored training and {len(test)} scored test images")
    overlap = sorted(set(train) & set(test))
    if overlap:
        ctx.warn(f"{len(overlap)} test image ids also name training images (different files), e.g. {overlap[:3]}")
    for case_id, (path, _) in train.items():
        ctx.place(path, ctx.public / "train" / "images" / f"{case_id}.tif")
    for case_id, (path, _) in test.items():
        ctx.place(path, ctx.public / "test" / "images" / f"{case_id}.tiff")
    write_csv(ctx.public / "train_labels.csv", ["image_id", "quality_score"],
              ({"image_id": i, "quality_score": repr(s)} for i, (_, s) in sorted(train.items())))
    write_csv(ctx.public / "sample_submission.csv", ["image_id", "quality_score"],
              ({"image_id": i, "quality_score": "0.0"} for i in sorted(test)))
    write_csv(ctx.private / "answers.csv", ["image_id", "quality_score"],
              ({"image_id": i, "quality_score": repr(s)} for i, (_, s) in sorted(test.items())))
    write_split(ctx.private, sorted(train), sorted(test), rule="source")
    return {"cases": len(train) + len(test), "train": len(train), "test": len(test)}
