"""Seals on graded results, so that ``--rexmle-resume`` only reports what grading itself produced.

Why: the run folder is reachable by the agent in some set-ups (a non-root harness under Landlock, a
job that escaped its sandbox), and one that rewrites ``result.json`` after grading (``"percentile":
100``) must not be reported by a later resumed session. Grading therefore writes, next to
``result.json``, ``result.json.seal``: an HMAC-SHA256 over the exact bytes of ``result.json``, the run
folder's path and the run's key (the settings that make a result reusable), with a key of 32 random
bytes kept in the cache (``<cache>/.result-key``, mode 0600, a folder no sandbox mounts). Without that
key nobody can make a seal that verifies; copying a sealed result into another run folder, or editing
the key in ``run.json``, breaks the seal too.

A result whose seal is missing or does not verify is never reused: resume warns and runs the task again.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

from ..agent_output import RefusedFile, read_bytes
from ..data.synthetic.secret import cache_secret
from ..jsonfile import write_text_atomic
from ..paths import cache_home

SEAL_SUFFIX = ".seal"
KEY_FILE = ".result-key"
SCHEME = "rexmle-seal/1"
#: result.json is a few kB; the seal is one line
MAX_RESULT_BYTES = 4 * 1024 * 1024
MAX_SEAL_BYTES = 1024


class SealError(Exception):
    """A result's seal is missing, malformed or does not match its content (the message says which)."""


def _key(cache_dir: Path | None) -> bytes:
    return cache_secret(cache_home() if cache_dir is None else Path(cache_dir), KEY_FILE)


def _mac(key: bytes, result_bytes: bytes, run_dir: Path, run_key: dict | None) -> str:
    message = json.dumps({"scheme": SCHEME, "run_dir": str(Path(run_dir).resolve()), "key": run_key,
                          "result_sha256": hashlib.sha256(result_bytes).hexdigest()}, sort_keys=True)
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


def seal_path(result_path: Path) -> Path:
    return Path(result_path).with_name(Path(result_path).name + SEAL_SUFFIX)


def seal_result(result_path: Path, run_key: dict | None, cache_dir: Path | None = None) -> Path:
    """Seal the result file as grading wrote it (call right after writing it); returns the seal's path."""
    result_path = Path(result_path)
    data = read_bytes(result_path, MAX_RESULT_BYTES)
    mac = _mac(_key(cache_dir), data, result_path.parent, run_key)
    return write_text_atomic(seal_path(result_path), f"{SCHEME} {mac}\n")


def verify_result(result_path: Path, run_key: dict | None, cache_dir: Path | None = None) -> bytes:
    """The result file's bytes if its seal verifies; raises :class:`SealError` otherwise."""
    result_path = Path(result_path)
    if not seal_path(result_path).exists():
        raise SealError("no seal (not written by this harness's grading, or written before seals existed)")
    try:
        data = read_bytes(result_path, MAX_RESULT_BYTES)
        seal = read_bytes(seal_path(result_path), MAX_SEAL_BYTES).decode("ascii", "replace").split()
    except (OSError, RefusedFile) as exc:
        raise SealError(f"unreadable: {exc}") from None
    if len(seal) != 2 or seal[0] != SCHEME:
        raise SealError("malformed seal")
    if not hmac.compare_digest(seal[1], _mac(_key(cache_dir), data, result_path.parent, run_key)):
        raise SealError("the seal does not match: result.json, run.json's key or the folder changed after grading")
    return data
