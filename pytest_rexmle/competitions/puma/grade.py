"""PUMA graders: tissue micro Dice and nuclei centroid F1, as the organisers score.

Both tracks use the organisers' track-2 evaluation: tissue masks (any size) are brought to 1024×1024
with Pillow's nearest-neighbour resize, then Dice is pooled over all test images per class; nuclei
polygons are reduced to vertex-mean centroids and matched per class within 15 px.

The GeoJSON converters below (tissue rasterisation, nuclei extraction, class-name tables) define the
ground truth; they live here so the real-data preparer and the synthetic twin share one definition.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from PIL import Image, ImageDraw

from ...agent_output import open_reader, read_json
from ...errors import InvalidSubmission
from ...graders.base import Grader
from ...metrics.parallel import parallel_map
from ...metrics.points import case_class_f1, macro_f1_over_cases
from ...submission import CaseTable

if TYPE_CHECKING:
    import numpy as np  # start-up: numpy only where this runs

    from ...metrics.points import Point

# -- class tables --------------------------------------------------------------------------------------
TISSUE_VALUES: dict[str, int] = {
    "tissue_white_background": 0, "tissue_stroma": 1, "tissue_blood_vessel": 2,
    "tissue_tumor": 3, "tissue_epidermis": 4, "tissue_necrosis": 5,
}
#: scored tissue classes (value → name); background (0) is never scored
TISSUE_SCORED: dict[int, str] = {v: k for k, v in TISSUE_VALUES.items() if v != 0}

NUCLEI_TRACK2: tuple[str, ...] = (
    "nuclei_tumor", "nuclei_lymphocyte", "nuclei_plasma_cell", "nuclei_histiocyte", "nuclei_melanophage",
    "nuclei_neutrophil", "nuclei_stroma", "nuclei_epithelium", "nuclei_endothelium", "nuclei_apoptosis",
)
NUCLEI_TRACK1: tuple[str, ...] = ("nuclei_tumor", "nuclei_lymphocyte", "nuclei_other")
#: the organisers' track-1 grouping: tumour, TILs (lymphocytes + plasma cells), everything else
TRACK1_OF: dict[str, str] = {
    name: ("nuclei_tumor" if name == "nuclei_tumor"
           else "nuclei_lymphocyte" if name in ("nuclei_lymphocyte", "nuclei_plasma_cell")
           else "nuclei_other")
    for name in NUCLEI_TRACK2
}

#: the organisers' evaluation grid (width, height)
EVAL_SIZE = (1024, 1024)
#: refuse images larger than this many pixels before decoding (a guard, 64× the expected size)
MAX_PIXELS = 8192 * 8192
#: a real ROI's nuclei JSON is a few MB; the cap bounds parsing memory (Python objects are ~10× the text)
MAX_JSON_BYTES = 64 * 1024 * 1024
#: a tissue mask file: 8192² pixels of up to 32 bits, plus container overhead
MAX_MASK_FILE_BYTES = MAX_PIXELS * 4 + (1 << 20)


# -- GeoJSON → ground truth (used by the preparer and the synthetic twin) -----------------------------
def _geojson_features(data: Any, source: str) -> list[dict]:
    if isinstance(data, list):
        return data
    if isinstance(data, dict) and data.get("type") == "Feature":
        return [data]
    if isinstance(data, dict) and isinstance(data.get("features"), list):
        return data["features"]
    raise ValueError(f"{source}: not a GeoJSON FeatureCollection, Feature or feature list")


def _feature_polygons(feature: dict, source: str) -> tuple[str, list[list[list[Sequence[float]]]]]:
    """(class name, polygons as lists of rings); MultiPolygon members are separate polygons."""
    try:
        name = feature["properties"]["classification"]["name"]
        geometry = feature["geometry"]
        kind, coords = geometry["type"], geometry["coordinates"]
    except (KeyError, TypeError):
        raise ValueError(f"{source}: feature without geometry or properties.classification.name") from None
    if kind == "Polygon":
        return name, [coords]
    if kind == "MultiPolygon":
        return name, list(coords)
    raise ValueError(f"{source}: unsupported geometry type {kind!r} (only Polygon and MultiPolygon)")


def _ring_mask(ring: Sequence[Sequence[float]], size: tuple[int, int]) -> np.ndarray:
    import numpy as np  # start-up: numpy only where this runs

    canvas = Image.new("L", size, 0)
    ImageDraw.Draw(canvas).polygon([(float(p[0]), float(p[1])) for p in ring], fill=1, outline=1)
    return np.asarray(canvas, dtype=bool)


def rasterise_tissue(geojson: Any, size: tuple[int, int], source: str = "tissue GeoJSON") -> np.ndarray:
    """The tissue mask: uint8 (height, width), features in file order, later ones overwrite.

    Each polygon is its exterior minus its holes, every ring drawn filled *and* outlined by Pillow, so
    boundary pixels belong to the polygon as in the organisers' masks. Unknown class names raise.
    """
    import numpy as np  # start-up: numpy only where this runs

    width, height = size
    out = np.zeros((height, width), dtype=np.uint8)
    for feature in _geojson_features(geojson, source):
        name, polygons = _feature_polygons(feature, source)
        if name not in TISSUE_VALUES:
            raise ValueError(f"{source}: unknown tissue class {name!r}; expected one of {sorted(TISSUE_VALUES)}")
        region = np.zeros((height, width), dtype=bool)
        for rings in polygons:
            if not rings or len(rings[0]) < 3:
                continue
            shape = _ring_mask(rings[0], size)
            for hole in rings[1:]:
                if len(hole) >= 3:
                    shape &= ~_ring_mask(hole, size)
            region |= shape
        out[region] = TISSUE_VALUES[name]
    return out


def nuclei_from_geojson(geojson: Any, track: int, source: str = "nuclei GeoJSON") -> dict[str, list[dict]]:
    """The nuclei ground truth ``{"polygons": [{"name", "path_points"}]}`` in file order.

    Each polygon (each MultiPolygon member) becomes one nucleus; the exterior ring loses its closing
    duplicate point and must keep at least 3 points (otherwise the organisers would skip it anyway).
    """
    if track not in (1, 2):
        raise ValueError(f"track must be 1 or 2, got {track!r}")
    polygons = []
    for feature in _geojson_features(geojson, source):
        name, members = _feature_polygons(feature, source)
        if name not in TRACK1_OF:
            raise ValueError(f"{source}: unknown nuclei class {name!r}; expected one of {list(NUCLEI_TRACK2)}")
        label = TRACK1_OF[name] if track == 1 else name
        for rings in members:
            if not rings:
                continue
            ring = [[float(v) for v in p[:2]] for p in rings[0]]
            if len(ring) > 1 and ring[0] == ring[-1]:
                ring = ring[:-1]
            if len(ring) >= 3:
                polygons.append({"name": label, "path_points": ring})
    return {"polygons": polygons}


# -- reading predictions -----------------------------------------------------------------------------
def read_tissue_mask(path: Path, case_id: str) -> np.ndarray:
    """A single-channel integer TIFF/PNG with values 0–5, resized to 1024×1024 as the organisers do."""
    import numpy as np  # start-up: numpy only where this runs

    where = f"case {case_id!r}"
    try:
        with open_reader(path, MAX_MASK_FILE_BYTES, f"{where}: {path.name!r}") as fh, Image.open(fh) as img:
            if img.format not in ("TIFF", "PNG"):
                raise InvalidSubmission(f"{where}: {path.name!r} is {img.format or 'not an image'}, "
                                        "must be TIFF or PNG")
            if (pages := getattr(img, "n_frames", 1)) != 1:
                raise InvalidSubmission(f"{where}: {path.name!r} has {pages} pages; one 2-D mask is required")
            if len(img.getbands()) != 1:
                raise InvalidSubmission(f"{where}: {path.name!r} has {len(img.getbands())} channels ({img.mode}); "
                                        "a single-channel mask is required")
            if img.mode.startswith("F"):
                raise InvalidSubmission(f"{where}: {path.name!r} holds floating-point values; "
                                        "an integer mask is required")
            width, height = img.size
            if width < 1 or height < 1 or width * height > MAX_PIXELS:
                raise InvalidSubmission(f"{where}: {path.name!r} is {width}×{height} pixels; expected 1024×1024 "
                                        f"(at most {MAX_PIXELS} pixels are read)")
            img.load()
            values = np.asarray(img)
            resized = np.asarray(img.resize(EVAL_SIZE, Image.Resampling.NEAREST))
    except InvalidSubmission:
        raise
    except Exception as exc:  # Pillow signals undecodable agent files with many exception types
        raise InvalidSubmission(f"{where}: {path.name!r} cannot be read as a TIFF/PNG mask ({exc})") from None
    if values.ndim != 2 or values.dtype.kind not in "biu":
        raise InvalidSubmission(f"{where}: {path.name!r} must be a 2-D integer mask, got {values.dtype} {values.shape}")
    if values.size and (int(values.min()) < 0 or int(values.max()) > 5):
        bad = sorted(int(v) for v in np.unique(values) if not 0 <= int(v) <= 5)[:5]
        raise InvalidSubmission(f"{where}: {path.name!r} has label value(s) {bad}; allowed are 0–5")
    return resized.astype(np.uint8)


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidSubmission(f"{what} must be a number, got {value!r:.60}")
    try:
        out = float(value)
    except OverflowError:
        out = math.inf
    if not math.isfinite(out):
        raise InvalidSubmission(f"{what} must be finite, got {value!r:.60}")
    return out


def parse_nuclei(data: Any, names: Iterable[str], where: str) -> list[Point]:
    """The organisers' polygon JSON reduced to centroids; polygons with < 3 points are skipped."""
    from ...metrics.points import Point, polygon_centroid  # start-up: numpy only where this runs

    allowed = set(names)
    if not isinstance(data, dict) or not isinstance(data.get("polygons"), list):
        raise InvalidSubmission(f"{where}: the JSON must be an object with a 'polygons' list")
    points = []
    for k, polygon in enumerate(data["polygons"]):
        at = f"{where}: polygons[{k}]"
        if not isinstance(polygon, dict):
            raise InvalidSubmission(f"{at} must be an object with 'name' and 'path_points'")
        name = polygon.get("name")
        if not isinstance(name, str) or name not in allowed:
            raise InvalidSubmission(f"{at}: unknown class name {name!r:.60}; allowed are {sorted(allowed)}")
        path_points = polygon.get("path_points")
        if not isinstance(path_points, list):
            raise InvalidSubmission(f"{at}: 'path_points' must be a list of [x, y] points")
        coords = []
        for j, point in enumerate(path_points):
            if not isinstance(point, list) or len(point) not in (2, 3):
                raise InvalidSubmission(f"{at}: path_points[{j}] must be [x, y] or [x, y, z], got {point!r:.60}")
            coords.append([_number(v, f"{at}: path_points[{j}]") for v in point])
        score = _number(polygon["score"], f"{at}: 'score'") if "score" in polygon else 1.0
        if len(coords) < 3:
            continue
        x, y = polygon_centroid(coords)
        points.append(Point(name, x, y, score))
    return points


def read_nuclei(path: Path, names: Iterable[str], case_id: str) -> list[Point]:
    where = f"case {case_id!r}"
    # bounded size, depth and numbers; NaN/Infinity parse so that the finiteness rule below names them
    data = read_json(path, MAX_JSON_BYTES, f"{where}: {path.name!r}", kind="UTF-8 JSON", allow_constants=True)
    return parse_nuclei(data, names, where)


# -- tissue ------------------------------------------------------------------------------------------
def micro_dice(counts: np.ndarray) -> dict[str, float]:
    """Organisers' pooled Dice from a 6×6 confusion matrix ``counts[pred, truth]`` summed over images.

    dice_c = (2·I + 1e-5)/(U + 1e-5), and 0 whenever I = 0 (also for a class absent everywhere).
    """
    import numpy as np  # start-up: numpy only where this runs

    out = {}
    for value, name in TISSUE_SCORED.items():
        inter = int(counts[value, value])
        union = int(counts[value, :].sum() + counts[:, value].sum())
        out[f"dice_{name}"] = 0.0 if inter == 0 else float((2 * inter + 1e-5) / (union + 1e-5))
    return {"dice": float(np.mean(list(out.values()))), **out}


def confusion(pred: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """6×6 pixel counts ``[pred, truth]`` of two label maps with values 0–5."""
    import numpy as np  # start-up: numpy only where this runs

    return np.bincount(pred.astype(np.int64).ravel() * 6 + truth.astype(np.int64).ravel(),
                       minlength=36).reshape(6, 6)


class TissueSegmentation(Grader):
    prediction_format = "tiff"
    prediction_columns = ("predicted_mask_path",)
    answer_columns = ("label_path",)
    prediction_file = "predictions/{}.tif"
    test_input = "test/images/{}.tif"

    def score(self, submission: CaseTable, answers: CaseTable) -> dict[str, float]:
        import numpy as np  # start-up: numpy only where this runs

        def case_counts(case_id: str) -> np.ndarray:
            pred = read_tissue_mask(submission.file(case_id, "predicted_mask_path"), case_id)
            try:
                truth = read_tissue_mask(answers.root / answers.value(case_id, "label_path"), case_id)
            except InvalidSubmission as exc:
                raise RuntimeError(f"private ground truth is broken: {exc}") from None
            return confusion(pred, truth)

        counts = np.zeros((6, 6), dtype=np.int64)
        for case in parallel_map(case_counts, answers.ids):  # Pillow decodes and resizes without the GIL
            counts += case
        return micro_dice(counts)

    def check_case(self, submission: CaseTable, case_id: str, public_dir: Path) -> None:
        read_tissue_mask(submission.file(case_id, "predicted_mask_path"), case_id)

    def write_baseline(self, public_dir: Path, out_dir: Path) -> None:
        """All background on each test ROI's grid: valid, and Dice 0 for every class."""
        def empty(case_id: str, path: Path) -> None:
            with Image.open(self.test_input_path(public_dir, case_id)) as img:
                size = img.size
            Image.new("L", size, 0).save(path, compression="tiff_deflate")

        self.write_files(out_dir, self.public_test_ids(public_dir), empty)


# -- nuclei ------------------------------------------------------------------------------------------
class NucleiDetection(Grader):
    prediction_format = "json"
    prediction_columns = ("predicted_nuclei_path",)
    answer_columns = ("label_path",)
    prediction_file = "predictions/{}.json"
    #: the class names of this track (submissions may use only these)
    class_names: ClassVar[tuple[str, ...]]
    #: extras reported even when a class occurs nowhere (its value is then 0 by the aggregate rule)
    always_reported: ClassVar[tuple[str, ...]] = ()

    def score(self, submission: CaseTable, answers: CaseTable) -> dict[str, float]:
        per_case = []
        for case_id, predicted, reference in self.case_files(submission, answers):
            pred = read_nuclei(predicted, self.class_names, case_id)
            try:
                truth = read_nuclei(reference, self.class_names, case_id)
            except InvalidSubmission as exc:
                raise RuntimeError(f"private ground truth is broken: {exc}") from None
            per_case.append(case_class_f1(truth, pred))
        macro, per_class = macro_f1_over_cases(per_case)
        extras = {f"f1_{name}": per_class.get(name, 0.0) for name in self.always_reported}
        extras.update({f"f1_{name}": value for name, value in per_class.items()})
        return {"f1": macro, **extras}

    def check_case(self, submission: CaseTable, case_id: str, public_dir: Path) -> None:
        read_nuclei(submission.file(case_id, "predicted_nuclei_path"), self.class_names, case_id)

    def write_baseline(self, public_dir: Path, out_dir: Path) -> None:
        """No nuclei at all: valid, and F1 0 for every class present in the ground truth."""
        self.write_files(out_dir, self.public_test_ids(public_dir),
                         lambda i, path: path.write_text(json.dumps({"polygons": []}), encoding="utf-8"))


class Track1Nuclei(NucleiDetection):
    """3 classes: tumour, TILs (as ``nuclei_lymphocyte``), other."""

    class_names = NUCLEI_TRACK1
    always_reported = NUCLEI_TRACK1


class Track2Nuclei(NucleiDetection):
    """The ten GeoJSON class names, unchanged."""

    class_names = NUCLEI_TRACK2
