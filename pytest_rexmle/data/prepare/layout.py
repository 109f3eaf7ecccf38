"""What every per-competition preparer shares: finding raw files, placing prepared files, geometry.

A preparer maps one release's raw layout onto the prepared layout of its spec section. It receives a
``Context`` whose ``public``/``private`` folders are inside a temporary build folder (renamed into
place only when everything succeeded), and records what the manifest must say (counts, resampled
labels, notes such as DENTEX category names) on the context.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import SimpleITK as sitk

from ...medimage.geometry import (
    DIRECTION_TOL,
    ORIGIN_TOL,
    SPACING_TOL,
    Geometry,
    header_geometry,
    reference_geometry,
    write_image,
)
from ...medimage.nifti import write_with_aligned_forms
from ...task import Task
from ..split import split_ids, write_split
from ..synthetic.common import case_paths, write_csv, write_tables
from .errors import PrepareError
from .recognise import is_debris

IGNORED_PARTS = ("__MACOSX", ".rexmle")


@dataclass
class Context:
    task: Task
    raw: Path
    public: Path
    private: Path
    scratch: Path
    notes: dict[str, Any] = field(default_factory=dict)
    resampled: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    # -- finding raw files ---------------------------------------------------------------------------
    def files(self, pattern: str, root: Path | None = None) -> list[Path]:
        """Regular files under ``root`` (default: the raw folder) whose name matches a glob, ignoring case.

        Case is ignored and OS debris (``__MACOSX/``, ``._*``, ``.DS_Store``, ``Thumbs.db``) left out
        because archives made on macOS or Windows carry both; a release's own files never differ only by
        case.
        """
        base = root or self.raw
        wanted = pattern.lower()
        return sorted(p for p in base.rglob("*") if fnmatch.fnmatchcase(p.name.lower(), wanted) and p.is_file()
                      and not _ignored(p, base))

    def find_dir(self, name: str, root: Path | None = None, contains: Iterable[str] = ()) -> Path:
        """The single folder called ``name`` (any case; holding every entry of ``contains``) under the raw folder."""
        base = root or self.raw
        hits = sorted(p for p in base.rglob("*") if p.name.lower() == name.lower() and p.is_dir()
                      and not _ignored(p, base) and all((p / c).exists() for c in contains))
        if len(hits) != 1:
            where = ", ".join(str(h) for h in hits[:5])
            raise PrepareError(f"{self.task.id}: expected one folder named {name!r} under {base}, found "
                               f"{len(hits)}{': ' + where if hits else ''}; is the raw release complete?")
        return hits[0]

    # -- writing prepared files ----------------------------------------------------------------------
    def place(self, src: Path, dst: Path) -> None:
        """Put a raw file into the prepared layout unchanged: a hard link when possible, else a copy.

        Hard links keep the six TopCoW tasks from holding six copies of the same volumes; every consumer
        only reads prepared files, and raw files are never rewritten in place (re-extraction creates
        new files), so sharing the inode is safe.

        The one exception: a 3-D NIfTI file whose qform and sform disagree is
        written with both set to the grid SimpleITK reads (the graders' grid), header only, and recorded
        in the manifest; otherwise nibabel (sform) and SimpleITK (qform) users would see two grids, and a
        mask saved the usual nibabel way would land off the ground truth's grid.
        """
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.name.lower().endswith((".nii", ".nii.gz")):
            found = write_with_aligned_forms(src, dst)
            if found is not None:
                self.notes.setdefault("qform_sform_rewritten", []).append(
                    {"file": _prepared_name(self, dst), "source": src.name, **found})
                return
        try:
            os.link(src, dst)
        except OSError:
            shutil.copyfile(src, dst)

    def write_json(self, path: Path, data: Any) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n", encoding="utf-8")

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    # -- the 3-D label-geometry rule of the graders ----------------------------------------------
    def place_label(self, case_id: str, image: Path, label: Path, dst: Path) -> None:
        """Copy ``label`` to ``dst`` if its grid equals the image's, else resample it (nearest neighbour).

        Agents predict on the image grid and graders require that exact grid, so the ground truth must
        sit on it; a resampling is recorded in the manifest with both geometries.
        """
        # the headers decide; an image of the grid (its voxels allocated) is made only to resample onto
        if geometry_difference(header_geometry(label), header_geometry(image)) is None:
            self.place(label, dst)
            return
        write_image(self.on_image_grid(case_id, sitk.ReadImage(str(label)), reference_geometry(image), label, image),
                    dst)

    def place_cases(self, ids: Iterable[str], train: list[str], images: Mapping[str, Path], labels: Mapping[str, Path],
                    image_name: Callable[[str], str], label_name: Callable[[str], str],
                    place_label: Callable[[str, Path, Path, Path], None] | None = None) -> dict[str, str]:
        """Every case's image and label where the prepared layout puts them (:func:`case_paths`); the test labels, the
        answers, by case. ``place_label`` writes one label (default: :meth:`place_label`)."""
        answers: dict[str, str] = {}
        for case_id in ids:
            image_dst, label_dst = case_paths(self.public, self.private, case_id, case_id in train,
                                              image_name(case_id), label_name(case_id), answers)
            self.place(images[case_id], image_dst)
            (place_label or self.place_label)(case_id, images[case_id], labels[case_id], label_dst)
        return answers

    def on_image_grid(self, case_id: str, img: sitk.Image, ref: sitk.Image, label: Path, image: Path
                      ) -> sitk.Image:
        """The label image ``img`` (read from ``label``) itself when its grid is the image's, else
        resampled onto ``ref`` (nearest neighbour) and recorded."""
        difference = geometry_difference(img, ref)
        if difference is None:
            return img
        out = sitk.Resample(img, ref, sitk.Transform(), sitk.sitkNearestNeighbor, 0, img.GetPixelID())
        # a resampling that leaves nothing of a non-empty label means the label is not on its image at
        # all (another case, another scan): that would silently turn the answer into an empty mask
        if np.any(sitk.GetArrayViewFromImage(img)) and not np.any(sitk.GetArrayViewFromImage(out)):
            raise PrepareError(f"{label}: its grid does not overlap the image {image.name}; resampling it would "
                               f"leave an empty label (wrong file, or a label of another scan?)")
        self.resampled.append({"case": case_id, "label": label.name, "image": image.name, "reason": difference,
                               "from": geometry(img), "to": geometry(ref)})
        return out


def _prepared_name(ctx: Context, path: Path) -> str:
    """``public/...`` or ``private/...``: a prepared file as the manifest names it."""
    for root in (ctx.public, ctx.private):
        if path.is_relative_to(root):
            return f"{root.name}/{path.relative_to(root).as_posix()}"
    return path.name


def _ignored(path: Path, base: Path) -> bool:
    rel = path.relative_to(base)
    return any(part in IGNORED_PARTS for part in rel.parts) or is_debris(rel.as_posix())


def geometry(img: sitk.Image) -> dict[str, list]:
    return {"size": list(img.GetSize()), "spacing": list(img.GetSpacing()), "origin": list(img.GetOrigin()),
            "direction": list(img.GetDirection())}


def geometry_difference(a: sitk.Image | Geometry, b: sitk.Image | Geometry) -> str | None:
    """None when the grids (of images, or of headers read with :func:`.header_geometry`) agree within the
    geometry check's tolerances, else which property differs."""
    a, b = Geometry.of(a), Geometry.of(b)
    if a.dimension != b.dimension:
        return "dimension"
    if a.size != b.size:
        return "size"
    for name, x, y, tol in (("spacing", a.spacing, b.spacing, SPACING_TOL),
                            ("origin", a.origin, b.origin, ORIGIN_TOL),
                            ("direction", a.direction, b.direction, DIRECTION_TOL)):
        if np.max(np.abs(np.subtract(x, y))) > tol:
            return name
    return None


def unique_ids(pairs: Iterable[tuple[str, Path]], what: str, task: Task) -> dict[str, Path]:
    """id → file, failing loudly when two raw files map to one case id."""
    out: dict[str, Path] = {}
    for case_id, path in pairs:
        if case_id in out:
            raise PrepareError(f"{task.id}: two raw {what} files map to the case id {case_id!r}: "
                               f"{out[case_id]} and {path}")
        out[case_id] = path
    return out


def complete_ids(task: Task, required: Mapping[str, Mapping[str, Path]], ctx: Context) -> list[str]:
    """Ids that have every required file; the others are reported in the manifest, never silently kept."""
    sets = {name: set(files) for name, files in required.items()}
    everything = set().union(*sets.values()) if sets else set()
    ids = sorted(set.intersection(*sets.values())) if sets else []
    dropped = {i: sorted(n for n, s in sets.items() if i not in s) for i in sorted(everything - set(ids))}
    if dropped:
        ctx.notes["incomplete_cases"] = {i: {"missing": m} for i, m in dropped.items()}
        shown = ", ".join(f"{i} (no {'/'.join(m)})" for i, m in list(dropped.items())[:5])
        ctx.warn(f"{len(dropped)} incomplete case(s) left out: {shown}{', ...' if len(dropped) > 5 else ''}")
    if not ids:
        raise PrepareError(f"{task.id}: no complete case found in {ctx.raw} (needed: {', '.join(required)})")
    return ids


def stem_of(path: Path, suffixes: tuple[str, ...]) -> str:
    name = path.name
    for suffix in suffixes:
        if name.lower().endswith(suffix.lower()):
            return name[: -len(suffix)]
    return path.stem


def split_and_record(ids: Iterable[str], ctx: Context) -> tuple[list[str], list[str]]:
    train, test = split_ids(ids)
    write_split(ctx.private, train, test)
    return train, test


def standard_outputs(ctx: Context, test: list[str], column: str, path_of: Callable[[str], str],
                     answer_column: str, answers: Mapping[str, str]) -> None:
    """sample_submission.csv (conventional prediction paths) and answers.csv, as the twins write them."""
    write_tables(ctx.public, ctx.private, ctx.task.id_column, test, column, path_of, answer_column, answers)


PID = re.compile(r"^[^/\\\x00-\x1f]+$")


def check_id(task: Task, case_id: str, source: Path) -> str:
    """Case ids become file names; refuse anything that is not a plain file-name token."""
    if not PID.match(case_id) or case_id.startswith(".") or case_id != case_id.strip():
        raise PrepareError(f"{task.id}: raw file {source} gives the unusable case id {case_id!r}")
    return case_id


__all__ = ["Context", "write_csv", "geometry", "geometry_difference", "unique_ids", "complete_ids",
           "stem_of", "split_and_record", "standard_outputs", "check_id"]
