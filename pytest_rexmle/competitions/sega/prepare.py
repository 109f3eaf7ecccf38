"""SEG.A 2023: aortic vessel trees from three centres, NRRD.

Some NRRD files of the release lack the blank line between header and data, which SimpleITK (ITK's
NRRD reader) refuses. ``repaired_copy`` inserts it in a scratch copy — the raw file is never touched —
and the case is then re-written with SimpleITK (gzip NRRD) after the label-geometry check (a label on its image's grid).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

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
from ...medimage.geometry import write_image

#: an NRRD header line: a comment, "field: value" or "key:=value" (printable ASCII only)
HEADER_LINE = re.compile(rb"^(#[\x20-\x7e\t]*|[\x20-\x7e]+?:=?[\x20-\x7e\t]*)\r?$")
MAX_HEADER = 1 << 16


def header_repair_offset(head: bytes) -> int | None:
    """Byte offset where the missing blank line must go, or None when the header is well formed.

    The header ends at the first empty line. If a line that is not a header line (binary data, e.g.
    a gzip stream starting with 0x1f 0x8b) comes before any empty line, the data starts there.
    """
    if not head.startswith(b"NRRD"):
        raise PrepareError("not an NRRD file (no 'NRRD000x' magic)")
    offset = head.index(b"\n") + 1 if b"\n" in head else len(head)
    while offset < len(head):
        end = head.find(b"\n", offset)
        line = head[offset:] if end < 0 else head[offset:end]
        if line in (b"", b"\r"):
            return None
        if not HEADER_LINE.match(line):
            return offset
        if end < 0:
            return len(head)
        offset = end + 1
    return len(head)


def repaired_copy(path: Path, scratch: Path) -> tuple[Path, bool]:
    """``path`` itself when its header is fine, else a repaired copy in ``scratch`` (and True)."""
    with path.open("rb") as fh:
        head = fh.read(MAX_HEADER)
    try:
        at = header_repair_offset(head)
    except PrepareError as exc:
        raise PrepareError(f"{path}: {exc}") from None
    if at is None:
        return path, False
    scratch.mkdir(parents=True, exist_ok=True)
    fixed = scratch / path.name
    with path.open("rb") as src, fixed.open("wb") as dst:
        dst.write(src.read(at))
        dst.write(b"\n")
        shutil.copyfileobj(src, dst, 1 << 20)
    return fixed, True


def _read(path: Path, scratch: Path, repaired: list[str]) -> sitk.Image:
    fixed, changed = repaired_copy(path, scratch)
    if changed:
        repaired.append(path.name)
    try:
        img = sitk.ReadImage(str(fixed))
    except RuntimeError as exc:
        raise PrepareError(f"{path}: SimpleITK cannot read it: {str(exc).strip().splitlines()[-1]}") from None
    finally:
        if changed:
            fixed.unlink(missing_ok=True)
    if img.GetDimension() != 3:
        raise PrepareError(f"{path}: expected a 3-D volume, got {img.GetDimension()}-D")
    return img


#: case-id initial → centre archive of the release
CENTRES = {"D": "Dongyang.zip", "K": "KiTS.zip", "R": "Rider.zip"}


def require_every_centre(ctx: Context, ids: list[str]) -> None:
    """All three centres must be there: centre zips are downloaded one by one, and a forgotten one would
    silently change the split and the answers."""
    missing = [name for initial, name in CENTRES.items() if not any(i.startswith(initial) for i in ids)]
    if missing:
        raise PrepareError(f"{ctx.task.id}: no case of {', '.join(missing)} under {ctx.raw}; the release has three "
                           f"centres: pass every centre zip (or figshare's download-all archive) with --raw-archive")


def prepare(ctx: Context) -> dict[str, int | dict[str, int]]:
    labels = unique_ids(((check_id(ctx.task, stem_of(p, (".seg.nrrd",)), p), p) for p in ctx.files("*.seg.nrrd")),
                        "label", ctx.task)
    images = unique_ids(((stem_of(p, (".nrrd",)), p) for p in ctx.files("*.nrrd")
                         if not p.name.lower().endswith(".seg.nrrd")), "image", ctx.task)
    # the release keeps image and label side by side; a label next to another case's image is a mix-up
    for case_id in set(labels) & set(images):
        if labels[case_id].parent != images[case_id].parent:
            ctx.warn(f"case {case_id}: image and label are in different folders")
    ids = complete_ids(ctx.task, {"image": images, "label": labels}, ctx)
    require_every_centre(ctx, ids)
    train, test = split_and_record(ids, ctx)
    repaired: list[str] = []
    answers: dict[str, str] = {}
    for case_id in ids:
        image = _read(images[case_id], ctx.scratch, repaired)
        label = ctx.on_image_grid(case_id, _read(labels[case_id], ctx.scratch, repaired), image,
                                  labels[case_id], images[case_id])
        image_dst, label_dst = case_paths(ctx.public, ctx.private, case_id, case_id in train, f"{case_id}.nrrd",
                                          f"{case_id}.seg.nrrd", answers)
        write_image(image, image_dst)
        write_image(label, label_dst)
    ctx.notes["nrrd_headers_repaired"] = sorted(repaired)
    standard_outputs(ctx, test, "predicted_mask_path", lambda i: f"predictions/{i}.seg.nrrd", "label_path", answers)
    centres = {c: sum(i.startswith(c) for i in ids) for c in ("D", "K", "R")}
    return {"cases": len(ids), "train": len(train), "test": len(test), "per_centre": centres}
