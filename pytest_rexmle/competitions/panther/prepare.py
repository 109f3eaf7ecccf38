"""PANTHER: pancreatic tumour MRI, task 1 (+ unannotated volumes) and task 2.

Each task's archive sits in its own raw folder (``raw/panther/task1``, ``task2``) so the two
``ImagesTr/`` folders can never mix. The released labels are 0 = background, 1 = tumour, 2 = pancreas,
and the leaderboard scored the tumour alone: training labels are published as
released (the pancreas is useful context), while the private test labels keep label 1 only. The
manifest records the label values found and which one is scored, so a release that ever changes its
coding is visible instead of silently scoring something else.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import SimpleITK as sitk

from ...data.prepare.errors import PrepareError
from ...data.prepare.layout import (
    Context,
    case_paths,
    check_id,
    complete_ids,
    split_and_record,
    standard_outputs,
    stem_of,
    unique_ids,
)
from ...medimage.geometry import image_like, write_image

#: the released label coding and the one label the answers keep
LABEL_MEANING = {0: "background", 1: "tumour", 2: "pancreas"}
SCORED_LABEL = 1


def _label_values(path: Path) -> set[int]:
    image = sitk.ReadImage(str(path))  # keep the image alive while its array view is used
    return {int(v) for v in np.unique(sitk.GetArrayViewFromImage(image))}


def tumour_only(label_path: Path, dst: Path) -> set[int]:
    """Write ``label == 1`` (uint8, same grid) to ``dst``; return the values the label held."""
    image = sitk.ReadImage(str(label_path))
    array = sitk.GetArrayViewFromImage(image)
    values = {int(v) for v in np.unique(array)}
    write_image(image_like((array == SCORED_LABEL).astype(np.uint8), image), dst)
    return values


def _prepare(ctx: Context, folder: str) -> dict[str, int]:
    root = ctx.raw / folder
    images_dir = ctx.find_dir("ImagesTr", root)
    labels_dir = ctx.find_dir("LabelsTr", root)
    labels = unique_ids(((check_id(ctx.task, stem_of(p, (".mha",)), p), p) for p in ctx.files("*.mha", labels_dir)),
                        "label", ctx.task)
    images = unique_ids(((stem_of(p, ("_0000.mha",)), p) for p in ctx.files("*_0000.mha", images_dir)),
                        "image", ctx.task)
    ids = complete_ids(ctx.task, {"image": images, "label": labels}, ctx)
    train, test = split_and_record(ids, ctx)
    train_values: set[int] = set()
    released: set[int] = set()
    no_tumour: list[str] = []
    answers: dict[str, str] = {}
    for case_id in ids:
        image_dst, label_dst = case_paths(ctx.public, ctx.private, case_id, case_id in train, f"{case_id}.mha",
                                          f"{case_id}.mha", answers)
        ctx.place(images[case_id], image_dst)
        if case_id in train:
            ctx.place_label(case_id, images[case_id], labels[case_id], label_dst)
            values = _label_values(label_dst)
            train_values |= values
        else:
            on_grid = ctx.scratch / "labels" / f"{case_id}.mha"   # resampled first if its grid differs
            ctx.place_label(case_id, images[case_id], labels[case_id], on_grid)
            values = tumour_only(on_grid, label_dst)
            if SCORED_LABEL not in values:
                no_tumour.append(case_id)
        released |= values
    unknown = sorted(released - set(LABEL_MEANING))
    if unknown:
        raise PrepareError(f"{ctx.task.id}: the labels in {labels_dir} hold the values {sorted(released)}; "
                           f"the release codes only {sorted(LABEL_MEANING)} (0 background, 1 tumour, 2 pancreas)")
    if no_tumour:
        ctx.warn(f"test cases without tumour voxels (label {SCORED_LABEL}): {', '.join(no_tumour)}")
    ctx.notes["training_label_values"] = sorted(train_values)
    ctx.notes["released_label_values"] = sorted(released)
    ctx.notes["label_meaning"] = {str(k): v for k, v in LABEL_MEANING.items()}
    ctx.notes["scored_label"] = SCORED_LABEL
    standard_outputs(ctx, test, "predicted_mask_path", lambda i: f"predictions/{i}.mha", "label_path", answers)
    return {"cases": len(ids), "train": len(train), "test": len(test)}


def prepare_task1(ctx: Context) -> dict[str, int]:
    """Task 1: ids ``<pid>_0001`` (label stems), images ``<id>_0000.mha``, plus ImagesTr_unlabeled/."""
    counts = _prepare(ctx, "task1")
    unlabeled = [p for p in (ctx.raw / "task1").rglob("ImagesTr_unlabeled") if p.is_dir()]
    n = 0
    for folder in unlabeled:
        for path in ctx.files("*.mha", folder):
            dst = ctx.public / "train_unlabeled" / "images" / path.name
            if dst.exists():
                raise PrepareError(f"{ctx.task.id}: two unannotated volumes are named {path.name!r}")
            ctx.place(path, dst)
            n += 1
    if not unlabeled:
        ctx.warn("no ImagesTr_unlabeled/ folder in the task-1 archive")
    counts["unlabeled"] = n
    return counts


def prepare_task2(ctx: Context) -> dict[str, int]:
    """Task 2: ids ``<pid>`` (strings), images ``<pid>_0000.mha``."""
    return _prepare(ctx, "task2")
