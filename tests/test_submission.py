"""Submission folder and CSV rules (docs/reference/grading.md: submissions), on real files in tmp_path."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from pytest_rexmle.errors import InvalidSubmission
from pytest_rexmle.submission import read_answers, read_case_table, read_submission, safe_relative_file

IDS = ["001", "002"]


def make_submission(root: Path, csv_text: str | bytes, files: dict[str, bytes] | None = None) -> Path:
    folder = root / "submission"
    folder.mkdir()
    data = csv_text.encode("utf-8") if isinstance(csv_text, str) else csv_text
    (folder / "submission.csv").write_bytes(data)
    for rel, content in (files or {}).items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return folder


def read(folder: Path, columns=("mask_path",), ids=IDS):
    return read_submission(folder, "image_id", columns, ids)


def invalid(folder: Path, pattern: str, **kw) -> str:
    with pytest.raises(InvalidSubmission) as info:
        read(folder, **kw)
    assert re.search(pattern, str(info.value)), str(info.value)
    return str(info.value)


# -- CSV parsing -----------------------------------------------------------------------------------------

def test_plain_valid_submission(tmp_path):
    folder = make_submission(tmp_path, "image_id,mask_path\n001,preds/001.png\n002,preds/002.png\n",
                             {"preds/001.png": b"a", "preds/002.png": b"b"})
    table = read(folder)
    assert table.ids == ["001", "002"]
    assert table.value("001", "mask_path") == "preds/001.png"
    assert table.file("002", "mask_path") == folder / "preds" / "002.png"
    assert table.root == folder


def test_ids_stay_strings(tmp_path):
    folder = make_submission(tmp_path, "image_id,score\n001,1\n002,2\n")
    table = read(folder, columns=("score",))
    assert table.ids == ["001", "002"]  # not 1 and 2
    assert table.value("002", "score") == "2"  # not 2.0
    # "1" is a different id from "001": unknown + missing
    other = tmp_path / "other"
    other.mkdir()
    folder2 = make_submission(other, "image_id,score\n1,1\n002,2\n")
    with pytest.raises(InvalidSubmission, match=r"missing test case.*'001'"):
        read(folder2, columns=("score",))


# Each CSV below is read with columns ("score",) and expected ids 001 and 002.
ACCEPTED_CSV = {
    "byte-order mark and CRLF": (b"\xef\xbb\xbfimage_id,score\r\n001,1.5\r\n002,2\r\n", {"001": "1.5", "002": "2"}),
    "whitespace stripped": (b" image_id , score \n  001 ,  1.5  \n002\t,\t2 \n", {"001": "1.5", "002": "2"}),
    "blank lines skipped": (b"image_id,score\n001,1\n\n , \n002,2\n", {"001": "1", "002": "2"}),
}


@pytest.mark.parametrize("name", list(ACCEPTED_CSV))
def test_accepted_csv(tmp_path, name):
    text, values = ACCEPTED_CSV[name]
    table = read(make_submission(tmp_path, text), columns=("score",))
    assert table.ids == ["001", "002"]
    assert {case: table.value(case, "score") for case in table.ids} == values


def test_extra_columns_are_ignored(tmp_path):
    folder = make_submission(tmp_path, "note,score,image_id,other\nhello,1,001,x\n,2,002,\n")
    table = read(folder, columns=("score",))
    assert table.rows == {"001": {"image_id": "001", "score": "1"}, "002": {"image_id": "002", "score": "2"}}


REFUSED_CSV = {
    "missing column": (b"image_id,scores\n001,1\n002,2\n", r"lacks required column.*'score'"),
    "missing id column": (b"id,score\n001,1\n002,2\n", r"lacks required column.*'image_id'"),
    "missing id": (b"image_id,score\n001,1\n", r"missing test case.*'002'"),
    "unknown id": (b"image_id,score\n001,1\n002,2\n003,3\n", r"unknown case id.*'003'"),
    "duplicate id": (b"image_id,score\n001,1\n002,2\n001,3\n", r"duplicated id.*'001'"),
    "duplicate after stripping": (b"image_id,score\n001,1\n002,2\n 001 ,3\n", r"duplicated id.*'001'"),
    "empty id cell": (b"image_id,score\n001,1\n,2\n002,2\n", r"line 3.*empty 'image_id'"),
    "empty CSV": (b"", r"submission.csv is empty"),
    "header only": (b"image_id,score\n", r"missing test case.*'001', '002'"),
    "not UTF-8": ("image_id,score\n001,1\n002,caf\xe9\n".encode("latin-1"), r"not UTF-8"),
    "NUL bytes": (b"image_id,score\n001,1\x00\n002,2\n", r"NUL"),
}


@pytest.mark.parametrize("name", list(REFUSED_CSV))
def test_refused_csv(tmp_path, name):
    text, pattern = REFUSED_CSV[name]
    invalid(make_submission(tmp_path, text), pattern, columns=("score",))


def no_csv(tmp_path: Path) -> Path:
    (tmp_path / "submission").mkdir()
    return tmp_path / "submission"


def csv_is_a_folder(tmp_path: Path) -> Path:
    (tmp_path / "submission" / "submission.csv").mkdir(parents=True)
    return tmp_path / "submission"


@pytest.mark.parametrize("make, pattern", [
    (no_csv, r"submission.csv is missing"),
    (lambda tmp_path: tmp_path / "nope", r"does not exist"),
    (csv_is_a_folder, r"not a regular file"),
], ids=["no submission.csv", "no folder", "submission.csv is a folder"])
def test_refused_folder(tmp_path, make, pattern):
    invalid(make(tmp_path), pattern, columns=("score",))


def test_number_cells(tmp_path):
    folder = make_submission(tmp_path, "image_id,score\n001,abc\n002,inf\n")
    table = read(folder, columns=("score",))
    with pytest.raises(InvalidSubmission, match=r"case '001'.*'score'.*not a number"):
        table.number("001", "score")
    with pytest.raises(InvalidSubmission, match=r"case '002'.*must be finite"):
        table.number("002", "score")


def test_nan_cell_is_not_finite(tmp_path):
    folder = make_submission(tmp_path, "image_id,score\n001,nan\n002,1e3\n")
    table = read(folder, columns=("score",))
    assert table.number("002", "score") == 1000.0
    with pytest.raises(InvalidSubmission, match="finite"):
        table.number("001", "score")


def test_read_case_table_without_expected_ids(tmp_path):
    path = tmp_path / "answers.csv"
    path.write_text("image_id,quality_score\n1000,1.15\n0999,2\n", encoding="utf-8")
    table = read_case_table(path, "image_id", ["quality_score"], None, what="answers.csv")
    assert table.ids == ["0999", "1000"]


def test_broken_answers_are_a_harness_error(tmp_path):
    (tmp_path / "answers.csv").write_text("image_id\n1\n", encoding="utf-8")
    with pytest.raises(RuntimeError, match="private answers are broken"):
        read_answers(tmp_path, "image_id", ["quality_score"])


# -- paths -----------------------------------------------------------------------------------------------

def _path_case(tmp_path: Path, cell: str, files=None) -> Path:
    files = {"preds/001.png": b"a", "preds/002.png": b"b"} if files is None else files
    return make_submission(tmp_path, f"image_id,mask_path\n001,{cell}\n002,preds/002.png\n", files)


def _file_error(folder: Path, pattern: str) -> None:
    table = read(folder)
    with pytest.raises(InvalidSubmission) as info:
        table.file("001", "mask_path")
    message = str(info.value)
    assert "case '001'" in message and "'mask_path'" in message, message
    assert re.search(pattern, message), message


def test_dot_slash_prefix_allowed(tmp_path):
    folder = _path_case(tmp_path, "./preds/001.png")
    assert read(folder).file("001", "mask_path") == folder / "preds" / "001.png"


#: a first-row path cell (``{tmp}`` is the test's folder) and what its refusal must say
REFUSED_PATH = {
    "absolute": ("{tmp}/submission/preds/001.png", r"must be relative"),
    "Windows drive": ("C:/preds/001.png", r"must be relative"),
    "parent": ("../001.png", r"leaves the submission folder"),
    "parent after a folder": ("preds/../../001.png", r"leaves the submission folder"),
    "dot-dot": ("..", r"leaves the submission folder"),
    "dot only": ("./", r"leaves the submission folder"),
    "backslash": ("preds\\001.png", r"must use '/'"),
    "empty": ("", r"empty path"),
    "missing file": ("preds/003.png", r"does not exist"),
    "a folder": ("preds", r"not a regular file"),
}


@pytest.mark.parametrize("name", list(REFUSED_PATH))
def test_refused_path_cell(tmp_path, name):
    cell, pattern = REFUSED_PATH[name]
    (tmp_path / "001.png").write_bytes(b"outside")  # what a path leaving the folder would reach
    _file_error(_path_case(tmp_path, cell.format(tmp=tmp_path)), pattern)


def test_symlinked_file(tmp_path):
    outside = tmp_path / "outside.png"
    outside.write_bytes(b"x")
    folder = tmp_path / "sub"
    folder.mkdir()
    (folder / "link.png").symlink_to(outside)
    with pytest.raises(InvalidSubmission, match=r"case '001'.*'link.png'.*symbolic link"):
        safe_relative_file(folder, "link.png", "case '001'")


def test_symlinked_directory_on_the_path(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "001.png").write_bytes(b"x")
    folder = tmp_path / "sub"
    folder.mkdir()
    (folder / "preds").symlink_to(real, target_is_directory=True)
    with pytest.raises(InvalidSubmission, match="symbolic link"):
        safe_relative_file(folder, "preds/001.png", "case '001'")


def test_safe_relative_file_returns_path_inside(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "c.txt").write_text("x")
    assert safe_relative_file(tmp_path, "a/b/c.txt", "w") == tmp_path / "a" / "b" / "c.txt"
    assert safe_relative_file(tmp_path, "./a//b/./c.txt", "w") == tmp_path / "a" / "b" / "c.txt"


def test_symlink_anywhere_in_the_folder_is_rejected(tmp_path):
    folder = _path_case(tmp_path, "preds/001.png")
    deep = folder / "extra" / "deeper"
    deep.mkdir(parents=True)
    (deep / "innocent.png").symlink_to(folder / "preds" / "001.png")  # not referenced by the CSV
    invalid(folder, r"symbolic link.*extra/deeper/innocent.png")


def test_dangling_symlink_in_the_folder_is_rejected(tmp_path):
    folder = _path_case(tmp_path, "preds/001.png")
    (folder / "ghost").symlink_to(tmp_path / "does-not-exist")
    invalid(folder, r"symbolic link.*'ghost'")


def test_symlinked_submission_csv_is_rejected(tmp_path):
    real = tmp_path / "real.csv"
    real.write_text("image_id,score\n001,1\n002,2\n")
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "submission.csv").symlink_to(real)
    with pytest.raises(InvalidSubmission, match="symbolic link|not a regular file"):
        read(folder, columns=("score",))
    # read_case_table alone also refuses it
    with pytest.raises(InvalidSubmission, match="not a regular file"):
        read_case_table(folder / "submission.csv", "image_id", ["score"], IDS)


def test_symlinked_submission_folder_is_rejected(tmp_path):
    real = make_submission(tmp_path, "image_id,score\n001,1\n002,2\n")
    link = tmp_path / "linked"
    link.symlink_to(real, target_is_directory=True)
    with pytest.raises(InvalidSubmission):
        read(link, columns=("score",))
    assert os.path.isdir(link)  # the folder itself is fine, only the link is refused


def test_dotdot_that_stays_inside_after_normalisation_is_allowed(tmp_path):
    """a path must not leave the folder *after normalisation*; 'preds/../001.png' is '001.png'."""
    from pytest_rexmle.errors import InvalidSubmission
    from pytest_rexmle.submission import safe_relative_file

    (tmp_path / "preds").mkdir()
    (tmp_path / "001.png").write_bytes(b"x")
    assert safe_relative_file(tmp_path, "preds/../001.png", "case '001'") == tmp_path / "001.png"
    with pytest.raises(InvalidSubmission, match="leaves the submission folder"):
        safe_relative_file(tmp_path, "preds/../../001.png", "case '001'")
