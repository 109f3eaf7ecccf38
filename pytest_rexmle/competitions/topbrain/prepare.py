"""TopBrain 2025: whole-brain vessel labels, CTA and MRA from one release."""

from __future__ import annotations

from ...data.prepare.layout import Context, complete_ids, split_and_record, standard_outputs, stem_of, unique_ids


def prepare(ctx: Context) -> dict[str, int]:
    mod = "ct" if ctx.task.modality == "cta" else "mr"
    prefix = f"topcow_{mod}_"
    images_dir = ctx.find_dir(f"imagesTr_topbrain_{mod}")
    labels_dir = ctx.find_dir(f"labelsTr_topbrain_{mod}")
    images = unique_ids(((stem_of(p, ("_0000.nii.gz",)), p) for p in ctx.files(f"{prefix}*_0000.nii.gz", images_dir)),
                        "image", ctx.task)
    labels = unique_ids(((stem_of(p, (".nii.gz",)), p) for p in ctx.files(f"{prefix}*.nii.gz", labels_dir)
                         if not p.name.endswith("_0000.nii.gz")), "label", ctx.task)
    ids = complete_ids(ctx.task, {"image": images, "label": labels}, ctx)
    train, test = split_and_record(ids, ctx)
    answers = ctx.place_cases(ids, train, images, labels, lambda i: f"{i}_0000.nii.gz", lambda i: f"{i}.nii.gz")
    standard_outputs(ctx, test, "predicted_mask_path", lambda i: f"predictions/{i}.nii.gz", "label_path", answers)
    return {"cases": len(ids), "train": len(train), "test": len(test)}
