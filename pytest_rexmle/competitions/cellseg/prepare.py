"""NeurIPS 2022 CellSeg: labelled training images plus the tuning set.

Ids carry the source set (``labeled_<stem>``, ``tuning_<stem>``) because the two sets may reuse stems;
only images with a label are used.
"""

from __future__ import annotations

from pathlib import Path

from ...data.prepare.errors import PrepareError
from ...data.prepare.layout import Context, check_id, complete_ids, split_and_record, standard_outputs, unique_ids

IMAGE_SUFFIXES = (".tif", ".tiff", ".png", ".jpg", ".jpeg", ".bmp")
LABEL_SUFFIXES = ("_label.tiff", "_label.tif", ".tiff", ".tif")
SETS = (("Training-labeled", "labeled"), ("Tuning", "tuning"))


def _set_dir(ctx: Context, name: str) -> Path:
    hits = sorted(p for p in ctx.raw.rglob(name) if p.is_dir() and (p / "images").is_dir() and (p / "labels").is_dir()
                  and "__MACOSX" not in p.parts)
    if len(hits) != 1:
        raise PrepareError(f"{ctx.task.id}: expected one {name}/ folder with images/ and labels/ under {ctx.raw}, "
                           f"found {len(hits)}")
    return hits[0]


def _label_stem(path: Path) -> str | None:
    return next((path.name[: -len(s)] for s in LABEL_SUFFIXES if path.name.lower().endswith(s)), None)


def prepare(ctx: Context) -> dict[str, int | dict[str, int]]:
    images: list[tuple[str, Path]] = []
    labels: list[tuple[str, Path]] = []
    per_set = {}
    for folder, prefix in SETS:
        root = _set_dir(ctx, folder)
        set_images = [(check_id(ctx.task, f"{prefix}_{p.stem}", p), p) for p in ctx.files("*", root / "images")
                      if p.suffix.lower() in IMAGE_SUFFIXES]
        set_labels = [(f"{prefix}_{_label_stem(p)}", p) for p in ctx.files("*", root / "labels")
                      if _label_stem(p) is not None]
        images += set_images
        labels += set_labels
        per_set[prefix] = len({i for i, _ in set_images} & {i for i, _ in set_labels})
    image_of = unique_ids(images, "image", ctx.task)
    label_of = unique_ids(labels, "label", ctx.task)
    ids = complete_ids(ctx.task, {"image": image_of, "label": label_of}, ctx)
    # only labelled images are cases (expected, e.g. none of the unlabelled sets); labels without an
    # image would be a damaged release and are listed
    ctx.notes.pop("incomplete_cases", None)
    ctx.notes["images_without_label"] = sorted(set(image_of) - set(label_of))[:50]
    ctx.notes["labels_without_image"] = sorted(set(label_of) - set(image_of))[:50]
    train, test = split_and_record(ids, ctx)
    answers = ctx.place_cases(ids, train, image_of, label_of, lambda i: f"{i}{image_of[i].suffix}",
                              lambda i: f"{i}_label.tiff", lambda _, _image, label, dst: ctx.place(label, dst))
    standard_outputs(ctx, test, "predicted_mask_path", lambda i: f"predictions/{i}_label.tiff", "label_path", answers)
    return {"cases": len(ids), "train": len(train), "test": len(test), "per_set": per_set}
