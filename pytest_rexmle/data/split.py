"""The deterministic train/test split, shared by preparers and synthetic twins."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..jsonfile import write_json_atomic

SPLIT_RULE = "sorted-ids/RandomState(42)/ceil(n/5) test"


def split_ids(case_ids: Iterable[str]) -> tuple[list[str], list[str]]:
    """(train, test), each sorted; ids are strings sorted by code point, test = ceil(n/5)."""
    ids = list(case_ids)
    if len(set(ids)) != len(ids):
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        raise ValueError(f"two raw files map to the same case id: {dupes[:5]}")
    ids = sorted(ids)
    n = len(ids)
    n_test = (n + 4) // 5
    perm = np.random.RandomState(42).permutation(n)
    test = sorted(ids[i] for i in perm[:n_test])
    train = sorted(ids[i] for i in perm[n_test:])
    return train, test


def write_split(private_dir: Path, train: list[str], test: list[str], rule: str = SPLIT_RULE) -> None:
    write_json_atomic(private_dir / "split.json",
                      {"rule": rule, "n": len(train) + len(test), "train": sorted(train), "test": sorted(test)})
