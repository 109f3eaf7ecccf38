"""LDCT-IQA 2023: CT slices with radiologists' scores; the organisers' own test set.

The training set and the test set are separate raw parts (``raw/ldct-iqa/train``, ``test``); in each, the
score file is the JSON whose keys name the images beside it, whatever it is called.

The test set comes in two layouts. The single-folder one (``LDCTIQAC_test/images/*.tiff`` and a flat
``{image: score}`` JSON), and the organisers' release as third-party loaders read it:
``LDCTIQAC2023_test/test_N/*.tif`` with ``test-ground-truth.json`` mapping each part to its images,
``{"test_N[.ext]": {"fnames": [stem, ...], "scores": [score, ...]}}`` (the part's folder is the key
without its extension). Both are recognised by content, never by name.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from pathlib import Path

from ...data.prepare.errors import PrepareError
from ...data.prepare.layout import Context, check_id, write_csv
from ...data.split import write_split
from ...data.synthetic.common import write_tables

IMAGE_SUFFIXES = (".tif", ".tiff")
IMAGE_DIRS = ("image", "images")


def _stem_key(key: object) -> str:
    text = str(key).strip()
    name = text.replace("\\", "/").rsplit("/", 1)[-1]
    return Path(name).stem if Path(name).suffix.lower() in IMAGE_SUFFIXES else name


def _image_folders(json_path: Path) -> list[Path]:
    """Where the scored images may sit: ``image/`` or ``images/`` beside the JSON (any case), or its folder."""
    near = [p for p in json_path.parent.iterdir() if p.is_dir() and p.name.lower() in IMAGE_DIRS]
    return near + [json_path.parent]


def _images_in(ctx: Context, folder: Path) -> dict[str, Path]:
    images: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES and not path.name.startswith("._"):
            case_id = check_id(ctx.task, path.stem, path)
            if case_id in images:
                raise PrepareError(f"{ctx.task.id}: two images map to the id {case_id!r}: {images[case_id]}, {path}")
            images[case_id] = path
    return images


def _score_file(ctx: Context, root: Path, preferred: str) -> tuple[Path, dict, dict[str, Path]]:
    """The JSON whose keys name the images beside it: recognised by its keys, not by its name.

    The organisers' own test release names its ground-truth file differently from ``test.json``; any
    JSON object whose keys are (mostly) the stems of a neighbouring image folder is the score file.
    ``preferred`` only breaks a tie between two such files.
    """
    found = []
    for path in ctx.files("*", root):
        if path.suffix.lower() != ".json":
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8-sig"))
        except (OSError, ValueError):
            ctx.warn(f"{path.name}: not valid JSON, ignored")
            continue
        if not isinstance(data, dict) or not data:
            continue
        keys = {_stem_key(k) for k in data}
        for folder in _image_folders(path):
            images = _images_in(ctx, folder)
            if images and len(keys & set(images)) * 2 >= len(keys):
                found.append((path, data, images))
                break
    if len(found) > 1:
        found = [f for f in found if f[0].name.lower() == preferred] or found
    if len(found) != 1:
        names = ", ".join(str(f[0].relative_to(ctx.raw)) for f in found)
        raise PrepareError(f"{ctx.task.id}: expected one JSON of scores whose keys name the TIFF images beside it "
                           f"under {root}, found {len(found)}{': ' + names if names else ''}")
    return found[0]


def _parts_of(data: object) -> dict[str, tuple[list, list]] | None:
    """``{part folder: (file names, scores)}`` when ``data`` is a per-part ground truth, else None."""
    if not isinstance(data, dict) or not data:
        return None
    parts = {}
    for key, value in data.items():
        if not (isinstance(value, dict) and isinstance(value.get("fnames"), list)
                and isinstance(value.get("scores"), list)):
            return None
        parts[os.path.splitext(str(key).strip())[0]] = (value["fnames"], value["scores"])
    return parts


def _parted_score_file(ctx: Context, root: Path) -> tuple[Path, dict[str, tuple[list, list]]] | None:
    """The organisers' per-part ground truth (``test-ground-truth.json`` in their release), if there is one."""
    found = []
    for path in ctx.files("*.json", root):
        try:
            parts = _parts_of(json.loads(path.read_text(encoding="utf-8-sig")))
        except (OSError, ValueError):
            continue  # _score_file reports unreadable JSON
        if parts is not None:
            found.append((path, parts))
    if len(found) > 1:
        names = ", ".join(str(f[0].relative_to(ctx.raw)) for f in found)
        raise PrepareError(f"{ctx.task.id}: two per-part ground-truth files under {root}: {names}")
    return found[0] if found else None


def _parted_set(ctx: Context, path: Path, parts: dict[str, tuple[list, list]]
                ) -> tuple[dict[str, float], dict[str, Path]]:
    """(id → score, id → image) of a per-part ground truth; each part's images sit in ``<part>/`` beside it."""
    scores: dict[str, float] = {}
    images: dict[str, Path] = {}
    folders = {p.name.lower(): p for p in path.parent.iterdir() if p.is_dir()}
    for part, (names, values) in sorted(parts.items()):
        if len(names) != len(values):
            raise PrepareError(f"{path}: part {part!r} lists {len(names)} file names and {len(values)} scores")
        folder = folders.get(part.lower())
        if folder is None:
            raise PrepareError(f"{path}: part {part!r} has no folder {part}/ beside it; is the release complete?")
        in_part = _images_in(ctx, folder)
        for case_id in in_part:
            if case_id in images:
                raise PrepareError(f"{ctx.task.id}: two images map to the id {case_id!r}: {images[case_id]}, "
                                   f"{in_part[case_id]}")
        images.update(in_part)
        _add_scores(path, zip(names, values, strict=False), scores)
    ctx.notes["test_layout"] = {"parts": {part: len(names) for part, (names, _) in sorted(parts.items())}}
    return scores, images


def _add_scores(path: Path, entries: Iterable[tuple[object, object]], scores: dict[str, float]) -> None:
    """Add (image name, score) ``entries`` to ``scores`` by image id; each id once, each score a finite number."""
    for key, value in entries:
        stem = _stem_key(key)
        if stem in scores:
            raise PrepareError(f"{path}: two entries map to the image id {stem!r}")
        try:
            score = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise PrepareError(f"{path}: score of {key!r} is not a number: {value!r}") from None
        if not math.isfinite(score):
            raise PrepareError(f"{path}: score of {key!r} is not finite")
        scores[stem] = score


def _scored_set(ctx: Context, root: Path, preferred: str) -> dict[str, tuple[Path, float]]:
    """id → (image, score) for one score file and its image folder(s); only images with a score."""
    parted = _parted_score_file(ctx, root)
    if parted is not None:
        scores, images = _parted_set(ctx, *parted)
        return _matched(ctx, preferred, parted[0], scores, images)
    path, scores_raw, images = _score_file(ctx, root, preferred)
    scores = {}
    _add_scores(path, scores_raw.items(), scores)
    return _matched(ctx, preferred, path, scores, images)


def _matched(ctx: Context, preferred: str, path: Path, scores: dict[str, float],
             images: dict[str, Path]) -> dict[str, tuple[Path, float]]:
    """The images that have a score; the others (either way) are listed in the manifest."""
    unscored, missing = sorted(set(images) - set(scores)), sorted(set(scores) - set(images))
    if unscored or missing:
        ctx.notes.setdefault("incomplete_cases", {})[path.name] = {"images_without_score": unscored[:50],
                                                                   "scores_without_image": missing[:50]}
    ctx.notes.setdefault("score_files", {})[preferred] = str(path.relative_to(ctx.raw))
    return {i: (images[i], scores[i]) for i in sorted(set(images) & set(scores))}


def prepare(ctx: Context) -> dict[str, int]:
    train = _scored_set(ctx, ctx.raw / "train", "train.json")   # each raw part has its own folder
    test = _scored_set(ctx, ctx.raw / "test", "test.json")
    if not train or not test:
        raise PrepareError(f"{ctx.task.id}: found {len(train)} scored training and {len(test)} scored test images")
    overlap = sorted(set(train) & set(test))
    if overlap:
        ctx.warn(f"{len(overlap)} test image ids also name training images (different files), e.g. {overlap[:3]}")
    for case_id, (path, _) in train.items():
        ctx.place(path, ctx.public / "train" / "images" / f"{case_id}.tif")
    for case_id, (path, _) in test.items():
        ctx.place(path, ctx.public / "test" / "images" / f"{case_id}.tiff")
    write_csv(ctx.public / "train_labels.csv", ["image_id", "quality_score"],
              ({"image_id": i, "quality_score": repr(s)} for i, (_, s) in sorted(train.items())))
    write_tables(ctx.public, ctx.private, "image_id", test, "quality_score", "0.0", "quality_score",
                 {i: repr(s) for i, (_, s) in test.items()})
    write_split(ctx.private, sorted(train), sorted(test), rule="source")
    return {"cases": len(train) + len(test), "train": len(train), "test": len(test)}
