"""USenhance 2023: low/high-quality ultrasound PNG pairs of five organs."""

from __future__ import annotations

from pathlib import Path

from ...data.prepare.errors import PrepareError
from ...data.prepare.layout import Context, check_id, complete_ids, split_and_record, standard_outputs, unique_ids
from ...data.prepare.recognise import is_debris

ORGANS = ("breast", "carotid", "kidney", "liver", "thyroid")


def _organ_root(ctx: Context) -> Path:
    """The folder holding the organ folders (``train_datasets/`` in the release; any case)."""
    hits = sorted({p.parent.parent for p in ctx.files("*") if p.parent.name.lower() == "low_quality"
                   and p.parent.parent.name.lower() in ORGANS})
    roots = sorted({h.parent for h in hits})
    if len(roots) != 1:
        raise PrepareError(f"{ctx.task.id}: expected one folder with {'/'.join(ORGANS)}/low_quality under "
                           f"{ctx.raw}, found {len(roots)}")
    return roots[0]


def _child(folder: Path, name: str) -> Path | None:
    """``folder/name`` ignoring case (``Breast/``, ``High_Quality/``); None when absent."""
    hits = [p for p in folder.iterdir() if p.is_dir() and p.name.lower() == name]
    if len(hits) > 1:
        raise PrepareError(f"{folder}: two folders named {name!r} in different case: {[h.name for h in hits]}")
    return hits[0] if hits else None


def prepare(ctx: Context) -> dict[str, int | dict[str, int]]:
    root = _organ_root(ctx)
    low: list[tuple[str, Path]] = []
    high: list[tuple[str, Path]] = []
    organs = sorted(p.name for p in root.iterdir() if p.is_dir() and not is_debris(p.name))
    unknown = [o for o in organs if o.lower() not in ORGANS]
    if unknown:
        ctx.warn(f"ignored unknown organ folders: {unknown}")
    renamed = [o for o in organs if o.lower() in ORGANS and o != o.lower()]
    if renamed:
        ctx.notes["organ_folders_case"] = renamed   # ids keep the lower-case organ name either way
    for organ in ORGANS:
        folder = _child(root, organ)
        if folder is None:
            ctx.warn(f"organ folder {organ!r} is missing")
            continue
        for quality, bucket in (("low_quality", low), ("high_quality", high)):
            sub = _child(folder, quality)
            for path in sorted(sub.iterdir()) if sub else []:
                if path.is_file() and path.suffix.lower() == ".png" and not is_debris(path.name):
                    bucket.append((check_id(ctx.task, f"{organ}_{path.stem}", path), path))
    low_ids = unique_ids(low, "low-quality", ctx.task)
    high_ids = unique_ids(high, "high-quality", ctx.task)
    ids = complete_ids(ctx.task, {"low_quality": low_ids, "high_quality": high_ids}, ctx)
    train, test = split_and_record(ids, ctx)
    for case_id in ids:   # the high-quality image is the label: under private/ for a test case
        where, label_root = ("train", ctx.public) if case_id in train else ("test", ctx.private)
        ctx.place(low_ids[case_id], ctx.public / where / "low_quality" / f"{case_id}.png")
        ctx.place(high_ids[case_id], label_root / where / "high_quality" / f"{case_id}.png")
    answers = {i: f"test/high_quality/{i}.png" for i in test}
    standard_outputs(ctx, test, "enhanced_image_path", lambda i: f"enhanced/{i}.png", "ground_truth_path", answers)
    per_organ = {o: sum(1 for i in ids if i.startswith(o + "_")) for o in ORGANS}
    return {"cases": len(ids), "train": len(train), "test": len(test), "per_organ": per_organ}
