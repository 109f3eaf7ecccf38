"""Tolerant readers, strict results: layouts, case, debris, CRLF, unclassified features, record versions.

Each fixture is a real archive shaped like a variant of a release that users actually get; each test
checks the prepared answers themselves, not only that preparation finished.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk
from PIL import Image

from pytest_rexmle.competitions.topcow.prepare import parse_roi
from pytest_rexmle.data.prepare import PrepareError, prepare_task
from pytest_rexmle.data.taskdata import MANIFEST
from pytest_rexmle.task import registry

from . import releases
from .fake_server import FakeServer, RunningServer
from .releases import png_bytes, volume_bytes, zip_bytes


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("REXMLE_ZENODO_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("REXMLE_FIGSHARE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("REXMLE_DOWNLOAD_BACKOFF", "0")


@pytest.fixture
def serve(monkeypatch):
    """Start a fake Zenodo serving exactly the given records (copies: the session's bundle stays intact)."""
    running = []

    def start(zenodo: dict[str, dict[str, bytes]]) -> FakeServer:
        state = FakeServer(zenodo={k: dict(v) for k, v in zenodo.items()})
        running.append(RunningServer(state))
        monkeypatch.setenv("REXMLE_ZENODO_URL", state.url)
        monkeypatch.setenv("REXMLE_DOWNLOAD_BACKOFF", "0")
        return state

    yield start
    for server in running:
        server.close()


def task(name: str):
    return registry().get(name)


def members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def manifest(root: Path) -> dict:
    return json.loads((root / "private" / MANIFEST).read_text())


def write(tmp_path: Path, name: str, files: dict[str, bytes]) -> Path:
    path = tmp_path / name
    path.write_bytes(zip_bytes(files))
    return path


# -- USenhance: organ folders with capitals, an extra top folder, debris -------------------------------
def test_usenhance_capital_organ_folders_extra_top_folder_and_debris(tmp_path, offline):
    rng = np.random.default_rng(21)
    files, high = {}, {}
    for k, organ in enumerate(["Breast", "Carotid", "Kidney", "Liver", "Thyroid", "Breast"]):
        for quality in ("low_quality", "High_Quality"):
            data = png_bytes(rng.integers(0, 255, (12, 14), np.uint8))
            files[f"USenhance2023/train_datasets/{organ}/{quality}/{k + 1}.png"] = data
            if quality == "High_Quality":
                high[f"{organ.lower()}_{k + 1}"] = data
    files["USenhance2023/train_datasets/Breast/low_quality/Thumbs.db"] = b"\xd0\xcf\x11\xe0"
    files["USenhance2023/train_datasets/Breast/low_quality/._1.png"] = b"\x00\x05\x16\x07"
    files["USenhance2023/.DS_Store"] = b"\x00\x00\x00\x01Bud1"
    files["__MACOSX/USenhance2023/train_datasets/._Breast"] = b"\x00\x05\x16\x07"
    archive = write(tmp_path, "train_dataset (2).zip", files)
    data = prepare_task(task("usenhance"), tmp_path / "data", archive, progress=False)
    split = json.loads((data.private / "split.json").read_text())
    assert sorted(split["train"] + split["test"]) == sorted(high)
    for case_id in split["test"]:
        assert (data.private / "test" / "high_quality" / f"{case_id}.png").read_bytes() == high[case_id]
    assert manifest(data.root)["notes"]["organ_folders_case"] == ["Breast", "Carotid", "Kidney", "Liver", "Thyroid"]
    assert not list(data.root.rglob("._*")) and not list(data.root.rglob("Thumbs.db"))


# -- ISLES'22: the BIDS layout the organisers document --------------------------------------------------
def test_isles_organisers_bids_layout(tmp_path, offline):
    rng = np.random.default_rng(22)
    files, masks = {}, {}
    top = "ISLES22_release"
    files[f"{top}/dataset_description.json"] = b'{"Name": "ISLES 2022", "BIDSVersion": "1.6.0"}'
    files[f"{top}/participants.tsv"] = b"participant_id\r\nsub-strokecase0001\r\n"
    for k in range(1, 7):
        sub = f"sub-strokecase{k:04d}"
        mask = np.zeros((5, 8, 8), np.uint8)
        mask[1:3, k % 5:k % 5 + 3, 2:5] = 1
        masks[sub] = mask
        raw = f"{top}/rawdata/{sub}/ses-0001"
        files[f"{raw}/anat/{sub}_ses-0001_FLAIR.nii.gz"] = volume_bytes(np.zeros((6, 9, 9), np.int16), ".nii.gz", (1.5, 1.5, 2))
        files[f"{raw}/dwi/{sub}_ses-0001_dwi.nii.gz"] = volume_bytes(rng.integers(0, 900, mask.shape).astype(np.int16), ".nii.gz", (2, 2, 3))
        files[f"{raw}/dwi/{sub}_ses-0001_adc.nii.gz"] = volume_bytes(rng.integers(0, 900, mask.shape).astype(np.int16), ".nii.gz", (2, 2, 3))
        files[f"{raw}/dwi/{sub}_ses-0001_dwi.json"] = b'{"EchoTime": 0.08}'
        files[f"{top}/derivatives/{sub}/ses-0001/{sub}_ses-0001_msk.nii.gz"] = volume_bytes(mask, ".nii.gz", (2, 2, 3))
    archive = write(tmp_path, "ISLES22_dataset.zip", files)
    data = prepare_task(task("isles22"), tmp_path / "data", archive, progress=False)
    split = json.loads((data.private / "split.json").read_text())
    assert sorted(split["train"] + split["test"]) == sorted(masks)
    for case_id in split["test"]:
        got = sitk.GetArrayFromImage(sitk.ReadImage(str(data.private / "test" / f"{case_id}_msk.nii.gz")))
        assert np.array_equal(got, masks[case_id])
    for case_id in split["train"]:
        assert (data.public / "train" / f"{case_id}_flair.nii.gz").is_file()
    assert manifest(data.root)["resampled_labels"] == []


# -- TopCoW ROI files: header line 1, CRLF, an extra line ----------------------------------------------
def test_topcow_roi_header_line_crlf_and_extra_line(tmp_path):
    roi = tmp_path / "topcow_ct_001.txt"
    roi.write_bytes(b"\xef\xbb\xbf--- ROI Meta Data ---\r\nSize (Voxels): 96 68 36\r\nLocation (Voxels): 103 93 77\r\n"
                    b"Spacing (mm): 0.45 0.45 0.6\r\n\r\n")
    assert parse_roi(roi) == {"size": [96, 68, 36], "location": [103, 93, 77]}
    roi.write_text("--- ROI Meta Data ---\nSize (Voxels): 1 2 3\nLocation (Voxels): 1 2 3\nSize (Voxels): 4 5 6\n")
    with pytest.raises(PrepareError, match="two 'Size"):
        parse_roi(roi)


def test_topcow_boxes_from_crlf_roi_files_with_extra_lines(tmp_path, offline):
    files = members(releases.topcow()["TopCoW2024_Data_Release.zip"])
    boxes = {}
    for name in list(files):
        if "/roi_loc_labelsTr/" in name:
            k = int(name[-7:-4])
            size, location = [3 + k, 4, 5], [1, k % 3, 2]
            boxes[name.rsplit("/", 1)[1][:-4]] = {"size": size, "location": location}
            files[name] = ("--- ROI Meta Data ---\r\n"
                           f"Size (Voxels): {' '.join(map(str, size))}\r\n"
                           f"Location (Voxels): {' '.join(map(str, location))}\r\n"
                           "Note: exported by the organisers' tool\r\n").encode()
    archive = write(tmp_path, "TopCoW2024_Data_Release(1).zip", files)
    data = prepare_task(task("topcow-cta-det"), tmp_path / "data", archive, progress=False)
    split = json.loads((data.private / "split.json").read_text())
    for case_id in split["test"]:
        assert json.loads((data.private / "test" / "labels" / f"{case_id}.json").read_text()) == boxes[case_id]


# -- PUMA: a feature without a class name; the newer record version -------------------------------------
def _puma_with_unclassified() -> dict[str, bytes]:
    bundle = releases.puma()
    out = {}
    for archive, data in bundle.items():
        files = members(data)
        for name in list(files):
            if name.endswith(("primary_roi_001_tissue.geojson", "primary_roi_002_nuclei.geojson")):
                geo = json.loads(files[name])
                geo["features"].append({"type": "Feature", "properties": {"objectType": "annotation"},
                                        "geometry": {"type": "Polygon",
                                                     "coordinates": [[[0, 0], [31, 0], [31, 31], [0, 0]]]}})
                files[name] = json.dumps(geo).encode()
        out[archive] = zip_bytes(files)
    return out


@pytest.mark.parametrize("task_id, skipped_file", [
    ("puma-t1-tissue-seg", "training_set_primary_roi_001_tissue.geojson"),
    ("puma-t2-nuclei-det", "training_set_primary_roi_002_nuclei.geojson")])
def test_puma_feature_without_class_is_skipped_counted_and_answers_unchanged(tmp_path, offline, task_id, skipped_file):
    clean = releases.puma()
    given = []
    for k, (_name, data) in enumerate(reversed(list(_puma_with_unclassified().items()))):
        given.append(tmp_path / f"puma_part_{k}.zip")          # any name, any order
        given[-1].write_bytes(data)
    data = prepare_task(task(task_id), tmp_path / "data", given, progress=False)
    info = manifest(data.root)
    assert info["notes"]["features_without_class"] == {"count": 1, "files": {skipped_file: 1}}
    assert any(skipped_file in w for w in info["warnings"])
    reference = []
    for k, (_name, payload) in enumerate(clean.items()):
        reference.append(tmp_path / f"clean_{k}.zip")
        reference[-1].write_bytes(payload)
    expected = prepare_task(task(task_id), tmp_path / "clean", reference, progress=False)
    for path in sorted((expected.private / "test" / "labels").iterdir()):
        got = data.private / "test" / "labels" / path.name
        if path.suffix == ".tif":
            assert np.array_equal(np.asarray(Image.open(got)), np.asarray(Image.open(path)))
        else:
            assert json.loads(got.read_text()) == json.loads(path.read_text())


def test_puma_pinned_record_by_default_newer_one_with_a_note(tmp_path, serve):
    bundle = releases.puma()
    state = serve({"14869398": bundle, "15050523": bundle})
    data = prepare_task(task("puma-t1-tissue-seg"), tmp_path / "a", progress=False)
    parts = manifest(data.root)["source"]["parts"]
    assert {p["record"] for p in parts.values()} == {"14869398"} and not any("note" in p for p in parts.values())
    assert not any("15050523" in path for path, _ in state.log)

    state = serve({"15050523": bundle})          # the pinned record is gone: the newer version is taken
    data = prepare_task(task("puma-t1-tissue-seg"), tmp_path / "b", progress=False)
    parts = manifest(data.root)["source"]["parts"]
    assert {p["record"] for p in parts.values()} == {"15050523"}
    assert all("newer version of the pinned record 14869398" in p["note"] for p in parts.values())
    split = json.loads((data.private / "split.json").read_text())
    assert split["n"] == 6


# -- strict results: what would change the answers is an error naming the file --------------------------
def test_panther_label_value_outside_the_release_coding_is_an_error(tmp_path, offline):
    files = members(releases.panther()["PANTHER_Task2.zip"])
    bad = np.zeros((6, 8, 10), np.uint8)
    bad[2:4, 2:4, 2:4] = 3
    files["PANTHER_Task2/LabelsTr/10303.mha"] = volume_bytes(bad, ".mha")
    archive = write(tmp_path, "task2.zip", files)
    with pytest.raises(PrepareError, match=r"\[0, 1, 2, 3\]"):
        prepare_task(task("panther-t2"), tmp_path / "data", archive, progress=False)
    assert not (tmp_path / "data" / "panther-t2").exists()


def test_label_on_a_grid_away_from_its_image_is_an_error_naming_it(tmp_path, offline):
    files = members(releases.panther()["PANTHER_Task2.zip"])
    label = np.zeros((6, 8, 10), np.uint8)
    label[2:4, 2:4, 2:4] = 1
    files["PANTHER_Task2/LabelsTr/10302.mha"] = volume_bytes(label, ".mha", origin=(500.0, 0.0, 0.0))
    archive = write(tmp_path, "task2.zip", files)
    with pytest.raises(PrepareError, match=r"10302\.mha: its grid does not overlap the image 10302_0000\.mha"):
        prepare_task(task("panther-t2"), tmp_path / "data", archive, progress=False)
