"""PUMA 2024: melanoma ROIs with tissue and nuclei GeoJSON, four tasks.

Ground truth is derived with the grader module's own converters (``rasterise_tissue``,
``nuclei_from_geojson``), which fail on any class name outside PUMA's class tables — the check that would
have caught the ReX-MLE reference implementation's misspelt names. The ROI size used for rasterisation is
read from each TIFF.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PIL import Image

from ...data.prepare.errors import PrepareError
from ...data.prepare.layout import (
    Context,
    check_id,
    complete_ids,
    split_and_record,
    standard_outputs,
    stem_of,
    unique_ids,
)
from .grade import nuclei_from_geojson, rasterise_tissue

ROI_DIR = "01_training_dataset_tif_ROIs"
GEOJSON_DIRS = {"tissue": "01_training_dataset_geojson_tissue", "nuclei": "01_training_dataset_geojson_nuclei"}


def _rois(ctx: Context) -> dict[str, Path]:
    root = ctx.find_dir(ROI_DIR)
    return unique_ids(((check_id(ctx.task, stem_of(p, (".tif", ".tiff")), p), p)
                       for p in ctx.files("*.tif*", root)), "ROI", ctx.task)


def _geojson(ctx: Context, folder: str, suffix: str) -> dict[str, Path]:
    root = ctx.find_dir(folder)
    return unique_ids(((stem_of(p, (suffix,)), p) for p in ctx.files(f"*{suffix}", root)), suffix, ctx.task)


def _load(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise PrepareError(f"{path}: not valid JSON: {exc}") from None


def _class_name(feature: object) -> str | None:
    try:
        name = feature["properties"]["classification"]["name"]  # type: ignore[index]
    except (KeyError, TypeError):
        return None
    return name if isinstance(name, str) and name.strip() else None


def classified(ctx: Context, data: object, path: Path) -> object:
    """The GeoJSON without its features that carry no class name, which are counted and warned about.

    Such a feature cannot be given a tissue value or a nucleus class; skipping it is what the
    organisers' own tools do, and stopping the whole task for it would lose every other case. A class
    name that *is* there but unknown still fails in the converters (it could be a misspelling).
    """
    if isinstance(data, dict) and isinstance(data.get("features"), list):
        features = data["features"]
    elif isinstance(data, list):
        features = data
    else:
        return data
    kept = [f for f in features if _class_name(f) is not None]
    skipped = len(features) - len(kept)
    if not skipped:
        return data
    counts = ctx.notes.setdefault("features_without_class", {"count": 0, "files": {}})
    counts["count"] += skipped
    counts["files"][path.name] = skipped
    ctx.warn(f"{path.name}: {skipped} feature(s) without properties.classification.name skipped")
    return {**data, "features": kept} if isinstance(data, dict) else kept


def _roi_size(path: Path) -> tuple[int, int]:
    with Image.open(path) as img:
        return img.size  # (width, height)


def _save_mask(mask, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(mask).save(path, compression="tiff_deflate")


def _count_primary(ids: list[str]) -> dict[str, int]:
    return {"primary": sum("_primary_" in i for i in ids), "metastatic": sum("_metastatic_" in i for i in ids)}


def _prepare(ctx: Context, kind: str, convert: Callable[[object, Path, str], Any], save: Callable[[Any, Path], None],
             train_folder: str, ext: str, column: str) -> dict[str, int]:
    """What both kinds do: ROI TIFFs plus ``<id>_<kind>.geojson``; ``convert(geojson, roi, source)`` is a
    case's ground truth, which ``save`` writes under ``train/<train_folder>/`` or as the test answer."""
    rois, geo = _rois(ctx), _geojson(ctx, GEOJSON_DIRS[kind], f"_{kind}.geojson")
    ids = complete_ids(ctx.task, {"roi": rois, f"{kind} geojson": geo}, ctx)
    train, test = split_and_record(ids, ctx)
    answers = {}
    for case_id in ids:
        try:
            truth = convert(classified(ctx, _load(geo[case_id]), geo[case_id]), rois[case_id], str(geo[case_id]))
        except ValueError as exc:
            raise PrepareError(f"{ctx.task.id}: {exc}") from None
        where = "train" if case_id in train else "test"
        ctx.place(rois[case_id], ctx.public / where / "images" / f"{case_id}.tif")
        if where == "train":
            ctx.place(geo[case_id], ctx.public / "train" / "labels" / f"{case_id}_{kind}.geojson")
            save(truth, ctx.public / "train" / train_folder / f"{case_id}{ext}")
        else:
            save(truth, ctx.private / "test" / "labels" / f"{case_id}{ext}")
            answers[case_id] = f"test/labels/{case_id}{ext}"
    standard_outputs(ctx, test, column, lambda i: f"predictions/{i}{ext}", "label_path", answers)
    return {"cases": len(ids), "train": len(train), "test": len(test), **_count_primary(ids)}


def prepare_tissue(ctx: Context) -> dict[str, int]:
    """Tissue tasks: ROI TIFFs, tissue GeoJSON, rasterised uint8 masks 0–5."""
    return _prepare(ctx, "tissue", lambda data, roi, source: rasterise_tissue(data, _roi_size(roi), source),
                    _save_mask, "masks", ".tif", "predicted_mask_path")


def _prepare_nuclei(ctx: Context, track: int) -> dict[str, int]:
    """Nuclei tasks: ROI TIFFs, nuclei GeoJSON, converted polygons with the track's class names."""
    classes: dict[str, int] = {}

    def convert(data: object, roi: Path, source: str) -> dict[str, list[dict]]:
        converted = nuclei_from_geojson(data, track, source)
        for polygon in converted["polygons"]:
            classes[polygon["name"]] = classes.get(polygon["name"], 0) + 1
        return converted

    counts = _prepare(ctx, "nuclei", convert, lambda data, path: ctx.write_json(path, data), "nuclei", ".json",
                      "predicted_nuclei_path")
    ctx.notes["nuclei_per_class"] = dict(sorted(classes.items()))
    return counts


prepare_nuclei_track1 = functools.partial(_prepare_nuclei, track=1)
prepare_nuclei_track2 = functools.partial(_prepare_nuclei, track=2)
