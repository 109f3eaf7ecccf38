"""PUMA twins: small RGBA "H&E" ROIs with QuPath-style GeoJSON annotations.

The real ROIs are 1024×1024; the twin's are 128×128 because the tissue metric resizes every mask to
1024×1024 anyway and the nuclei metric works in ROI pixels. Annotations use the real GeoJSON structure
and class names (``tissue_*`` with holes and MultiPolygons, the ten ``nuclei_*`` names), and the labels
are derived from them with the grader's own converters, exactly as the preparer does for real data.
Every class occurs in every case, so a perfect submission reaches the metric's maximum (1.0).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
from PIL import Image

from ...data.split import split_ids, write_split
from ...data.synthetic.common import write_tables
from ...task import Task
from .grade import NUCLEI_TRACK2, nuclei_from_geojson, rasterise_tissue

SIZE = 128                      # ROI width = height in pixels
N_PRIMARY, N_METASTATIC = 13, 12  # 25 cases -> 20 train / 5 test
N_NUCLEI = 24                   # per ROI; each of the ten classes at least once
MIN_NUCLEUS_GAP = 11.0          # px between nucleus centres, so the perfect matching is unambiguous

#: rough H&E colours (RGB) per tissue value, for a plausible-looking image
TISSUE_RGB = np.array([[242, 240, 245], [228, 160, 200], [200, 60, 80], [150, 90, 170], [185, 110, 160],
                       [215, 180, 205]], dtype=np.float64)


def case_ids() -> list[str]:
    return ([f"training_set_primary_roi_{i:03d}" for i in range(1, N_PRIMARY + 1)]
            + [f"training_set_metastatic_roi_{i:03d}" for i in range(1, N_METASTATIC + 1)])


def _blob(rng: np.random.Generator, cx: float, cy: float, radius: float, n: int, jitter: float = 0.25,
          clockwise: bool = False) -> list[list[float]]:
    """A closed, star-shaped ring (first point repeated at the end, as GeoJSON requires)."""
    angles = np.sort(rng.uniform(0, 2 * np.pi, n)) if n > 6 else np.linspace(0, 2 * np.pi, n, endpoint=False)
    if clockwise:
        angles = angles[::-1]
    r = radius * (1 + rng.uniform(-jitter, jitter, n))
    xs = np.clip(cx + r * np.cos(angles), 0, SIZE)
    ys = np.clip(cy + r * np.sin(angles), 0, SIZE)
    ring = [[round(float(x), 1), round(float(y), 1)] for x, y in zip(xs, ys, strict=True)]
    return ring + [ring[0]]


def _feature(name: str, kind: str, coordinates: list) -> dict:
    return {"type": "Feature", "geometry": {"type": kind, "coordinates": coordinates},
            "properties": {"objectType": "annotation", "classification": {"name": name}}}


def tissue_geojson(rng: np.random.Generator) -> dict:
    """Stroma everywhere, a tumour with a hole, epidermis band, vessels (MultiPolygon), necrosis, glass."""
    s = SIZE
    cx, cy = rng.uniform(0.35 * s, 0.65 * s, 2)
    edge = float(rng.uniform(0.12, 0.2) * s)
    features = [
        _feature("tissue_stroma", "Polygon", [[[0, 0], [s, 0], [s, s], [0, s], [0, 0]]]),
        _feature("tissue_tumor", "Polygon", [_blob(rng, cx, cy, 0.28 * s, 14),
                                             _blob(rng, cx, cy, 0.07 * s, 6, 0.1, clockwise=True)]),
        _feature("tissue_epidermis", "Polygon",
                 [[[0, 0], [s, 0], [s, round(edge + rng.uniform(-4, 4), 1)], [0, round(edge, 1)], [0, 0]]]),
        _feature("tissue_blood_vessel", "MultiPolygon",
                 [[_blob(rng, x, y, 0.05 * s, 8)] for x, y in (rng.uniform(0.1 * s, 0.9 * s, 2) for _ in range(2))]),
        _feature("tissue_necrosis", "Polygon", [_blob(rng, cx + 0.12 * s, cy, 0.06 * s, 8)]),
        _feature("tissue_white_background", "Polygon",
                 [[[s, s], [s - 0.2 * s, s], [s, s - 0.25 * s], [s, s]]]),
    ]
    return {"type": "FeatureCollection", "features": features}


def _centres(rng: np.random.Generator, n: int) -> np.ndarray:
    """Rejection-sampled nucleus centres at least MIN_NUCLEUS_GAP apart."""
    out: list[np.ndarray] = []
    while len(out) < n:
        c = rng.uniform(6, SIZE - 6, 2)
        if all(np.hypot(*(c - o)) >= MIN_NUCLEUS_GAP for o in out):
            out.append(c)
    return np.array(out)


def nuclei_geojson(rng: np.random.Generator) -> dict:
    """N_NUCLEI nuclei covering all ten classes; some features are two-member MultiPolygons."""
    names = list(NUCLEI_TRACK2) + list(rng.choice(NUCLEI_TRACK2, N_NUCLEI - len(NUCLEI_TRACK2)))
    rng.shuffle(names)
    centres = _centres(rng, N_NUCLEI)
    rings = [_blob(rng, x, y, rng.uniform(2.5, 4.5), int(rng.integers(8, 13)), 0.15) for x, y in centres]
    features, i = [], 0
    while i < N_NUCLEI:
        if i + 1 < N_NUCLEI and names[i] == names[i + 1]:
            features.append(_feature(str(names[i]), "MultiPolygon", [[rings[i]], [rings[i + 1]]]))
            i += 2
        else:
            features.append(_feature(str(names[i]), "Polygon", [rings[i]]))
            i += 1
    return {"type": "FeatureCollection", "features": features}


def roi_image(rng: np.random.Generator, tissue: np.ndarray, nuclei: dict | None = None) -> Image.Image:
    """RGBA ROI coloured by tissue class with mild noise; nuclei (if given) drawn as dark spots."""
    rgb = TISSUE_RGB[tissue] + rng.normal(0, 4, tissue.shape + (3,))
    if nuclei is not None:
        yy, xx = np.mgrid[:SIZE, :SIZE]
        for polygon in nuclei["polygons"]:
            cx, cy = np.mean(np.asarray(polygon["path_points"]), axis=0)
            rgb[(xx - cx) ** 2 + (yy - cy) ** 2 <= 9] = (70, 40, 110)
    rgba = np.concatenate([np.clip(rgb, 0, 255), np.full(tissue.shape + (1,), 255.0)], axis=-1)
    return Image.fromarray(rgba.astype(np.uint8), "RGBA")


def _save_tiff(image: Image.Image, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, compression="tiff_deflate")


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")


def tissue(task: Task, public: Path, private: Path, rng: np.random.Generator) -> None:
    """Tissue tasks' layout: ROI TIFFs, tissue GeoJSON, rasterised masks (train public, test private)."""
    ids = case_ids()
    train, test = split_ids(ids)
    answers = {}
    for case_id in ids:
        geo = tissue_geojson(rng)
        mask = rasterise_tissue(geo, (SIZE, SIZE), case_id)
        where = "train" if case_id in train else "test"
        _save_tiff(roi_image(rng, mask), public / where / "images" / f"{case_id}.tif")
        if where == "train":
            _write_json(public / "train" / "labels" / f"{case_id}_tissue.geojson", geo)
            _save_tiff(Image.fromarray(mask), public / "train" / "masks" / f"{case_id}.tif")
        else:
            _save_tiff(Image.fromarray(mask), private / "test" / "labels" / f"{case_id}.tif")
            answers[case_id] = f"test/labels/{case_id}.tif"
    write_tables(public, private, task.id_column, test, "predicted_mask_path", lambda i: f"predictions/{i}.tif",
                 "label_path", answers)
    write_split(private, train, test)


def _nuclei(task: Task, public: Path, private: Path, rng: np.random.Generator, track: int) -> None:
    """Nuclei tasks' layout: ROI TIFFs, nuclei GeoJSON (ten names), converted JSON with the track's names."""
    ids = case_ids()
    train, test = split_ids(ids)
    answers = {}
    for case_id in ids:
        geo = nuclei_geojson(rng)
        converted = nuclei_from_geojson(geo, track, case_id)
        mask = rasterise_tissue(tissue_geojson(rng), (SIZE, SIZE), case_id)
        where = "train" if case_id in train else "test"
        _save_tiff(roi_image(rng, mask, converted), public / where / "images" / f"{case_id}.tif")
        if where == "train":
            _write_json(public / "train" / "labels" / f"{case_id}_nuclei.geojson", geo)
            _write_json(public / "train" / "nuclei" / f"{case_id}.json", converted)
        else:
            _write_json(private / "test" / "labels" / f"{case_id}.json", converted)
            answers[case_id] = f"test/labels/{case_id}.json"
    write_tables(public, private, task.id_column, test, "predicted_nuclei_path", lambda i: f"predictions/{i}.json",
                 "label_path", answers)
    write_split(private, train, test)


nuclei_track1 = functools.partial(_nuclei, track=1)
nuclei_track2 = functools.partial(_nuclei, track=2)
