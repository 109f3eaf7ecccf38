"""Reading a submission folder under the submission rules every task shares.

Every rule violation raises :class:`InvalidSubmission` with a message naming the offending case(s) and
the rule, so the agent's FAIL is explained and the session never crashes on bad input.
"""

from __future__ import annotations

import csv
import io
import math
import os
import posixpath
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .agent_output import kind_of, read_bytes, show, walk_files
from .errors import InvalidSubmission

SUBMISSION_CSV = "submission.csv"
ANSWERS_CSV = "answers.csv"
MAX_CSV_BYTES = 64 * 1024 * 1024
MAX_PATH_PARTS = 32


def _first(items: Iterable[str], n: int = 5) -> str:
    items = sorted(items)
    shown = ", ".join(repr(i) for i in items[:n])
    return shown + (f" (and {len(items) - n} more)" if len(items) > n else "")


@dataclass(frozen=True)
class CaseTable:
    """A CSV keyed by case id, all cells kept as stripped strings."""

    root: Path
    id_column: str
    rows: dict[str, dict[str, str]]

    @property
    def ids(self) -> list[str]:
        return sorted(self.rows)

    def value(self, case_id: str, column: str) -> str:
        return self.rows[case_id][column]

    def number(self, case_id: str, column: str) -> float:
        """A finite decimal number, or InvalidSubmission."""
        text = self.value(case_id, column)
        try:
            value = float(text)
        except ValueError:
            raise InvalidSubmission(f"case {case_id!r}: column {column!r} is not a number: {text!r}") from None
        if not math.isfinite(value):
            raise InvalidSubmission(f"case {case_id!r}: column {column!r} must be finite, got {text!r}")
        return value

    def file(self, case_id: str, column: str) -> Path:
        """Resolve a relative path cell inside ``root`` after checking the path rules."""
        return safe_relative_file(self.root, self.value(case_id, column), f"case {case_id!r}, column {column!r}")


def safe_relative_file(root: Path, text: str, where: str) -> Path:
    if not text:
        raise InvalidSubmission(f"{where}: empty path")
    if "\\" in text:
        raise InvalidSubmission(f"{where}: path {text!r} must use '/' as separator")
    pure = PurePosixPath(text)
    if pure.is_absolute() or (len(text) > 1 and text[1] == ":"):
        raise InvalidSubmission(f"{where}: path {text!r} must be relative to the submission folder")
    normal = posixpath.normpath(text)
    if normal == "." or normal == ".." or normal.startswith("../"):
        raise InvalidSubmission(f"{where}: path {text!r} leaves the submission folder")
    parts = PurePosixPath(normal).parts
    if len(parts) > MAX_PATH_PARTS:
        raise InvalidSubmission(f"{where}: path {show(text, 80)} is nested more than {MAX_PATH_PARTS} folders deep")
    current = root
    for part in parts:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            raise InvalidSubmission(f"{where}: file {text!r} does not exist") from None
        except OSError as exc:
            raise InvalidSubmission(f"{where}: file {text!r} cannot be read ({exc.strerror})") from None
        if stat.S_ISLNK(mode):
            raise InvalidSubmission(f"{where}: {text!r} goes through a symbolic link, which is not allowed")
    if not stat.S_ISREG(mode):
        raise InvalidSubmission(f"{where}: {text!r} is not a regular file")
    return current


def _reject_links(root: Path) -> None:
    """No links and no special files anywhere below ``root``, walked iteratively with depth and size bounds
    (a 1,500-level folder is an INVALID, not a RecursionError)."""
    for rel, st in walk_files(root):
        if stat.S_ISLNK(st.st_mode):
            raise InvalidSubmission(f"the submission contains a symbolic link: {show(rel, 200)}")
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            raise InvalidSubmission(f"the submission contains {kind_of(st.st_mode)}: {show(rel, 200)}")


def read_case_table(path: Path, id_column: str, columns: Iterable[str], expected_ids: Iterable[str] | None,
                    what: str = "submission.csv") -> CaseTable:
    """Parse a case CSV; ``expected_ids`` (if given) must equal the set of ids exactly."""
    rows = _csv_rows(path, what)
    header = [h.strip() for h in rows[0]]
    required = [id_column, *columns]
    missing = [c for c in required if c not in header]
    if missing:
        raise InvalidSubmission(f"{what} lacks required column(s) {missing}; header is {header}")
    index = {name: header.index(name) for name in required}
    table: dict[str, dict[str, str]] = {}
    duplicates: set[str] = set()
    for line_no, row in enumerate(rows[1:], start=2):
        if not row or all(not cell.strip() for cell in row):
            continue
        record = {name: row[i].strip() if i < len(row) else "" for name, i in index.items()}
        case_id = record[id_column]
        if not case_id:
            raise InvalidSubmission(f"{what} line {line_no}: empty {id_column!r}")
        if case_id in table:
            duplicates.add(case_id)
        table[case_id] = record
    if duplicates:
        raise InvalidSubmission(f"{what}: duplicated id(s) {_first(duplicates)}")
    if expected_ids is not None:
        expected = set(expected_ids)
        lacking, unknown = expected - set(table), set(table) - expected
        if lacking:
            raise InvalidSubmission(f"{what}: missing test case(s) {_first(lacking)}")
        if unknown:
            raise InvalidSubmission(f"{what}: unknown case id(s) {_first(unknown)}")
    return CaseTable(path.parent, id_column, table)


def _csv_rows(path: Path, what: str) -> list[list[str]]:
    """The rows of a regular, bounded, UTF-8 CSV file without NUL bytes; at least the header row."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise InvalidSubmission(f"{what} is missing") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        raise InvalidSubmission(f"{what} is not a regular file")
    if st.st_size > MAX_CSV_BYTES:
        raise InvalidSubmission(f"{what} is larger than {MAX_CSV_BYTES} bytes")
    try:
        text = read_bytes(path, MAX_CSV_BYTES, what).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidSubmission(f"{what} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if "\x00" in text:
        raise InvalidSubmission(f"{what} contains NUL bytes")
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise InvalidSubmission(f"{what} is not valid CSV: {exc}") from None
    if not rows:
        raise InvalidSubmission(f"{what} is empty (a header row is required)")
    return rows


def read_submission(folder: Path, id_column: str, columns: Iterable[str], expected_ids: Iterable[str]) -> CaseTable:
    """The agent's ``submission/`` folder: no links anywhere, CSV ids equal to the test ids."""
    if not folder.is_dir() or folder.is_symlink():
        raise InvalidSubmission(f"submission folder {folder} does not exist")
    _reject_links(folder)
    return read_case_table(folder / SUBMISSION_CSV, id_column, columns, expected_ids)


def read_answers(private_dir: Path, id_column: str, columns: Iterable[str]) -> CaseTable:
    """The private ``answers.csv``; a malformed one is a harness problem, not the agent's."""
    try:
        return read_case_table(private_dir / ANSWERS_CSV, id_column, columns, None, what=f"{private_dir}/answers.csv")
    except InvalidSubmission as exc:
        raise RuntimeError(f"private answers are broken: {exc}") from None
