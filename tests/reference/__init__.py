"""The reference data's facts the tests check the package against, shipped with the tests (no skip in a clone).

``reference_data.json`` holds the SHA-256 of each reference file the package carries a copy of, and each
task's metric directions, as the challenge organisers' reference data gave them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

REFERENCE = json.loads((Path(__file__).with_name("reference_data.json")).read_text())


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def reference_sha256(name: str) -> str:
    """The digest of reference file ``name`` (``<reference id>/leaderboard.csv``, ``_common/strategies.json``)."""
    return REFERENCE["sha256"][name]


def metric_directions(reference_id: str) -> dict[str, str]:
    return REFERENCE["metric_directions"][reference_id]
