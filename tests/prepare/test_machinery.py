"""Download, extraction and transaction behaviour of ``rexmle prepare`` against the fake server."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from pytest_rexmle.competitions.sega.prepare import header_repair_offset
from pytest_rexmle.data.prepare import (
    ChecksumMismatch,
    ManualDownloadRequired,
    NotEnoughDiskSpace,
    PrepareError,
    UnsafeArchive,
    add_prepare_arguments,
    core,
    data_status,
    prepare_task,
    run_prepare,
)
from pytest_rexmle.data.prepare import download as dl
from pytest_rexmle.data.prepare.extract import Limits, safe_extract
from pytest_rexmle.data.taskdata import MANIFEST
from pytest_rexmle.task import registry

from .releases import strip_nrrd_blank_line, volume_bytes, zip_bytes

TOPBRAIN = "TopBrain_Data_Release_Batches1n2_081425.zip"
TOPCOW = "TopCoW2024_Data_Release.zip"
REPO = Path(__file__).resolve().parents[2]


def task(name: str):
    return registry().get(name)


def tree_state(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): p.stat().st_mtime_ns for p in root.rglob("*")}


def no_build_leftovers(data_dir: Path) -> bool:
    return not list(data_dir.glob(".prepare-*"))


# -- downloads ----------------------------------------------------------------------------------------
def test_interrupted_download_resumes_with_range(fake_sources, tmp_path):
    state, _ = fake_sources
    size = len(state.zenodo["16878417"][TOPBRAIN])
    state.drop_once.add(TOPBRAIN)
    data = prepare_task("topbrain-cta-seg", tmp_path, progress=True)  # with the tqdm bar
    # the server closed the first response after half the bytes; the retry asked only for the rest
    assert state.downloads(TOPBRAIN) == [None, f"bytes={size // 2}-"]
    assert (data.private / MANIFEST).is_file()
    assert not list((tmp_path / "raw" / "topbrain").rglob("*.part"))


def test_partial_file_from_an_earlier_run_is_continued(fake_sources, tmp_path):
    state, _ = fake_sources
    payload = state.zenodo["16878417"][TOPBRAIN]
    remote = next(f for f in dl.zenodo_files("16878417") if f.name == TOPBRAIN)
    dest = tmp_path / TOPBRAIN
    dest.with_name(TOPBRAIN + ".part").write_bytes(payload[:1000])
    dl.download(remote, dest, progress=False)
    assert dest.read_bytes() == payload
    assert state.downloads(TOPBRAIN) == ["bytes=1000-"]
    assert dl.is_downloaded(remote, dest)


def test_checksum_mismatch_is_a_clear_error_and_nothing_is_prepared(fake_sources, tmp_path):
    state, _ = fake_sources
    state.wrong_md5.add(TOPBRAIN)
    with pytest.raises(ChecksumMismatch, match=r"MD5 [0-9a-f]{32} differs from the published 0{32}"):
        prepare_task(task("topbrain-mra-seg"), tmp_path, progress=False)
    assert not (tmp_path / "topbrain-mra-seg").exists()
    assert data_status(task("topbrain-mra-seg"), tmp_path)["status"] == "not downloaded"
    raw = tmp_path / "raw" / "topbrain"
    assert not [p for p in raw.rglob("*") if p.is_file() and p.suffix in (".zip", ".part")]
    assert no_build_leftovers(tmp_path)


def test_free_disk_check_runs_before_any_download(fake_sources, tmp_path, monkeypatch):
    state, _ = fake_sources
    monkeypatch.setattr(dl, "free_bytes", lambda path: 10)
    with pytest.raises(NotEnoughDiskSpace, match="is free"):
        prepare_task(task("topbrain-cta-seg"), tmp_path, progress=False)
    assert state.downloads(TOPBRAIN) == []


def test_gated_source_without_archive_names_page_and_file(fake_sources, tmp_path, capsys):
    state, manual = fake_sources
    with pytest.raises(ManualDownloadRequired) as info:
        prepare_task(task("usenhance"), tmp_path, progress=False)
    message = str(info.value)
    assert "https://drive.google.com/file/d/1RrM8YIwAENxzONSEaVZCzDkiiPMSmDxH/view" in message
    assert "'train_dataset.zip'" in message and "--raw-archive" in message
    # LDCT-IQA: the Zenodo part is not downloaded before the user is told about the manual one
    args = _args(["ldct-iqa", "--data-dir", str(tmp_path), "--no-progress"])
    assert run_prepare(args) == 1
    err = capsys.readouterr().err
    assert "test_dataset.zip" in err and "1DbZfTj4it-3QRTuJO73r1iQyHLRwPS6H" in err
    assert state.downloads("LDCTIQAG2023_train.zip") == []
    # with the archive the same command prepares the task
    args = _args(["ldct-iqa", "--data-dir", str(tmp_path), "--no-progress", "--raw-archive", str(manual["test_dataset.zip"])])
    assert run_prepare(args) == 0
    assert "ldct-iqa: prepared" in capsys.readouterr().out
    assert data_status(task("ldct-iqa"), tmp_path)["counts"]["test"] == 5


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_prepare_arguments(parser)
    return parser.parse_args(argv)


# -- idempotence, atomicity, concurrency ---------------------------------------------------------------
def test_second_run_is_a_no_op(fake_sources, tmp_path):
    state, _ = fake_sources
    prepare_task(task("topcow-cta-det"), tmp_path, progress=False)
    before, requests = tree_state(tmp_path / "topcow-cta-det"), len(state.log)
    raw_before = tree_state(tmp_path / "raw")
    prepare_task(task("topcow-cta-det"), tmp_path, progress=False, verify=True)
    assert tree_state(tmp_path / "topcow-cta-det") == before
    assert tree_state(tmp_path / "raw") == raw_before
    assert len(state.log) == requests  # not even the record API was asked
    assert data_status(task("topcow-cta-det"), tmp_path)["status"] == "prepared"
    # a sibling task re-uses the shared raw folder: no new download
    prepare_task(task("topcow-mra-cls"), tmp_path, progress=False)
    assert state.downloads(TOPCOW) == [None]
    assert data_status(task("topcow-mra-cls"), tmp_path)["counts"] == {"cases": 6, "train": 4, "test": 2}


def test_damaged_prepared_folder_is_rebuilt(fake_sources, tmp_path):
    data = prepare_task(task("topcow-cta-cls"), tmp_path, progress=False)
    victim = next((data.private / "test" / "labels").glob("*.json"))
    content = victim.read_bytes()
    victim.write_bytes(content + b" ")  # size changes: the quick check notices
    assert data_status(task("topcow-cta-cls"), tmp_path)["status"] == "raw"
    prepare_task(task("topcow-cta-cls"), tmp_path, progress=False)
    assert victim.read_bytes() == content


def test_interrupted_prepare_leaves_nothing_that_looks_ready(fake_sources, tmp_path, monkeypatch):
    def broken(ctx):
        (ctx.public / "train").mkdir()
        (ctx.public / "train" / "half.txt").write_text("half")
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("pytest_rexmle.competitions.isles22.prepare.prepare", broken)
        with pytest.raises(KeyboardInterrupt):
            prepare_task(task("isles22"), tmp_path, progress=False)
    assert not (tmp_path / "isles22").exists() and no_build_leftovers(tmp_path)
    assert data_status(task("isles22"), tmp_path)["status"] == "raw"   # the raw part was completed
    assert (prepare_task(task("isles22"), tmp_path, progress=False).private / MANIFEST).is_file()


CHILD = """
import sys
from pathlib import Path
from pytest_rexmle.data.prepare import prepare_task
from pytest_rexmle.task import registry
data = prepare_task(registry().get("topcow-mra-seg"), Path(sys.argv[1]), progress=False)
print(data.root)
"""


def test_two_concurrent_prepares_end_with_one_result(fake_sources, tmp_path):
    state, _ = fake_sources
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    assert {o[0].strip() for o in outs} == {str(tmp_path / "topcow-mra-seg")}
    assert state.downloads(TOPCOW) == [None]
    assert core.manifest_ok(task("topcow-mra-seg"), tmp_path / "topcow-mra-seg", full=True)
    assert no_build_leftovers(tmp_path)


# -- archives ------------------------------------------------------------------------------------------
def test_zip_slip_is_rejected(tmp_path):
    evil = tmp_path / "evil.zip"
    evil.write_bytes(zip_bytes({"ok/a.txt": b"a", "../escaped.txt": b"x"}))
    with pytest.raises(UnsafeArchive, match="leaves the extraction folder"):
        safe_extract(evil, tmp_path / "out" / "dest")
    assert not (tmp_path / "out" / "escaped.txt").exists() and not (tmp_path / "escaped.txt").exists()
    assert not (tmp_path / "out" / "dest").exists() and list((tmp_path / "out").iterdir()) == []
    absolute = tmp_path / "abs.zip"
    absolute.write_bytes(zip_bytes({"/etc/passwd-copy": b"x"}))
    with pytest.raises(UnsafeArchive, match="absolute path"):
        safe_extract(absolute, tmp_path / "out2")


def test_tar_links_out_and_oversized_archives_are_rejected(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        link = tarfile.TarInfo("data/passwd")
        link.type, link.linkname = tarfile.SYMTYPE, "../../etc/passwd"
        tf.addfile(link)
    (tmp_path / "link.tar").write_bytes(buf.getvalue())
    with pytest.raises(UnsafeArchive, match="points outside"):
        safe_extract(tmp_path / "link.tar", tmp_path / "t")
    big = tmp_path / "big.zip"
    big.write_bytes(zip_bytes({"a.bin": b"\0" * 5000}))
    with pytest.raises(UnsafeArchive, match="exceed the limit"):
        safe_extract(big, tmp_path / "b", Limits(max_total_bytes=4000))
    assert not (tmp_path / "t").exists() and not (tmp_path / "b").exists()


def test_malicious_manual_archive_prepares_nothing(fake_sources, tmp_path):
    evil = tmp_path / "train_dataset.zip"
    evil.write_bytes(zip_bytes({"train_datasets/breast/low_quality/1.png": b"x", "../../pwned.png": b"x"}))
    with pytest.raises(UnsafeArchive):
        prepare_task(task("usenhance"), tmp_path / "data", evil, progress=False)
    assert not (tmp_path / "data" / "usenhance").exists()
    assert data_status(task("usenhance"), tmp_path / "data")["status"] == "not downloaded"
    assert not (tmp_path / "pwned.png").exists()


def test_two_raw_files_with_one_case_id_fail_loudly(fake_sources, tmp_path):
    archive = tmp_path / "train_dataset.zip"
    png = b"\x89PNG not decoded by the preparer"
    archive.write_bytes(zip_bytes({f"train_datasets/breast/{q}/{n}": png for q in ("low_quality", "high_quality")
                                   for n in ("1.png", "1.PNG")}))
    with pytest.raises(PrepareError, match="two raw low-quality files map to the case id 'breast_1'"):
        prepare_task(task("usenhance"), tmp_path / "data", archive, progress=False)
    assert not (tmp_path / "data" / "usenhance").exists()


# -- release-specific rules ----------------------------------------------------------------------------
def test_nrrd_header_repair_offset():
    good = volume_bytes(__import__("numpy").zeros((2, 3, 4), "int16"), ".nrrd")
    assert header_repair_offset(good) is None
    bad = strip_nrrd_blank_line(good)
    at = header_repair_offset(bad)
    # the data (a gzip stream, 0x1f 0x8b) starts right where the blank line must go
    assert bad[at:at + 2] == b"\x1f\x8b" and bad[:at] + b"\n" + bad[at:] == good


def test_dentex_one_based_categories_are_refused(tmp_path):
    from pytest_rexmle.competitions.dentex.prepare import check_categories

    data = {"categories_1": [{"id": i, "name": str(i)} for i in range(1, 5)],
            "categories_2": [{"id": i, "name": str(i)} for i in range(8)],
            "categories_3": [{"id": i, "name": str(i)} for i in range(4)], "annotations": []}
    with pytest.raises(PrepareError, match=r"categories_1 ids are \['1', '2', '3', '4'\], expected exactly \[0, 1, 2, 3\]"):
        check_categories(data, tmp_path / "x.json")
    data["categories_1"] = [{"id": i, "name": str(i)} for i in range(4)]
    data["annotations"] = [{"id": 7, "bbox": [0, 0, 1, 1], "category_id_1": 0, "category_id_2": 8, "category_id_3": 0}]
    with pytest.raises(PrepareError, match="category_id_2 = 8"):
        check_categories(data, tmp_path / "x.json")


def test_topcow_label_parsers(tmp_path):
    from pytest_rexmle.competitions.topcow.prepare import parse_edges, parse_roi

    roi = tmp_path / "r.txt"
    roi.write_text("--- ROI Meta Data ---\n\nSize (Voxels): 96 68 36\n\nLocation (Voxels): 103 93 77\n")
    assert parse_roi(roi) == {"size": [96, 68, 36], "location": [103, 93, 77]}
    roi.write_text("Size (Voxels): 96 68\nLocation (Voxels): 1 2 3\n")
    with pytest.raises(PrepareError, match="three integers"):
        parse_roi(roi)
    yml = tmp_path / "e.yml"
    yml.write_text("anterior: {R-A1: 1, L-A1: 0, Acom: 1, 3rd-A2: 0}\nposterior: {L-Pcom: 0, L-P1: 1, R-P1: 1, R-Pcom: 1}\n")
    edges = parse_edges(yml)
    assert list(edges["anterior"].items()) == [("L-A1", 0), ("Acom", 1), ("3rd-A2", 0), ("R-A1", 1)]
    assert json.dumps(edges["posterior"]) == '{"L-Pcom": 0, "L-P1": 1, "R-P1": 1, "R-Pcom": 1}'


def test_sega_article_archive_with_nested_centre_zips(fake_sources, tmp_path):
    """The figshare article download (one zip holding Dongyang.zip, KiTS.zip, Rider.zip) via --raw-archive."""
    from .releases import sega

    state, _ = fake_sources
    article = tmp_path / "14806362.zip"
    article.write_bytes(zip_bytes(sega()))
    data = prepare_task(task("seg-a"), tmp_path / "data", article, progress=False)
    split = json.loads((data.private / "split.json").read_text())
    assert split["n"] == 6 and len(split["test"]) == 2
    assert state.log == []  # nothing asked from figshare
    assert not list((tmp_path / "data" / "raw" / "seg-a").rglob("*.zip"))  # nested archives expanded
    assert article.is_file()  # the user's file is never deleted
