"""DENTEX 2023: fully labelled panoramic X-rays with 3-level COCO annotations.

Category ids in the release are 0-based (quadrant 0–3, tooth 0–7, diagnosis 0–3); the reference
assumed 1-based ids and silently lost every class-0 box. The preparer asserts the id ranges on the
real file and records the category names in the manifest, so a future re-release with another base
fails here instead of skewing scores.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...data.prepare.errors import PrepareError
from ...data.prepare.layout import Context, check_id, split_and_record, standard_outputs

ANNOTATIONS = "train_quadrant_enumeration_disease.json"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp")
#: category list → the exact id set it must have (0-based)
ID_RANGES = {"categories_1": set(range(4)), "categories_2": set(range(8)), "categories_3": set(range(4))}


def check_categories(data: dict[str, Any], source: Path) -> dict[str, dict[int, str]]:
    """Assert the three 0-based category lists and every annotation's ids; return id → name tables."""
    tables: dict[str, dict[int, str]] = {}
    for key, expected in ID_RANGES.items():
        entries = data.get(key)
        if not isinstance(entries, list):
            raise PrepareError(f"{source}: missing category list {key!r}")
        ids = [e.get("id") for e in entries if isinstance(e, dict)]
        if len(ids) != len(entries) or set(ids) != expected or len(set(ids)) != len(ids):
            raise PrepareError(f"{source}: {key} ids are {sorted(map(str, ids))}, expected exactly "
                               f"{sorted(expected)} (0-based)")
        tables[key] = {int(e["id"]): str(e.get("name")) for e in entries}
    for ann in data.get("annotations", []):
        for level in (1, 2, 3):
            value = ann.get(f"category_id_{level}")
            if not isinstance(value, int) or isinstance(value, bool) or value not in ID_RANGES[f"categories_{level}"]:
                raise PrepareError(f"{source}: annotation {ann.get('id')!r} has category_id_{level} = {value!r}, "
                                   f"outside {sorted(ID_RANGES[f'categories_{level}'])}")
        bbox = ann.get("bbox")
        if not (isinstance(bbox, list) and len(bbox) == 4 and all(isinstance(v, (int, float)) for v in bbox)):
            raise PrepareError(f"{source}: annotation {ann.get('id')!r} has no [x, y, w, h] bbox")
    return tables


def _subset(data: dict[str, Any], images: list[dict[str, Any]]) -> dict[str, Any]:
    keep = {img["id"] for img in images}
    out = {k: v for k, v in data.items() if k not in ("images", "annotations")}
    out["images"] = images
    out["annotations"] = [a for a in data.get("annotations", []) if a.get("image_id") in keep]
    return out


def prepare(ctx: Context) -> dict[str, int]:
    hits = ctx.files(ANNOTATIONS)
    if len(hits) != 1:
        raise PrepareError(f"{ctx.task.id}: expected one {ANNOTATIONS} under {ctx.raw}, found {len(hits)}")
    source = hits[0]
    data = json.loads(source.read_text(encoding="utf-8"))
    tables = check_categories(data, source)
    ctx.notes["categories"] = {k: {str(i): n for i, n in sorted(v.items())} for k, v in tables.items()}
    files: dict[str, Path] = {}
    for path in ctx.files("*", source.parent):
        if path.suffix.lower() in IMAGE_SUFFIXES:
            if path.name in files:
                raise PrepareError(f"{ctx.task.id}: two image files are named {path.name!r}: {files[path.name]}, {path}")
            files[path.name] = path
    entries: dict[str, dict[str, Any]] = {}
    numeric_ids: set[Any] = set()
    missing = []
    for img in data.get("images", []):
        name = Path(str(img.get("file_name", ""))).name
        if img.get("id") in numeric_ids:
            raise PrepareError(f"{source}: two images share the COCO id {img.get('id')!r}")
        numeric_ids.add(img.get("id"))
        if name not in files:
            missing.append(name)
            continue
        case_id = check_id(ctx.task, Path(name).stem, files[name])
        if case_id in entries:
            raise PrepareError(f"{ctx.task.id}: two images map to the case id {case_id!r}")
        entries[case_id] = img
    if missing:
        ctx.notes["incomplete_cases"] = {"images_without_file": sorted(missing)[:50], "count": len(missing)}
    if not entries:
        raise PrepareError(f"{ctx.task.id}: no image of {source.name} was found next to it")
    ids = sorted(entries)
    train, test = split_and_record(ids, ctx)
    for case_id in ids:
        name = Path(entries[case_id]["file_name"]).name
        where = "train" if case_id in train else "test"
        ctx.place(files[name], ctx.public / where / "images" / name)
    train_images = [dict(entries[i], file_name=Path(entries[i]["file_name"]).name) for i in train]
    test_images = [dict(entries[i], file_name=Path(entries[i]["file_name"]).name) for i in test]
    ctx.write_json(ctx.public / "train" / "annotations.json", _subset(data, train_images))
    ctx.write_json(ctx.public / "test" / "images.json",
                   {"images": [{k: img.get(k) for k in ("id", "file_name", "width", "height")} for img in test_images]})
    ctx.write_json(ctx.private / "test_annotations.json", _subset(data, test_images))
    answers = {i: str(entries[i]["id"]) for i in test}
    standard_outputs(ctx, test, "predictions_json", lambda i: f"predictions/{i}.json", "coco_image_id", answers)
    n_boxes = sum(1 for a in data.get("annotations", []) if a.get("image_id") in {entries[i]["id"] for i in ids})
    return {"cases": len(ids), "train": len(train), "test": len(test), "boxes": n_boxes}
