"""ISLES'22 (challenges.md §19): BIDS DWI/ADC/FLAIR with lesion masks in ``derivatives/``."""

from __future__ import annotations

import re
from pathlib import Path

from .layout import Context, complete_ids, split_and_record, standard_outputs, unique_ids

CASE = re.compile(r"^(sub-strokecase\d+)_ses-\d+_(dwi|adc|FLAIR|msk)\.nii\.gz$")


def prepare(ctx: Context) -> dict[str, int]:
    found: dict[str, list[tuple[str, Path]]] = {"dwi": [], "adc": [], "FLAIR": [], "msk": []}
    for path in ctx.files("sub-strokecase*.nii.gz"):
        match = CASE.match(path.name)
        if not match:
            continue
        in_derivatives = "derivatives" in path.relative_to(ctx.raw).parts
        if (match.group(2) == "msk") != in_derivatives:
            continue  # images outside derivatives/, masks inside it, as BIDS lays them out
        found[match.group(2)].append((match.group(1), path))
    files = {kind: unique_ids(pairs, kind, ctx.task) for kind, pairs in found.items()}
    ids = complete_ids(ctx.task, files, ctx)
    train, test = split_and_record(ids, ctx)
    answers = {}
    for case_id in ids:
        where = "train" if case_id in train else "test"
        for kind, name in (("dwi", "dwi"), ("adc", "adc"), ("FLAIR", "flair")):
            ctx.place(files[kind][case_id], ctx.public / where / f"{case_id}_{name}.nii.gz")
        if where == "train":
            dst = ctx.public / "train" / f"{case_id}_msk.nii.gz"
        else:
            dst = ctx.private / "test" / f"{case_id}_msk.nii.gz"
            answers[case_id] = f"test/{case_id}_msk.nii.gz"
        ctx.place_label(case_id, files["dwi"][case_id], files["msk"][case_id], dst)
    standard_outputs(ctx, test, "predicted_mask_path", lambda i: f"predictions/{i}.nii.gz", "mask_path", answers)
    return {"cases": len(ids), "train": len(train), "test": len(test)}
