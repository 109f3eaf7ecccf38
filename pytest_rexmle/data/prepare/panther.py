"""PANTHER (challenges.md §3–§4): pancreatic tumour MRI, task 1 (+ unannotated volumes) and task 2.

Each task's archive sits in its own raw folder (``raw/panther/task1``, ``task2``) so the two
``ImagesTr/`` folders can never mix. The manifest records the label values found in the training
labels, because the scored target is *every* non-zero voxel (label 2, if present, included).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import SimpleITK as sitk

from .errors import PrepareError
from .layout import Context, check_id, complete_ids, split_and_record, standard_outputs, stem_of, unique_ids


def _label_values(path: Path) -> set[int]:
    image = sitk.ReadImage(str(path))  # keep the image alive while its array view is used
    return set(int(v) for v in np.unique(sitk.GetArrayViewFromImage(image)))


def _prepare(ctx: Context, folder: str, image_suffix: str) -> tuple[list[str], dict]:
    root = ctx.raw / folder
    images_dir = ctx.find_dir("ImagesTr", root)
    labels_dir = ctx.find_dir("LabelsTr", root)
    labels = unique_ids(((check_id(ctx.task, stem_of(p, (".mha",)), p), p) for p in ctx.files("*.mha", labels_dir)),
                        "label", ctx.task)
    images = unique_ids(((stem_of(p, (image_suffix,)), p) for p in ctx.files(f"*{image_suffix}", images_dir)),
                        "image", ctx.task)
    ids = complete_ids(ctx.task, {"image": images, "label": labels}, ctx)
    train, test = split_and_record(ids, ctx)
    values: set[int] = set()
    answers = {}
    for case_id in ids:
        where = "train" if case_id in train else "test"
        image_dst = ctx.public / where / "images" / f"{case_id}.mha"
        ctx.place(images[case_id], image_dst)
        if where == "train":
            label_dst = ctx.public / "train" / "labels" / f"{case_id}.mha"
        else:
            label_dst = ctx.private / "test" / "labels" / f"{case_id}.mha"
            answers[case_id] = f"test/labels/{case_id}.mha"
        ctx.place_label(case_id, images[case_id], labels[case_id], label_dst)
        if where == "train":
            values |= _label_values(label_dst)
    ctx.notes["training_label_values"] = sorted(values)
    standard_outputs(ctx, test, "predicted_mask_path", lambda i: f"predictions/{i}.mha", "label_path", answers)
    return ids, {"cases": len(ids), "train": len(train), "test": len(test)}


def prepare_task1(ctx: Context) -> dict[str, int]:
    """Task 1: ids ``<pid>_0001`` (label stems), images ``<id>_0000.mha``, plus ImagesTr_unlabeled/."""
    _, counts = _prepare(ctx, "task1", "_0000.mha")
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
    _, counts = _prepare(ctx, "task2", "_0000.mha")
    return counts
