"""PUMA: tissue micro Dice, nuclei F1, GeoJSON conversion, twins, bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import tifffile
from PIL import Image

from pytest_rexmle.competitions.puma.grade import (
    NUCLEI_TRACK1,
    NUCLEI_TRACK2,
    TRACK1_OF,
    confusion,
    micro_dice,
    nuclei_from_geojson,
    rasterise_tissue,
    read_tissue_mask,
)
from pytest_rexmle.competitions.puma.synthetic import SIZE
from pytest_rexmle.data.synthetic import generate
from pytest_rexmle.data.synthetic.common import write_answers, write_csv
from pytest_rexmle.errors import InvalidSubmission
from pytest_rexmle.graders.base import load_grader
from pytest_rexmle.scoring.ranking import rank
from pytest_rexmle.task import registry

from .editing import copy_of

TISSUE = ("puma-t1-tissue-seg", "puma-t2-tissue-seg")
NUCLEI = ("puma-t1-nuclei-det", "puma-t2-nuclei-det")
ALL = TISSUE + NUCLEI
EPS = 1e-5


def feature(name: str, coordinates, kind: str = "Polygon") -> dict:
    return {"type": "Feature", "geometry": {"type": kind, "coordinates": coordinates},
            "properties": {"classification": {"name": name}}}


def collection(*features) -> dict:
    return {"type": "FeatureCollection", "features": list(features)}


# == tissue: micro Dice by hand =========================================================================
def test_micro_dice_hand_example():
    truth = np.array([[1, 1], [2, 0]])
    pred = np.array([[1, 0], [2, 2]])
    m = micro_dice(confusion(pred, truth))
    # stroma: I = 1, |P| + |G| = 1 + 2 = 3 -> (2 + 1e-5)/(3 + 1e-5); vessel: I = 1, 2 + 1 = 3 -> same;
    # tumour, epidermis, necrosis absent everywhere: I = 0 -> 0 (organisers' rule, not 1)
    d = (2 + EPS) / (3 + EPS)
    assert m["dice_tissue_stroma"] == pytest.approx(d, abs=0, rel=1e-15)
    assert m["dice_tissue_blood_vessel"] == pytest.approx(d, abs=0, rel=1e-15)
    assert m["dice_tissue_tumor"] == m["dice_tissue_epidermis"] == m["dice_tissue_necrosis"] == 0.0
    assert m["dice"] == pytest.approx(2 * d / 5, rel=1e-15)
    assert all(type(v) is float for v in m.values())


def test_micro_dice_pools_pixels_over_images():
    # image A: stroma 3 px predicted and true (I 3, U 6); image B: stroma 1 px true, not predicted (U 1).
    # pooled: (2·3 + ε)/(7 + ε) = 0.857…, whereas the mean of per-image Dice would be (1 + 0)/2.
    counts = confusion(np.array([1, 1, 1]), np.array([1, 1, 1])) + confusion(np.array([0]), np.array([1]))
    assert micro_dice(counts)["dice_tissue_stroma"] == pytest.approx((6 + EPS) / (7 + EPS), rel=1e-15)


def test_read_tissue_mask_resizes_to_1024_with_nearest(tmp_path):
    small = np.array([[0, 1], [2, 5]], dtype=np.uint8)
    Image.fromarray(small).save(tmp_path / "m.png")
    big = read_tissue_mask(tmp_path / "m.png", "c")
    # 2×2 -> 1024×1024: every pixel becomes a 512×512 block
    assert big.shape == (1024, 1024) and big.dtype == np.uint8
    assert np.array_equal(np.bincount(big.ravel(), minlength=6), [512 * 512, 512 * 512, 512 * 512, 0, 0, 512 * 512])
    assert big[0, 0] == 0 and big[0, 1023] == 1 and big[1023, 0] == 2 and big[1023, 1023] == 5


# == tissue rasterisation ===============================================================================
def test_rasterise_holes_outline_and_overwrite():
    geo = collection(
        feature("tissue_stroma", [[[1, 1], [8, 1], [8, 8], [1, 8], [1, 1]], [[3, 3], [6, 3], [6, 6], [3, 6], [3, 3]]]),
        feature("tissue_tumor", [[[0, 0], [2, 0], [2, 2], [0, 2]]]),
        feature("tissue_necrosis", [[[9, 9], [9, 9]]]),              # < 3 points: skipped
    )
    mask = rasterise_tissue(geo, (10, 10))
    assert mask.shape == (10, 10) and mask.dtype == np.uint8
    # stroma: filled+outlined square 1..8 (8·8 = 64 px) minus the hole 3..6 incl. its outline (4·4 = 16)
    # = 48; the later tumour square 0..2 (3·3 = 9 px) overwrites the 2·2 = 4 shared pixels -> 44 stroma
    assert int((mask == 1).sum()) == 44
    assert int((mask == 3).sum()) == 9
    assert int((mask == 5).sum()) == 0
    assert mask[4, 4] == 0 and mask[0, 0] == 3


def test_rasterise_multipolygon_and_white_background():
    geo = collection(
        feature("tissue_epidermis", [[[[0, 0], [3, 0], [3, 3], [0, 3]]], [[[6, 6], [9, 6], [9, 9], [6, 9]]]],
                "MultiPolygon"),
        feature("tissue_white_background", [[[0, 0], [1, 0], [1, 1], [0, 1]]]),
    )
    mask = rasterise_tissue(geo, (10, 10))
    # two 4×4 squares (16 + 16 px) minus the 2×2 background corner written later (value 0)
    assert int((mask == 4).sum()) == 32 - 4


def test_rasterise_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown tissue class 'stroma'"):
        rasterise_tissue(collection(feature("stroma", [[[0, 0], [2, 0], [2, 2]]])), (4, 4))
    with pytest.raises(ValueError, match="Point"):
        rasterise_tissue(collection(feature("tissue_stroma", [1, 2], "Point")), (4, 4))


# == nuclei ground truth conversion =====================================================================
def test_nuclei_conversion_tracks_multipolygons_and_closing_points():
    square = [[0, 0], [4, 0], [4, 4], [0, 4], [0, 0]]
    geo = collection(
        feature("nuclei_plasma_cell", [square]),
        feature("nuclei_stroma", [[[[10, 10], [12, 10], [12, 12], [10, 10]]], [[[20, 20], [22, 20], [20, 20]]]],
                "MultiPolygon"),
        feature("nuclei_tumor", [[[1, 1, 0], [3, 1, 0], [3, 3, 0]]]),
    )
    t2 = nuclei_from_geojson(geo, 2)["polygons"]
    # closing duplicates dropped; the second MultiPolygon member has 2 points left -> dropped; z dropped
    assert t2 == [
        {"name": "nuclei_plasma_cell", "path_points": [[0, 0], [4, 0], [4, 4], [0, 4]]},
        {"name": "nuclei_stroma", "path_points": [[10, 10], [12, 10], [12, 12]]},
        {"name": "nuclei_tumor", "path_points": [[1, 1], [3, 1], [3, 3]]},
    ]
    t1 = nuclei_from_geojson(geo, 1)["polygons"]
    assert [p["name"] for p in t1] == ["nuclei_lymphocyte", "nuclei_other", "nuclei_tumor"]
    with pytest.raises(ValueError, match="nuclei_lymphocytes"):
        nuclei_from_geojson(collection(feature("nuclei_lymphocytes", [square])), 1)


def test_track1_grouping():
    assert {TRACK1_OF[n] for n in NUCLEI_TRACK2} == set(NUCLEI_TRACK1)
    assert [n for n in NUCLEI_TRACK2 if TRACK1_OF[n] == "nuclei_lymphocyte"] == ["nuclei_lymphocyte",
                                                                                  "nuclei_plasma_cell"]
    assert sum(TRACK1_OF[n] == "nuclei_other" for n in NUCLEI_TRACK2) == 7


# == twins and self-consistency =========================================================================
@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    out = {}
    for task_id in ALL:
        out[task_id] = generate(registry().get(task_id), tmp_path_factory.mktemp(task_id))
    return out


@pytest.fixture(scope="module")
def perfect(twins, tmp_path_factory):
    out = {}
    for task_id, data in twins.items():
        sub = tmp_path_factory.mktemp(f"{task_id}-perfect")
        load_grader(registry().get(task_id)).write_perfect(data.private, sub)
        out[task_id] = sub
    return out


def rows(sub: Path) -> list[tuple[str, Path]]:
    lines = (sub / "submission.csv").read_text().splitlines()[1:]
    return [(line.split(",")[0], sub / line.split(",")[1]) for line in lines]


@pytest.mark.parametrize("task_id", ALL)
def test_twin_layout(task_id, twins):
    data = twins[task_id]
    split = json.loads((data.private / "split.json").read_text())
    assert (split["n"], len(split["train"]), len(split["test"])) == (25, 20, 5)
    case = split["train"][0]
    assert case.startswith(("training_set_primary_roi_", "training_set_metastatic_roi_"))
    with Image.open(data.public / "train" / "images" / f"{case}.tif") as img:
        assert (img.format, img.mode, img.size) == ("TIFF", "RGBA", (SIZE, SIZE))
    for test_id in split["test"]:
        assert (data.public / "test" / "images" / f"{test_id}.tif").is_file()
    if task_id in TISSUE:
        geo = json.loads((data.public / "train" / "labels" / f"{case}_tissue.geojson").read_text())
        mask = np.asarray(Image.open(data.public / "train" / "masks" / f"{case}.tif"))
        assert np.array_equal(mask, rasterise_tissue(geo, (SIZE, SIZE)))
        assert set(np.unique(mask)) == {0, 1, 2, 3, 4, 5}
    else:
        geo = json.loads((data.public / "train" / "labels" / f"{case}_nuclei.geojson").read_text())
        assert {f["properties"]["classification"]["name"] for f in geo["features"]} == set(NUCLEI_TRACK2)
        converted = json.loads((data.public / "train" / "nuclei" / f"{case}.json").read_text())
        track = 1 if task_id == "puma-t1-nuclei-det" else 2
        assert converted == nuclei_from_geojson(geo, track)
        names = NUCLEI_TRACK1 if track == 1 else NUCLEI_TRACK2
        assert {p["name"] for p in converted["polygons"]} == set(names)
    assert not list(data.public.rglob("answers.csv"))


@pytest.mark.parametrize("task_id", ALL)
def test_perfect_scores_best_and_baseline_validates(task_id, twins, perfect, tmp_path):
    task = registry().get(task_id)
    grader = load_grader(task)
    grader.validate(perfect[task_id], twins[task_id].public)
    metrics = grader.grade(perfect[task_id], twins[task_id].private)
    # every class occurs in every twin test case, so the perfect value of every key is exactly 1
    assert metrics and all(v == 1.0 and type(v) is float for v in metrics.values())
    assert set(metrics) <= {m.key for m in task.metrics}
    assert rank(task, metrics).percentile == 1.0
    grader.write_baseline(twins[task_id].public, tmp_path / "base")
    grader.validate(tmp_path / "base", twins[task_id].public)
    base = grader.grade(tmp_path / "base", twins[task_id].private)
    # empty masks: I = 0 for every class -> 0; no nuclei: every occurring class has F1 0
    assert all(v == 0.0 for v in base.values())
    assert rank(task, base).percentile == 0.0


def test_t2_reports_every_occurring_class(twins, perfect):
    metrics = load_grader(registry().get("puma-t2-nuclei-det")).grade(perfect["puma-t2-nuclei-det"],
                                                                       twins["puma-t2-nuclei-det"].private)
    assert set(metrics) == {"f1", *(f"f1_{n}" for n in NUCLEI_TRACK2)}


@pytest.mark.parametrize("task_id", TISSUE)
def test_tissue_degradations_score_worse(task_id, twins, perfect, tmp_path):
    grader = load_grader(registry().get(task_id))
    private = twins[task_id].private
    best = grader.grade(perfect[task_id], private)
    # tumour relabelled as stroma in one case: tumour and stroma Dice drop, vessel unchanged
    sub = copy_of(perfect[task_id], tmp_path / "relabel")
    path = rows(sub)[0][1]
    mask = np.asarray(Image.open(path)).copy()
    mask[mask == 3] = 1
    Image.fromarray(mask).save(path)
    worse = grader.grade(sub, private)
    assert worse["dice"] < best["dice"]
    assert worse["dice_tissue_tumor"] < 1.0 and worse["dice_tissue_stroma"] < 1.0
    assert worse["dice_tissue_blood_vessel"] == 1.0
    # every mask shifted by 6 px: every class gets worse
    sub = copy_of(perfect[task_id], tmp_path / "shift")
    for _, path in rows(sub):
        Image.fromarray(np.roll(np.asarray(Image.open(path)), 6, axis=1)).save(path)
    shifted = grader.grade(sub, private)
    assert all(shifted[k] < 1.0 for k in shifted)
    # half-size PNG predictions are valid (resized to 1024 like the truth) and close to perfect
    sub = copy_of(perfect[task_id], tmp_path / "half")
    lines = ["case_id,predicted_mask_path"]
    for case_id, path in rows(sub):
        Image.open(path).resize((SIZE // 2, SIZE // 2), Image.NEAREST).save(sub / "predictions" / f"{case_id}.png")
        lines.append(f"{case_id},./predictions/{case_id}.png")
    (sub / "submission.csv").write_text("\n".join(lines) + "\n")
    half = grader.grade(sub, private)
    assert 0.8 < half["dice"] < 1.0


@pytest.mark.parametrize("task_id", NUCLEI)
def test_nuclei_degradations_score_worse(task_id, twins, perfect, tmp_path):
    grader = load_grader(registry().get(task_id))
    private = twins[task_id].private

    def rewrite(name: str, change) -> dict[str, float]:
        sub = copy_of(perfect[task_id], tmp_path / name)
        for _, path in rows(sub):
            data = json.loads(path.read_text())
            data["polygons"] = change(data["polygons"])
            path.write_text(json.dumps(data))
        return grader.grade(sub, private)

    def shift(d):
        return lambda polys: [{**p, "path_points": [[x + d, y] for x, y in p["path_points"]]} for p in polys]

    # 5 px shift stays inside the 15 px radius (nuclei are >= 11 px apart, all equally shifted): still 1
    assert rewrite("shift5", shift(5))["f1"] == 1.0
    # 20 px shift: no nucleus can match its own prediction; twin spacing leaves only chance matches
    assert rewrite("shift20", shift(20))["f1"] < 0.5
    # tumour nuclei removed: f1_nuclei_tumor = 0 (recall 0 in every case), the others stay 1
    dropped = rewrite("drop", lambda polys: [p for p in polys if p["name"] != "nuclei_tumor"])
    assert dropped["f1_nuclei_tumor"] == 0.0
    assert dropped["f1"] == pytest.approx(1 - 1 / len(grader.class_names))
    # confidence-ordered duplicates of every nucleus: precision 1/2 -> F1 2/3 everywhere
    doubled = rewrite("double", lambda polys: polys + [{**p, "score": 0.5} for p in polys])
    assert doubled["f1"] == pytest.approx(2 / 3)


def nuclei_file(path: Path, polygons: list[dict]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"polygons": polygons}))
    return path.name


def square(x: float, y: float, name: str, **extra) -> dict:
    return {"name": name, "path_points": [[x - 2, y - 2], [x + 2, y - 2], [x + 2, y + 2], [x - 2, y + 2]], **extra}


def test_nuclei_hand_example_through_the_grader(tmp_path):
    """Two cases; classes absent from a case add 0 and the mean divides by both cases."""
    answers, sub = tmp_path / "answers", tmp_path / "sub"
    # case a: truth tumour at (10,10) and (50,50), lymphocyte at (90,90)
    nuclei_file(answers / "test" / "labels" / "a.json", [square(10, 10, "nuclei_tumor"),
                                                         square(50, 50, "nuclei_tumor"),
                                                         square(90, 90, "nuclei_lymphocyte")])
    # case b: truth tumour at (10,10)
    nuclei_file(answers / "test" / "labels" / "b.json", [square(10, 10, "nuclei_tumor")])
    write_answers(answers, "case_id", "label_path", {"a": "test/labels/a.json", "b": "test/labels/b.json"})
    # a: tumour (12,10) matches (d 2), (50,70) is 20 px away -> tp 1, fp 1, fn 1 -> F1 1/2;
    #    lymphocyte (90,90) labelled "other" -> lymphocyte F1 0, other F1 0 (fp only)
    nuclei_file(sub / "predictions" / "a.json", [square(12, 10, "nuclei_tumor", score=0.3),
                                                 square(50, 70, "nuclei_tumor"),
                                                 square(90, 90, "nuclei_other")])
    # b: perfect tumour -> 1, plus a degenerate 2-point polygon that is skipped
    nuclei_file(sub / "predictions" / "b.json", [square(10, 10, "nuclei_tumor"),
                                                 {"name": "nuclei_other", "path_points": [[0, 0], [1, 1]]}])
    write_csv(sub / "submission.csv", ["case_id", "predicted_nuclei_path"],
              [{"case_id": "a", "predicted_nuclei_path": "predictions/a.json"},
               {"case_id": "b", "predicted_nuclei_path": "predictions/b.json"}])
    metrics = load_grader(registry().get("puma-t1-nuclei-det")).grade(sub, answers)
    # tumour (0.5 + 1)/2 = 0.75; lymphocyte (0 + 0)/2 = 0; other (0 + 0)/2 = 0; f1 = 0.75/3 = 0.25
    assert metrics == pytest.approx({"f1": 0.25, "f1_nuclei_tumor": 0.75, "f1_nuclei_lymphocyte": 0.0,
                                     "f1_nuclei_other": 0.0})
    # track 2 reports only the classes that occur; "nuclei_other" is not a track-2 name, so both files are
    # rewritten: a: tumour (12,10) only -> tp 1, 1 pred, 2 truths -> P 1, R 1/2 -> 2/3; lymphocyte 0.
    # b: tumour 1. tumour (2/3 + 1)/2 = 5/6, lymphocyte 0 -> f1 = 5/12
    nuclei_file(sub / "predictions" / "a.json", [square(12, 10, "nuclei_tumor")])
    nuclei_file(sub / "predictions" / "b.json", [square(10, 10, "nuclei_tumor")])
    t2 = load_grader(registry().get("puma-t2-nuclei-det")).grade(sub, answers)
    assert t2 == pytest.approx({"f1": 5 / 12, "f1_nuclei_tumor": 5 / 6, "f1_nuclei_lymphocyte": 0.0})


# == malformed submissions ==============================================================================
def _first(sub: Path) -> Path:
    return rows(sub)[0][1]


def _garbage(sub: Path) -> None:
    _first(sub).write_bytes(b"\x00\xffnot a file")


def _write_first_mask(array: np.ndarray, how: str = "tifffile"):
    def make(sub: Path) -> None:
        if how == "tifffile":
            tifffile.imwrite(_first(sub), array)
        else:
            Image.fromarray(array).save(_first(sub), format=how)
    return make


def _multipage(sub: Path) -> None:
    mask = np.asarray(Image.open(_first(sub)))
    tifffile.imwrite(_first(sub), np.stack([mask, mask]))


TISSUE_BAD = {
    "rgb": (_write_first_mask(np.zeros((SIZE, SIZE, 3), np.uint8)), "channels"),
    "rgba png": (_write_first_mask(np.zeros((SIZE, SIZE, 4), np.uint8), "PNG"), "channels"),
    "float": (_write_first_mask(np.ones((SIZE, SIZE), np.float32)), "floating-point"),
    "nan": (_write_first_mask(np.full((SIZE, SIZE), np.nan, np.float32)), "floating-point"),
    "label 6": (_write_first_mask(np.full((SIZE, SIZE), 6, np.uint8)), "label value(s) [6]"),
    "label 255 png": (_write_first_mask(np.full((SIZE, SIZE), 255, np.uint8), "PNG"), "[255]"),
    "negative int16": (_write_first_mask(np.full((SIZE, SIZE), -1, np.int16)), "label value(s) [-1]"),
    "jpeg": (_write_first_mask(np.zeros((SIZE, SIZE), np.uint8), "JPEG"), "must be TIFF or PNG"),
    "multipage": (_multipage, "pages"),
    # 8193² > 8192² pixels: refused from the header, before decoding (a memory guard)
    "too large": (lambda sub: Image.new("L", (8193, 8193)).save(_first(sub), format="PNG"), "8193×8193 pixels"),
    "garbage bytes": (_garbage, "cannot be read as a TIFF/PNG mask"),
}


@pytest.mark.parametrize("mode,dtype", [("L", np.uint8), ("I;16", np.uint16), ("P", np.uint8)])
def test_integer_single_channel_modes_are_accepted(mode, dtype, twins, perfect, tmp_path):
    task_id = "puma-t2-tissue-seg"
    grader = load_grader(registry().get(task_id))
    sub = copy_of(perfect[task_id], tmp_path / "sub")
    for _, path in rows(sub):
        mask = np.asarray(Image.open(path)).astype(dtype)
        if mode == "P":  # palette image whose indices are the labels
            img = Image.frombytes("P", (mask.shape[1], mask.shape[0]), mask.tobytes())
            img.putpalette([v for i in range(256) for v in (i, i, i)])
        else:
            img = Image.fromarray(mask)
        assert img.mode == mode
        img.save(path)
    assert grader.grade(sub, twins[task_id].private)["dice"] == 1.0


def _edit_first_json(change):
    def make(sub: Path) -> None:
        path = _first(sub)
        data = json.loads(path.read_text())
        path.write_text(change(data) if callable(change) else change)
    return make


def _set_first_polygon(**fields):
    def change(data):
        data["polygons"][0].update(fields)
        return json.dumps(data)
    return _edit_first_json(change)


NUCLEI_BAD = {
    "garbage bytes": (_garbage, "not valid UTF-8 JSON"),
    "not json": (_edit_first_json("{polygons: ["), "not valid UTF-8 JSON"),
    "not utf8": (lambda s: _first(s).write_bytes(b'{"polygons": ["\xff"]}'), "not valid UTF-8 JSON"),
    "no polygons": (_edit_first_json(lambda d: json.dumps({"nuclei": d["polygons"]})), "'polygons' list"),
    "polygons not list": (_edit_first_json('{"polygons": {}}'), "'polygons' list"),
    "polygon not object": (_edit_first_json('{"polygons": [[1, 2]]}'), "must be an object"),
    "plural name": (_set_first_polygon(name="nuclei_lymphocytes"), "unknown class name"),
    "name not string": (_set_first_polygon(name=["nuclei_tumor"]), "unknown class name"),
    "alias name": (_set_first_polygon(name="TILs"), "unknown class name"),
    "track-2 name in track 1": (_set_first_polygon(name="nuclei_plasma_cell"), "unknown class name"),
    "string point": (_set_first_polygon(path_points=[["1", 2], [3, 4], [5, 6]]), "must be a number"),
    "bool point": (_set_first_polygon(path_points=[[True, 2], [3, 4], [5, 6]]), "must be a number"),
    "4-d point": (_set_first_polygon(path_points=[[1, 2, 3, 4], [3, 4], [5, 6]]), "[x, y]"),
    "points not list": (_set_first_polygon(path_points="1,2"), "'path_points' must be a list"),
    "nan coordinate": (_set_first_polygon(path_points=[[float("nan"), 2], [3, 4], [5, 6]]), "finite"),
    "huge int coordinate": (_edit_first_json(
        '{"polygons": [{"name": "nuclei_tumor", "path_points": [[1' + "0" * 400 + ', 2], [3, 4], [5, 6]]}]}'),
        "finite"),
    "infinite score": (_set_first_polygon(score=float("inf")), "'score' must be finite"),
    "string score": (_set_first_polygon(score="0.9"), "'score' must be a number"),
}


MALFORMED = {**{("puma-t1-tissue-seg", kind): case for kind, case in TISSUE_BAD.items()},
             **{("puma-t1-nuclei-det", kind): case for kind, case in NUCLEI_BAD.items()}}


@pytest.mark.parametrize("task_id, kind", sorted(MALFORMED))
def test_malformed_submission_is_invalid(task_id, kind, twins, perfect, tmp_path):
    make, reason = MALFORMED[task_id, kind]
    grader = load_grader(registry().get(task_id))
    sub = copy_of(perfect[task_id], tmp_path / "sub")
    make(sub)
    with pytest.raises(InvalidSubmission, match=re.escape(reason)) as graded:
        grader.grade(sub, twins[task_id].private)
    assert "case" in str(graded.value) or "submission" in str(graded.value)
    with pytest.raises(InvalidSubmission):
        grader.validate(sub, twins[task_id].public)


def test_optional_fields_are_accepted(twins, perfect, tmp_path):
    """A third coordinate, a closing point, integer scores and unknown extra fields are all fine."""
    task_id = "puma-t2-nuclei-det"
    grader = load_grader(registry().get(task_id))
    sub = copy_of(perfect[task_id], tmp_path / "sub")
    for _, path in rows(sub):
        data = json.loads(path.read_text())
        for p in data["polygons"]:
            p["path_points"] = [[x, y, 0] for x, y in p["path_points"]] + [[*p["path_points"][0], 0]]
            p["score"], p["probability"] = 1, "ignored"
        path.write_text(json.dumps(data))
    # the closing point moves each centroid by < 1 px, far inside the 15 px radius
    assert grader.grade(sub, twins[task_id].private)["f1"] == 1.0


def test_huge_finite_coordinates_are_valid_false_positives(twins, perfect, tmp_path):
    """Vertices of 1e308 are finite (valid) but their mean overflows: never matched, still counted."""
    task_id = "puma-t1-nuclei-det"
    sub = copy_of(perfect[task_id], tmp_path / "sub")
    for _, path in rows(sub):
        data = json.loads(path.read_text())
        data["polygons"] += [{"name": "nuclei_tumor", "path_points": [[1e308, 1e308]] * 3}]
        path.write_text(json.dumps(data))
    metrics = load_grader(registry().get(task_id)).grade(sub, twins[task_id].private)
    # tumour in a case with n true tumour nuclei: tp = n, n + 1 predictions -> P = n/(n+1), R = 1
    # -> F1 = 2n/(2n+1); every twin test case has tumour nuclei, so the mean runs over all cases
    counts = [sum(p["name"] == "nuclei_tumor" for p in json.loads(path.read_text())["polygons"])
              for _, path in rows(perfect[task_id])]
    assert min(counts) >= 1
    assert metrics["f1_nuclei_tumor"] == pytest.approx(np.mean([2 * n / (2 * n + 1) for n in counts]))
    assert metrics["f1_nuclei_lymphocyte"] == metrics["f1_nuclei_other"] == 1.0
