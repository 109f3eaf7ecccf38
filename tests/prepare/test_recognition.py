"""Hand-downloaded raw files recognised by content: any name, any order, folders, offline, --check."""

from __future__ import annotations

import argparse
import csv
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from pytest_rexmle.data.prepare import PrepareError, add_prepare_arguments, prepare_task, run_prepare
from pytest_rexmle.data.prepare.download import NoNetwork
from pytest_rexmle.data.taskdata import MANIFEST
from pytest_rexmle.task import registry

from . import releases
from .releases import tiff_bytes, zip_bytes


@pytest.fixture
def offline(monkeypatch):
    """No source reachable: the connection to the 'server' is refused at once."""
    monkeypatch.setenv("REXMLE_ZENODO_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("REXMLE_FIGSHARE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("REXMLE_DOWNLOAD_BACKOFF", "0")


def task(name: str):
    return registry().get(name)


def args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_prepare_arguments(parser)
    return parser.parse_args(argv)


def answers(root: Path) -> dict[str, str]:
    with (root / "private" / "answers.csv").open(newline="") as fh:
        return {row["image_id"]: row[list(row)[1]] for row in csv.DictReader(fh)}


def unzip_to(data: bytes, folder: Path) -> Path:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        zf.extractall(folder)
    return folder


# -- LDCT-IQA: a browser's file name, either order, the organisers' layout ---------------------------
def ldct_files(tmp_path: Path) -> tuple[Path, Path, dict[str, float]]:
    zenodo, manual = releases.ldct()
    train = tmp_path / "LDCTIQAG2023_train.zip"
    train.write_bytes(zenodo["LDCTIQAG2023_train.zip"])
    test = tmp_path / "LDCTIQAC_test.zip"          # what a browser calls the Drive file
    test.write_bytes(manual["test_dataset.zip"])
    with zipfile.ZipFile(test) as zf:
        scores = json.loads(zf.read("LDCTIQAC_test/test.json"))
    return train, test, {Path(k).stem: v for k, v in scores.items()}


@pytest.mark.parametrize("order", ["train first", "test first"])
def test_ldct_test_zip_under_a_browser_name_in_either_order(tmp_path, offline, order):
    train, test, scores = ldct_files(tmp_path)
    given = [train, test] if order == "train first" else [test, train]
    data = prepare_task(task("ldct-iqa"), tmp_path / "data", given, progress=False)
    got = answers(data.root)
    assert {k: float(v) for k, v in got.items()} == scores
    assert sorted(p.stem for p in (data.public / "test" / "images").iterdir()) == sorted(scores)
    assert train.is_file() and test.is_file()      # the user's files are never moved or deleted


def test_ldct_test_set_in_the_organisers_layout(tmp_path, offline):
    """Ground truth in a differently named JSON, an extra top folder, Images/ with a capital, debris."""
    train, _, _ = ldct_files(tmp_path)
    rng = np.random.default_rng(11)
    scores = {f"{i:04d}.tif": round(float(rng.uniform(0, 4)), 2) for i in range(2000, 2004)}
    files = {f"LDCTIQAC2023/test_release/Images/{n}": tiff_bytes(rng.random((8, 8), np.float32)) for n in scores}
    files["LDCTIQAC2023/test_release/ground_truth_scores.json"] = json.dumps(scores).encode()
    files["LDCTIQAC2023/test_release/README.txt"] = b"LDCTIQAC 2023 test set\r\n"
    files["__MACOSX/LDCTIQAC2023/._ground_truth_scores.json"] = b"\x00\x05\x16\x07"
    files["LDCTIQAC2023/.DS_Store"] = b"\x00\x00\x00\x01Bud1"
    test = tmp_path / "download (3).zip"
    test.write_bytes(zip_bytes(files))
    data = prepare_task(task("ldct-iqa"), tmp_path / "data", [test, train], progress=False)
    assert {k: float(v) for k, v in answers(data.root).items()} == {Path(k).stem: v for k, v in scores.items()}
    manifest = json.loads((data.private / MANIFEST).read_text())
    assert manifest["notes"]["score_files"]["test.json"].endswith("ground_truth_scores.json")


def organisers_test_release(rng: np.random.Generator) -> tuple[bytes, dict[str, float], dict[str, np.ndarray]]:
    """The organisers' test release as third-party loaders read it: ``LDCTIQAC2023_test/test_N/<fname>.tif``
    and ``test-ground-truth.json`` = ``{part: {"fnames": [...], "scores": [...]}}``, the part's folder
    being the key without its extension; plus the artefact table that ships beside it."""
    parts = {"test_0.mha": ["S058279_70_1_2", "L096_402_1_1"], "test_1.mha": ["S058279_71_2_3"],
             "test_2": ["L067_12_3_4", "L067_13_3_4"]}
    files, truth, slices = {}, {}, {}
    for key, names in parts.items():
        scores = [round(float(rng.uniform(0, 4)), 2) for _ in names]
        truth[key] = {"fnames": names, "scores": scores}
        for name in names:
            pixels = rng.random((16, 12), np.float32)
            files[f"LDCTIQAC2023_test/{Path(key).stem}/{name}.tif"] = tiff_bytes(pixels)
            slices[name] = pixels
    files["LDCTIQAC2023_test/test-ground-truth.json"] = json.dumps(truth).encode()
    files["LDCTIQAC2023_test/dist_ans_test.csv"] = b"image,1,2,3,4\nS058279_070_1,n1s1,n2s1,n1s2,n2s2\n"
    scores = {n: s for v in truth.values() for n, s in zip(v["fnames"], v["scores"], strict=True)}
    return zip_bytes(files), scores, slices


def test_ldct_test_set_in_the_organisers_part_layout(tmp_path, offline):
    import tifffile

    train, _, _ = ldct_files(tmp_path)
    archive, scores, slices = organisers_test_release(np.random.default_rng(12))
    test = tmp_path / "LDCTIQAC2023_test.zip"
    test.write_bytes(archive)
    data = prepare_task(task("ldct-iqa"), tmp_path / "data", [train, test], progress=False)
    assert {k: float(v) for k, v in answers(data.root).items()} == scores
    for name, pixels in slices.items():                       # each slice placed under its id, pixels unchanged
        assert np.array_equal(tifffile.imread(data.public / "test" / "images" / f"{name}.tiff"), pixels)
    assert sorted(p.name for p in (data.public / "test" / "images").iterdir()) == sorted(f"{n}.tiff" for n in scores)
    manifest = json.loads((data.private / MANIFEST).read_text())
    assert manifest["notes"]["score_files"]["test.json"].endswith("test-ground-truth.json")
    assert manifest["notes"]["test_layout"] == {"parts": {"test_0": 2, "test_1": 1, "test_2": 2}}
    assert json.loads((data.private / "split.json").read_text())["test"] == sorted(scores)


def test_ldct_part_without_its_folder_is_named(tmp_path, offline):
    train, _, _ = ldct_files(tmp_path)
    archive, _, _ = organisers_test_release(np.random.default_rng(13))
    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        files = {n: zf.read(n) for n in zf.namelist() if "/test_1/" not in n}
    test = tmp_path / "LDCTIQAC2023_test.zip"
    test.write_bytes(zip_bytes(files))
    with pytest.raises(PrepareError, match=r"part 'test_1' has no folder test_1/ beside it"):
        prepare_task(task("ldct-iqa"), tmp_path / "data", [train, test], progress=False)


def test_file_matching_nothing_gets_one_line_saying_what_was_expected(tmp_path, offline):
    train, _, _ = ldct_files(tmp_path)
    stray = tmp_path / "holiday.zip"
    stray.write_bytes(zip_bytes({"photos/beach.jpg": b"\xff\xd8\xff", "photos/notes.txt": b"hi"}))
    with pytest.raises(PrepareError) as info:
        prepare_task(task("ldct-iqa"), tmp_path / "data", [train, stray], progress=False)
    message = str(info.value)
    assert "\n" not in message
    assert "holiday.zip" in message and "LDCT-IQA test set" in message and "photos/beach.jpg" in message
    assert not (tmp_path / "data" / "ldct-iqa").exists()


def test_html_saved_instead_of_the_zip_is_named(tmp_path, offline):
    page = tmp_path / "test_dataset.zip"
    page.write_text("<html>Google Drive can't scan this file for viruses</html>")
    with pytest.raises(PrepareError, match="neither zip nor tar"):
        prepare_task(task("ldct-iqa"), tmp_path / "data", [page], progress=False)


# -- SEG.A: the three centre zips one by one -----------------------------------------------------------
def test_sega_centre_zips_one_by_one_in_any_order(tmp_path, offline):
    centres = releases.sega()
    paths = []
    for name in ("Rider.zip", "Dongyang.zip", "KiTS.zip"):
        (tmp_path / name).write_bytes(centres[name])
        paths.append(tmp_path / name)
    data = prepare_task(task("seg-a"), tmp_path / "data", paths, progress=False)
    split = json.loads((data.private / "split.json").read_text())
    assert sorted(split["train"] + split["test"]) == ["D1", "D10", "D2", "K1", "K2", "R1"]
    assert set(answers(data.root)) == set(split["test"])


def test_sega_with_a_centre_forgotten_is_an_error_naming_it(tmp_path, offline):
    centres = releases.sega()
    for name in ("Dongyang.zip", "KiTS.zip"):
        (tmp_path / name).write_bytes(centres[name])
    with pytest.raises(PrepareError, match="Rider.zip"):
        prepare_task(task("seg-a"), tmp_path / "data", [tmp_path / "KiTS.zip", tmp_path / "Dongyang.zip"],
                     progress=False)


# -- folders: already extracted, or a folder of downloads ---------------------------------------------
def test_extracted_folder_and_folder_of_archives(tmp_path, offline):
    bundle = releases.panther()
    extracted = unzip_to(bundle["PANTHER_Task2.zip"], tmp_path / "unzipped")   # holds PANTHER_Task2/
    (extracted / "PANTHER_Task2" / ".DS_Store").write_bytes(b"junk")
    data = prepare_task(task("panther-t2"), tmp_path / "data", [extracted / "PANTHER_Task2"], progress=False)
    split = json.loads((data.private / "split.json").read_text())
    assert split["n"] == 6 and sorted(answers(data.root)) == sorted(split["test"])
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    (downloads / "Task1 (1).zip").write_bytes(bundle["PANTHER_Task1.zip"])
    data = prepare_task(task("panther-t1"), tmp_path / "data", [downloads], progress=False)
    assert json.loads((data.private / MANIFEST).read_text())["counts"]["unlabeled"] == 1


# -- ISLES'22 offline: only the archive the task uses --------------------------------------------------
def test_isles_offline_needs_only_the_image_archive(tmp_path, offline, capsys):
    bundle = releases.isles()
    status = run_prepare(args(["isles22", "--data-dir", str(tmp_path / "data"), "--no-progress"]))
    err = capsys.readouterr().err
    assert status == 1
    assert "ISLES-2022.zip" in err and "https://zenodo.org/records/7960856" in err and "center_ids" not in err
    archive = tmp_path / "isles.zip"
    archive.write_bytes(bundle["ISLES-2022.zip"])
    assert run_prepare(args(["isles22", "--data-dir", str(tmp_path / "data"), "--no-progress",
                             "--raw-archive", str(archive)])) == 0
    # the whole record passed (the spreadsheet too): the unused file is recognised and skipped
    sheet = tmp_path / "center_ids.xlsx"
    sheet.write_bytes(bundle["center_ids.xlsx"])
    assert run_prepare(args(["isles22", "--data-dir", str(tmp_path / "again"), "--no-progress",
                             "--raw-archive", str(sheet), "--raw-archive", str(archive)])) == 0
    assert "center_ids.xlsx is center_ids.xlsx, which this task does not use; skipped" in capsys.readouterr().err
    split = json.loads((tmp_path / "data" / "isles22" / "private" / "split.json").read_text())
    assert split["n"] == 6


def test_offline_prepare_raises_no_network_naming_each_file(tmp_path, offline):
    with pytest.raises(NoNetwork) as info:
        prepare_task(task("puma-t1-tissue-seg"), tmp_path, progress=False)
    message = str(info.value)
    assert "01_training_dataset_tif_ROIs.zip" in message and "01_training_dataset_geojson_tissue.zip" in message
    assert "geojson_nuclei" not in message


# -- `rexmle prepare TASK --check` ---------------------------------------------------------------------
def test_check_reports_parts_missing_and_unusual_and_writes_nothing(tmp_path, offline, capsys):
    train, test, _ = ldct_files(tmp_path)
    data_dir = tmp_path / "data"
    assert run_prepare(args(["ldct-iqa", "--check", "--data-dir", str(data_dir), "--raw-archive", str(train)])) == 1
    out = capsys.readouterr().out
    assert "LDCTIQAG2023_train.zip -> Zenodo record 7833096 (all files)" in out
    assert "missing:" in out and "test_dataset.zip: download by hand from https://drive.google.com" in out
    assert "cannot be prepared yet" in out
    stray = tmp_path / "holiday.zip"
    stray.write_bytes(zip_bytes({"__MACOSX/._a": b"", "photos/beach.jpg": b"\xff\xd8"}))
    assert run_prepare(args(["ldct-iqa", "--check", "--data-dir", str(data_dir), "--raw-archive", str(test),
                             "--raw-archive", str(train), "--raw-archive", str(stray)])) == 1
    out = capsys.readouterr().out
    assert "LDCTIQAC_test.zip -> test_dataset.zip" in out
    assert "LDCTIQAC_test.zip is published as test_dataset.zip (recognised by content)" in out
    assert "holiday.zip: none of this task's raw files; found inside: 1 files (photos/beach.jpg)" in out
    assert run_prepare(args(["ldct-iqa", "--check", "--data-dir", str(data_dir), "--raw-archive", str(test),
                             "--raw-archive", str(train)])) == 0
    assert "ready" in capsys.readouterr().out
    assert not data_dir.exists()


def test_check_names_a_missing_sega_centre(tmp_path, offline, capsys):
    centres = releases.sega()
    (tmp_path / "KiTS.zip").write_bytes(centres["KiTS.zip"])
    assert run_prepare(args(["seg-a", "--check", "--data-dir", str(tmp_path / "d"),
                             "--raw-archive", str(tmp_path / "KiTS.zip")])) == 1
    out = capsys.readouterr().out
    assert "KiTS.zip -> figshare article 14806362 v1" in out
    assert "without cases in the given files: Dongyang, Rider" in out


def test_check_all_offers_each_file_to_its_task_and_names_strays(tmp_path, offline, capsys):
    train, test, _ = ldct_files(tmp_path)
    (tmp_path / "Rider.zip").write_bytes(releases.sega()["Rider.zip"])
    stray = tmp_path / "notes.zip"
    stray.write_bytes(zip_bytes({"notes/todo.txt": b"call the organisers\r\n"}))
    status = run_prepare(args(["all", "--check", "--data-dir", str(tmp_path / "d"), "--raw-archive", str(test),
                               "--raw-archive", str(tmp_path / "Rider.zip"), "--raw-archive", str(stray),
                               "--raw-archive", str(train)]))
    out = capsys.readouterr().out
    assert status == 1
    assert f"not recognised: {stray} is no raw file of any task; found inside: 1 files (notes/todo.txt)" in out
    ldct = out[out.index("ldct-iqa: raw files"):].split("=>")[0]
    assert "LDCTIQAC_test.zip -> test_dataset.zip" in ldct and "LDCTIQAG2023_train.zip -> Zenodo record" in ldct
    sega = out[out.index("seg-a: raw files"):].split("=>")[0]
    assert "Rider.zip -> figshare article" in sega and "Dongyang, KiTS" in sega
    assert not (tmp_path / "d").exists()


def test_check_after_prepare_reports_parts_present_and_files_not_needed(tmp_path, offline, capsys):
    train, test, _ = ldct_files(tmp_path)
    data_dir = tmp_path / "data"
    prepare_task(task("ldct-iqa"), data_dir, [test, train], progress=False)
    before = sorted(p.relative_to(data_dir) for p in data_dir.rglob("*"))
    assert run_prepare(args(["ldct-iqa", "--check", "--data-dir", str(data_dir), "--raw-archive", str(test)])) == 0
    out = capsys.readouterr().out
    assert "already present:" in out and "test_dataset.zip (" in out and "missing:" not in out
    assert "LDCTIQAC_test.zip: test_dataset.zip is already present" in out
    assert sorted(p.relative_to(data_dir) for p in data_dir.rglob("*")) == before


def test_windows_backslash_member_names_are_recognised(tmp_path):
    from pytest_rexmle.data.prepare.recognise import inspect
    from pytest_rexmle.data.prepare.sources import parts_for

    archive = tmp_path / "x.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("PANTHER_Task2\\LabelsTr\\10300.mha", b"")
        zf.writestr("PANTHER_Task2\\Thumbs.db", b"")
    contents = inspect(archive)
    assert contents.members == ["PANTHER_Task2/LabelsTr/10300.mha"] and contents.debris == 1
    assert [p.dest for p in parts_for(task("panther-t2")) if p.recognises(contents)] == ["task2"]
    assert not any(p.recognises(contents) for p in parts_for(task("panther-t1")))


# -- everything by hand: every release file under a meaningless name, in reverse order -------------------
def _prepared_hashes(root: Path) -> dict[str, dict[str, str]]:
    """task → {file: sha256} of everything prepared (the manifest's own list, which the preparer hashed)."""
    out = {}
    for manifest in sorted(root.glob(f"*/private/{MANIFEST}")):
        data = json.loads(manifest.read_text())
        out[data["project_id"]] = data["files"]
    return out


def test_prepare_all_from_scrambled_hand_downloads_equals_the_automatic_path(release_bundle, tmp_path, monkeypatch,
                                                                             capsys):
    from .fake_server import FakeServer, RunningServer

    template, manual = release_bundle
    state = FakeServer(zenodo=template.zenodo, figshare=template.figshare)
    server = RunningServer(state)
    monkeypatch.setenv("REXMLE_ZENODO_URL", state.url)
    monkeypatch.setenv("REXMLE_FIGSHARE_URL", state.url)
    monkeypatch.setenv("REXMLE_DOWNLOAD_BACKOFF", "0")
    try:
        assert run_prepare(args(["all", "--data-dir", str(tmp_path / "auto"), "--no-progress",
                                 "--raw-archive", str(manual["train_dataset.zip"]),
                                 "--raw-archive", str(manual["test_dataset.zip"])])) == 0
    finally:
        server.close()
    monkeypatch.setenv("REXMLE_ZENODO_URL", "http://127.0.0.1:9")      # from here on: no network at all
    monkeypatch.setenv("REXMLE_FIGSHARE_URL", "http://127.0.0.1:9")
    unused = {"center_ids.xlsx", "Testing.zip", "train-unlabeled-part1.zip", "train-unlabeled-part2.zip"}
    payloads = [data for files in template.zenodo.values() for name, data in files.items() if name not in unused]
    payloads += [data for files in template.figshare.values() for data in files.values()]
    payloads += [path.read_bytes() for path in manual.values()]
    downloads = tmp_path / "Downloads"
    downloads.mkdir()
    given = []
    for k, data in enumerate(reversed(payloads)):
        given.append(downloads / f"download ({k}).zip")
        given[-1].write_bytes(data)
    argv = ["all", "--data-dir", str(tmp_path / "hand"), "--no-progress"]
    for path in given:
        argv += ["--raw-archive", str(path)]
    assert run_prepare(args(argv)) == 0, capsys.readouterr().err
    auto, hand = _prepared_hashes(tmp_path / "auto"), _prepared_hashes(tmp_path / "hand")
    assert sorted(hand) == sorted(registry().ids) and len(hand) == 20
    for task_id, files in auto.items():
        assert hand[task_id] == files, task_id


def test_check_all_with_an_unreadable_file_reports_it_and_goes_on(tmp_path, capsys):
    page = tmp_path / "test_dataset.zip"
    page.write_text("<html>quota exceeded</html>")
    assert run_prepare(args(["all", "--check", "--data-dir", str(tmp_path / "d"), "--raw-archive", str(page)])) == 1
    out = capsys.readouterr().out
    assert "not recognised: --raw-archive" in out and "neither zip nor tar" in out
    assert out.count(": raw files") == 20 and not (tmp_path / "d").exists()
