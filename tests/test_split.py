"""The deterministic split (docs/reference/grading.md: the split)."""

from __future__ import annotations

import json
import random

import pytest

from pytest_rexmle.data.split import SPLIT_RULE, split_ids, write_split


def ids_of(n: int) -> list[str]:
    return [f"case_{i:05d}" for i in range(n)]


@pytest.mark.parametrize("n, n_train, n_test", [
    (25, 20, 5), (50, 40, 10), (56, 44, 12), (92, 73, 19), (125, 100, 25), (205, 164, 41), (250, 200, 50),
    (705, 564, 141), (1101, 880, 221), (1500, 1200, 300),
])
def test_expected_counts(n, n_train, n_test):
    train, test = split_ids(ids_of(n))
    assert (len(train), len(test)) == (n_train, n_test)
    assert set(train).isdisjoint(test)
    assert set(train) | set(test) == set(ids_of(n))
    assert train == sorted(train) and test == sorted(test)


@pytest.mark.parametrize("n, n_test", [(1, 1), (4, 1), (5, 1), (6, 2), (11, 3)])
def test_ceil_of_n_over_five(n, n_test):
    # (n + 4) // 5: 1 -> 1, 4 -> 1, 5 -> 1, 6 -> 2, 11 -> 3
    assert len(split_ids(ids_of(n))[1]) == n_test


def test_membership_by_hand_n10():
    # RandomState(42).permutation(10) = [8, 1, 5, 0, 7, 2, 9, 4, 3, 6]; n_test = 2 -> sorted ids[8], ids[1]
    ids = [f"c{i:02d}" for i in range(10)]
    train, test = split_ids(ids)
    assert test == ["c01", "c08"]
    assert train == ["c00", "c02", "c03", "c04", "c05", "c06", "c07", "c09"]


def test_membership_by_hand_n25():
    # RandomState(42).permutation(25) starts [8, 16, 0, 23, 11, ...]; n_test = 5
    ids = [f"p{i:02d}" for i in range(25)]
    assert split_ids(ids)[1] == ["p00", "p08", "p11", "p16", "p23"]


def test_ids_are_sorted_as_strings_not_numbers():
    # string order: "10" < "100" < "2" < "3" < "9"; RandomState(42).permutation(5) = [1, 4, 2, 0, 3]
    # n_test = 1 -> index 1 of the string-sorted list = "100". (Numeric order would give "3".)
    train, test = split_ids(["9", "10", "3", "100", "2"])
    assert test == ["100"]
    assert train == ["10", "2", "3", "9"]


def test_leading_zeros_are_kept():
    train, test = split_ids(["001", "1", "01"])  # three distinct ids; sorted "001" < "01" < "1"
    assert sorted(train + test) == ["001", "01", "1"]


def test_deterministic_and_order_independent():
    ids = ids_of(205)
    first = split_ids(ids)
    shuffled = ids[:]
    random.Random(7).shuffle(shuffled)
    assert split_ids(shuffled) == first
    assert split_ids(reversed(ids)) == first  # any iterable
    assert split_ids(ids) == first


def test_duplicate_id_fails_loudly():
    with pytest.raises(ValueError, match="case_00003"):
        split_ids(ids_of(10) + ["case_00003"])


def test_write_split(tmp_path):
    train, test = split_ids(ids_of(10))
    write_split(tmp_path, list(reversed(train)), test)
    doc = json.loads((tmp_path / "split.json").read_text())
    assert doc == {"rule": "sorted-ids/RandomState(42)/ceil(n/5) test", "n": 10, "train": train, "test": test}
    assert SPLIT_RULE == doc["rule"]
    assert [p.name for p in tmp_path.iterdir()] == ["split.json"]


def test_write_split_source_rule(tmp_path):
    write_split(tmp_path, ["b", "a"], ["c"], rule="source")
    assert json.loads((tmp_path / "split.json").read_text()) == {"rule": "source", "n": 3, "train": ["a", "b"],
                                                                 "test": ["c"]}


@pytest.mark.parametrize("n", [25, 56, 92, 205, 1101])
def test_matches_sklearn_when_available(n):
    model_selection = pytest.importorskip("sklearn.model_selection")
    ids = sorted(ids_of(n))
    ref_train, ref_test = model_selection.train_test_split(ids, test_size=0.2, random_state=42, shuffle=True)
    train, test = split_ids(ids)
    assert set(test) == set(ref_test)
    assert set(train) == set(ref_train)
