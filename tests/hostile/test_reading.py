"""Host reads of agent files: regular files only, size-capped, bounded JSON and folder walks, clean text."""

from __future__ import annotations

import os
import socket
import time

import pytest

from pytest_rexmle.agent_output import (
    RefusedFile,
    clean_text,
    json_depth,
    load_json,
    open_reader,
    read_bytes,
    read_head_tail,
    read_json,
    walk_files,
)
from pytest_rexmle.errors import InvalidSubmission

from .helpers import GIB, deep_folder, remove_tree, sparse_file


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "rexmle-usage.json"
    os.mkfifo(fifo)  # nobody ever writes: a plain open() would block for ever
    start = time.monotonic()
    for read in (lambda: read_bytes(fifo), lambda: read_head_tail(fifo, 0, 100), lambda: read_json(fifo),
                 lambda: open_reader(fifo, 100)):
        with pytest.raises(RefusedFile, match="is a FIFO, not a regular file"):
            read()
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("target", ["/dev/zero", "/dev/urandom", "/etc/hostname"])
def test_a_symbolic_link_is_refused_whatever_it_points_to(tmp_path, target):
    link = tmp_path / "usage.json"
    link.symlink_to(target)
    with pytest.raises(RefusedFile, match="is a symbolic link"):
        read_bytes(link)


def test_a_sparse_gigabyte_is_refused_by_size_before_reading(tmp_path):
    big = sparse_file(tmp_path / "big.json", GIB)
    with pytest.raises(RefusedFile, match=f"is {GIB} bytes, more than the 1024 bytes"):
        read_bytes(big, limit=1024)
    head, tail, skipped = read_head_tail(big, 1000, 500)
    assert (len(head), len(tail), skipped) == (1000, 500, GIB - 1500)
    assert read_head_tail(big, 0, 10) == (b"", b"\x00" * 10, GIB - 10)


def test_a_missing_file_and_a_folder_are_refused(tmp_path):
    with pytest.raises(RefusedFile, match="does not exist"):
        read_bytes(tmp_path / "nothing")
    with pytest.raises(RefusedFile, match="is a directory"):
        read_bytes(tmp_path)


def test_refusals_are_invalid_submissions():
    assert issubclass(RefusedFile, InvalidSubmission)


def test_json_nested_200k_deep_is_refused_before_parsing():
    data = b"[" * 200_000 + b"]" * 200_000
    assert json_depth(data) == 200_000
    with pytest.raises(RefusedFile, match="nested 200000 levels deep"):
        load_json(data, "boxes.json")


def test_json_depth_ignores_brackets_inside_strings():
    assert json_depth(b'{"a": "[[[[{{{{", "b": ["\\"[[["]}') == 2
    assert load_json(b'{"a": "[[[[[[[[[["}', "x", max_depth=1) == {"a": "[[[[[[[[[["}


@pytest.mark.parametrize("seed", range(6))
def test_json_depth_python_loop_and_numpy_agree(seed, monkeypatch):
    import random

    import pytest_rexmle.agent_output as hostile

    rng = random.Random(seed)
    data = "".join(rng.choice(['[', ']', '{', '}', '"[{"', '1,', ' ']) for _ in range(2000)).encode()
    small = json_depth(data)
    monkeypatch.setattr(hostile, "_PYTHON_LOOP_BRACKETS", 0)  # force the NumPy pass
    assert json_depth(data) == small
    depth = peak = 0  # the definition, byte by byte, on the text with its strings blanked
    for ch in hostile._JSON_STRING.sub(b'""', data).decode():
        depth += {"[": 1, "{": 1, "]": -1, "}": -1}.get(ch, 0)
        peak = max(peak, depth)
    assert small == peak


def test_json_huge_integers_never_become_ints():
    value = load_json(b"[" + b"7" * 5000 + b", 12]", "x")
    assert value == [float("inf"), 12] and isinstance(value[1], int)
    with pytest.raises(RefusedFile, match="a number of 20000 characters"):
        load_json(b"[" + b"1" * 20_000 + b"]", "x")


def test_json_constants_are_refused_unless_allowed():
    with pytest.raises(RefusedFile, match="NaN is not a number allowed in JSON"):
        load_json(b"[NaN]", "x")
    assert load_json(b"[Infinity]", "x", allow_constants=True) == [float("inf")]
    with pytest.raises(RefusedFile, match="not UTF-8"):
        load_json(b'["\xff"]', "x")


def test_walk_refuses_1500_levels_without_recursing(tmp_path):
    path = tmp_path / "sub"
    deep_folder(path, 1500)
    try:
        with pytest.raises(RefusedFile, match="nested more than 32 folders deep"):
            list(walk_files(path))
    finally:
        remove_tree(path)


def test_walk_lists_entries_without_following_links(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f.txt").write_text("x")
    (tmp_path / "loop").symlink_to(tmp_path)
    found = {rel for rel, _ in walk_files(tmp_path)}
    assert found == {"a", "a/f.txt", "loop"}


def test_walk_refuses_too_many_entries(tmp_path):
    for i in range(30):
        (tmp_path / f"f{i}").touch()
    with pytest.raises(RefusedFile, match="more than 20 files"):
        list(walk_files(tmp_path, max_entries=20))


def test_clean_text_strips_escapes_and_controls():
    raw = "\x1b[31mred\x1b[0m \x1b]0;owned\x07title \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ a\rb\x00c\u202etxt.exe\x9b2J"
    assert clean_text(raw) == "red title link abc" + "txt.exe"
    assert clean_text("one\ntwo\r\n", keep_newlines=True) == "one\ntwo\n"
    assert clean_text("one\ntwo") == "one two"
    assert clean_text("x" * 50, limit=10) == "x" * 9 + "…"


def test_a_socket_is_refused(tmp_path):
    path = tmp_path / "s.json"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        with pytest.raises(RefusedFile, match="is a socket"):
            read_bytes(path)
