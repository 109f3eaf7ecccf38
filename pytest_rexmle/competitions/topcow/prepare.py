"""TopCoW 2024: one release, six tasks (CTA/MRA × seg/box/edges).

Ids are full stems (``topcow_ct_001``). Box labels are converted from the ROI ``.txt`` files and edge
labels from the ``.yml`` files into the submissions' JSON forms, so agents train on exactly the format
they must produce. A warning is recorded when the three label folders of a modality list different ids.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml

from ...data.prepare.errors import PrepareError
from ...data.prepare.layout import Context, complete_ids, split_and_record, standard_outputs, stem_of, unique_ids
from ...metrics.cow_anatomy import ANTERIOR_EDGES, POSTERIOR_EDGES

LABEL_DIRS = {"seg": ("cow_seg_labelsTr", ".nii.gz"), "box": ("roi_loc_labelsTr", ".txt"),
              "edges": ("antpos_edges_labelsTr", ".yml")}


def parse_roi(path: Path) -> dict[str, list[int]]:
    """``Size (Voxels): sx sy sz`` and ``Location (Voxels): x y z`` → the task-2 box JSON.

    Read by line prefix, never by position: line 1 of the release's files is the header
    ``--- ROI Meta Data ---``, not a spacing line, and files may carry extra lines, CRLF endings or a
    byte-order mark. A prefix that occurs twice is an error (which box would be the answer?).
    """
    box: dict[str, list[int]] = {}
    for line in path.read_text(encoding="utf-8-sig", errors="replace").splitlines():
        for key, prefix in (("size", "Size (Voxels):"), ("location", "Location (Voxels):")):
            if line.strip().lower().startswith(prefix.lower()):
                if key in box:
                    raise PrepareError(f"{path}: two {prefix!r} lines")
                values = line.split(":", 1)[1].split()
                try:
                    box[key] = [int(v) for v in values]
                except ValueError:
                    raise PrepareError(f"{path}: {prefix} values are not integers: {values}") from None
    if set(box) != {"size", "location"} or any(len(v) != 3 for v in box.values()) \
            or min(box["size"]) < 1 or min(box["location"]) < 0:
        raise PrepareError(f"{path}: not a TopCoW ROI file (need 'Size (Voxels)' and 'Location (Voxels)' "
                           f"with three integers each, size >= 1, location >= 0)")
    return {"size": box["size"], "location": box["location"]}


def parse_edges(path: Path) -> dict[str, dict[str, int]]:
    """The anterior/posterior 0/1 edge lists of an ``antpos_edges`` YAML file, keys in TopCoW's edge order."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    out = {}
    for region, keys in (("anterior", ANTERIOR_EDGES), ("posterior", POSTERIOR_EDGES)):
        section = data.get(region) if isinstance(data, dict) else None
        if not isinstance(section, dict) or set(map(str, section)) != set(keys):
            raise PrepareError(f"{path}: section {region!r} must have exactly the keys {list(keys)}")
        values = {str(k): v for k, v in section.items()}
        if any(values[k] not in (0, 1) or isinstance(values[k], bool) for k in keys):
            raise PrepareError(f"{path}: {region} edge values must be 0 or 1, got {values}")
        out[region] = {k: int(values[k]) for k in keys}
    return out


def _label_files(ctx: Context, kind: str, prefix: str) -> dict[str, Path]:
    folder, suffix = LABEL_DIRS[kind]
    root = ctx.find_dir(folder)
    return unique_ids(((stem_of(p, (suffix,)), p) for p in ctx.files(f"{prefix}*{suffix}", root)), folder, ctx.task)


def _prepare(ctx: Context, kind: str, column: str, write: Callable[[str, Path, Path, Path], None],
             answer_suffix: str) -> dict[str, int]:
    """``write(case id, image, raw label, destination)`` puts one case's label into the prepared layout."""
    prefix = "topcow_ct_" if ctx.task.modality == "cta" else "topcow_mr_"
    images_dir = ctx.find_dir("imagesTr")
    images = unique_ids(((stem_of(p, ("_0000.nii.gz",)), p) for p in ctx.files(f"{prefix}*_0000.nii.gz", images_dir)),
                        "image", ctx.task)
    labels = _label_files(ctx, kind, prefix)
    ids = complete_ids(ctx.task, {"image": images, LABEL_DIRS[kind][0]: labels}, ctx)
    others = {}
    for other in LABEL_DIRS:
        try:
            others[other] = set(_label_files(ctx, other, prefix)) & set(images)
        except PrepareError:
            others[other] = set()
    if len({frozenset(s) for s in others.values()}) > 1:
        ctx.warn("the three TopCoW label folders list different ids for this modality: "
                 + ", ".join(f"{LABEL_DIRS[k][0]}={len(v)}" for k, v in others.items()))
    train, test = split_and_record(ids, ctx)
    answers = ctx.place_cases(ids, train, images, labels, lambda i: f"{i}_0000.nii.gz", lambda i: f"{i}{answer_suffix}",
                              write)
    standard_outputs(ctx, test, column, lambda i: f"predictions/{i}{answer_suffix}", "label_path", answers)
    return {"cases": len(ids), "train": len(train), "test": len(test)}


def prepare_segmentation(ctx: Context) -> dict[str, int]:
    return _prepare(ctx, "seg", "predicted_mask_path", ctx.place_label, ".nii.gz")


def prepare_boxes(ctx: Context) -> dict[str, int]:
    return _prepare(ctx, "box", "predicted_bbox_path",
                    lambda case_id, image, label, dst: ctx.write_json(dst, parse_roi(label)), ".json")


def prepare_edges(ctx: Context) -> dict[str, int]:
    return _prepare(ctx, "edges", "predicted_edges_path",
                    lambda case_id, image, label, dst: ctx.write_json(dst, parse_edges(label)), ".json")
