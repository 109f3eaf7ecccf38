"""Nothing downloaded is believed: what ``rexmle report`` checks in a session report before merging it.

A session report is a file anyone can write: a forged one can claim 100 % on every task, hide the unsafe
settings it states a few lines above, claim an H100, or be a 1 GiB or 200,000-deep JSON meant to exhaust the
reader. So ``rexmle report``:

* reads each report bounded (``MAX_REPORT_BYTES``, ``MAX_DEPTH``) and validated: a clean error, never a
  traceback or a whole gigabyte in memory;
* re-derives what the file itself allows (:func:`rederive`): each OK result's positions and percentile from
  its metrics against the shipped leaderboard, the score and FAIL count from the rows, and the disclosure's
  unsafe options and network from the settings recorded in the same file. Each difference from what the file
  claimed is kept as a note;
* marks each session **verified** only when ``--verify`` re-graded every graded submission it names against the
  local private answers (:mod:`.verify`), with the same metrics and the same file hashes; every other session
  is **unverified**, and says so next to its row, its score and its hardware in every output.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

from ..agent_output import read_json
from ..documents import RENAMED_SCHEMAS, number, upgrade
from ..errors import RexmleError
from ..scoring.ranking import RankingError, overall_score, rank
from ..scoring.result import OK
from ..task import registry
from .disclosure import unsafe_options
from .model import count_fails, percentile_of

#: a real session report is tens of kB (20 tasks; tracebacks and per-run compute records included)
MAX_REPORT_BYTES = 32 * 1024 * 1024
#: a session report nests about 8 levels (report > tasks > record > metrics; compute > runs > run > gpus)
MAX_DEPTH = 64
UNVERIFIED = "unverified"
VERIFIED = "verified"
REFUSED = "refused"
NOT_REGRADED = "not re-graded: `rexmle report --verify` re-grades the submissions against the local private answers"
#: relative tolerance between a claimed and a re-derived number
TOLERANCE = 1e-9


class ReportRefused(ValueError):
    """A report file ``rexmle report`` will not read (too big, too deep, not a JSON object); says why."""


def read_report(path: Path, what: str = "report") -> dict:
    """A downloaded JSON document, read bounded: at most ``MAX_REPORT_BYTES`` and ``MAX_DEPTH`` levels."""
    try:
        doc = read_json(Path(path).resolve(), MAX_REPORT_BYTES, f"{what} {path}", max_depth=MAX_DEPTH)
    except RexmleError as exc:
        raise ReportRefused(str(exc)) from None
    if not isinstance(doc, dict):
        raise ReportRefused(f"{what} {path} is not a JSON object")
    return upgrade(doc) if doc.get("schema") in RENAMED_SCHEMAS else doc


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=TOLERANCE)


def _rerank(rec: dict, notes: list[str]) -> None:
    """An OK record's positions, mean position and percentile, from its metrics against the shipped leaderboard."""
    cid = rec["task_id"]
    try:
        task = registry().get(cid)
        metrics = {str(k): float(number(v)) for k, v in (rec.get("metrics") or {}).items()}
        ranking = rank(task, metrics)
    except (RexmleError, RankingError, TypeError, ValueError) as exc:
        notes.append(f"{cid}: an OK result that cannot be ranked from its metrics ({exc}): counted as FAIL")
        rec.update(status="invalid", percentile=0.0, positions=None, mean_position=None)
        return
    claimed = rec.get("percentile")
    if not isinstance(claimed, (int, float)) or not _close(float(claimed), ranking.percentile):
        notes.append(f"{cid}: percentile {claimed!r} claimed, {ranking.percentile!r} from its metrics")
    rec.update(percentile=ranking.percentile, mean_position=ranking.mean_position, positions=dict(ranking.positions))


def _disclosure(doc: dict, notes: list[str]) -> None:
    """The unsafe options and network the settings of the same file state, whatever the disclosure says."""
    settings = mapping_of(doc.get("settings"))
    disclosure = dict(mapping_of(doc.get("disclosure")))
    claimed = [str(u) for u in disclosure.get("unsafe") or []] if isinstance(disclosure.get("unsafe"), list) else []
    derived = unsafe_options(settings)
    hidden = [u for u in derived if u not in claimed]
    if hidden:
        notes.append("the disclosure left out what its own settings state: " + "; ".join(u.split(":", 1)[0]
                                                                                        for u in hidden))
    disclosure["unsafe"] = derived + [u for u in claimed if u not in derived]
    network = settings.get("network")
    if network and disclosure.get("network") != network:
        notes.append(f"the disclosure says network {disclosure.get('network')!r}, its settings {network!r}")
        disclosure["network"] = network
    doc["disclosure"] = disclosure


def rederive(doc: dict) -> dict:
    """A copy of a validated session report with every number the file allows recomputed (see the module
    docstring); ``trust`` holds the verdict (``unverified`` until :mod:`.verify` re-grades it) and the notes."""
    out = copy.deepcopy(doc)
    notes: list[str] = []
    records = {}
    for rec in out.get("tasks") or []:
        if rec.get("status") == OK:
            _rerank(rec, notes)
        records[rec["task_id"]] = rec
    selected = list(out.get("selected") or [])
    skipped = set(out.get("skipped") or ())
    score = overall_score(percentile_of(records.get(c)) for c in selected)
    n_fail = count_fails(selected, records, skipped)
    if not _close(float(out.get("score") or 0.0), score):
        notes.append(f"score {out.get('score')!r} claimed, {score!r} from its rows")
    if out.get("n_fail") != n_fail:
        notes.append(f"{out.get('n_fail')!r} FAIL claimed, {n_fail} in its rows")
    out.update(score=score, n_fail=n_fail)
    _disclosure(out, notes)
    out["trust"] = {"status": UNVERIFIED, "why": NOT_REGRADED, "notes": notes}
    return out


def status_of(doc: dict) -> str:
    """``verified``, ``refused`` or ``unverified`` (the default for anything not re-graded here)."""
    status = mapping_of(doc.get("trust")).get("status")
    return str(status) if status in (VERIFIED, REFUSED) else UNVERIFIED


def mapping_of(value: object) -> dict:
    """``value`` when it is a JSON object, else an empty one (a forged file may put anything anywhere)."""
    return value if isinstance(value, dict) else {}
