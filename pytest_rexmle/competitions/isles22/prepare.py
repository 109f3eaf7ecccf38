"""ISLES'22: BIDS DWI/ADC/FLAIR with lesion masks in ``derivatives/``.

Both layouts seen in the wild are read: the Zenodo archive (``sub-*/ses-*/{anat,dwi}/`` at the top) and
the one the organisers document (``rawdata/sub-*/ses-*/...``, ``derivatives/sub-*/ses-*/*_msk.nii.gz``),
with names in any case.
"""

from __future__ import annotations

import re
from pathlib import Path

from ...data.prepare.layout import Context, complete_ids, split_and_record, standard_outputs, unique_ids

CASE = re.compile(r"^(sub-strokecase\d+)_ses-\d+_(dwi|adc|flair|msk)\.nii\.gz$", re.IGNORECASE)
#: the kinds as the prepared layout spells them
KINDS = {"dwi": "dwi", "adc": "adc", "flair": "FLAIR", "msk": "msk"}


def prepare(ctx: Context) -> dict[str, int]:
    found: dict[str, list[tuple[str, Path]]] = {"dwi": [], "adc": [], "FLAIR": [], "msk": []}
    for path in ctx.files("sub-strokecase*.nii.gz"):
        match = CASE.match(path.name)
        if not match:
            continue
        kind = KINDS[match.group(2).lower()]
        in_derivatives = any(part.lower() == "derivatives" for part in path.relative_to(ctx.raw).parts)
        if (kind == "msk") != in_derivatives:
            ctx.warn(f"{path.relative_to(ctx.raw)}: a {kind} file {'inside' if in_derivatives else 'outside'} "
                     f"derivatives/ is not where BIDS puts it; ignored")
            continue  # images outside derivatives/ (rawdata/ or the top), masks inside it, as BIDS lays them out
        found[kind].append((match.group(1).lower(), path))
    files = {kind: unique_ids(pairs, kind, ctx.task) for kind, pairs in found.items()}
    ids = complete_ids(ctx.task, files, ctx)
    train, test = split_and_record(ids, ctx)
    for case_id in ids:   # the mask is the label: under private/ for a test case
        where, label_root = ("train", ctx.public) if case_id in train else ("test", ctx.private)
        for kind, name in (("dwi", "dwi"), ("adc", "adc"), ("FLAIR", "flair")):
            ctx.place(files[kind][case_id], ctx.public / where / f"{case_id}_{name}.nii.gz")
        ctx.place_label(case_id, files["dwi"][case_id], files["msk"][case_id],
                        label_root / where / f"{case_id}_msk.nii.gz")
    answers = {i: f"test/{i}_msk.nii.gz" for i in test}
    standard_outputs(ctx, test, "predicted_mask_path", lambda i: f"predictions/{i}.nii.gz", "mask_path", answers)
    return {"cases": len(ids), "train": len(train), "test": len(test)}
