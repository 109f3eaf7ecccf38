"""Submission hashes in the session report, and ``rexmle report --verify``: re-grading what a report claims.

Why: a session report states results; only re-grading its submissions against answers this machine holds
proves them. The session writes, per run, the sha256 of every submission file (``submissions`` in
``rexmle-report.json``, with the id of the answers it was graded against); where ``--verify`` looks for the
runs and what makes a session verified, refused or unverified is docs/reading-the-report.md, "Verified and
unverified sessions" (:func:`verify_record` says it in code).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import stat
from pathlib import Path

from ..agent_output import RefusedFile, open_regular, read_json, walk_files
from ..data.synthetic import ensure_synthetic
from ..data.taskdata import prepared_data
from ..documents import number
from ..errors import RexmleError
from ..paths import default_data_dir
from ..scoring.grading import grade_submission
from ..task import registry
from .model import SYNTHETIC, data_kind
from .trust import REFUSED, UNVERIFIED, VERIFIED, mapping_of

#: a submission of a 3D task is a few hundred files; more is refused rather than hashed
MAX_FILES = 20_000
#: a run folder's name as the harness makes them (a time stamp and a number): nothing a glob or a path reads
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
#: a run's result.json is a few kB
MAX_RESULT_JSON = 4 * 1024 * 1024
#: relative tolerance between a claimed metric and its re-grade (the graders are deterministic)
METRIC_TOLERANCE = 1e-9


def submission_digest(folder: Path, answers_id: str | None = None) -> dict | None:
    """``{"files": {relative path: sha256}, "answers_id": str | None}`` for a run's submission folder, or None
    when there is none. Links and special files are not followed (the folder is the agent's)."""
    if not Path(folder).is_dir() or Path(folder).is_symlink():
        return None
    files = {}
    for rel, st in walk_files(Path(folder), max_entries=MAX_FILES, what="the submission"):
        if stat.S_ISREG(st.st_mode):
            files[rel] = _sha256(Path(folder) / rel)
    return {"files": dict(sorted(files.items())), "answers_id": answers_id}


def _sha256(path: Path) -> str:
    fd = open_regular(path, str(path))
    with os.fdopen(fd, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def find_run(rec: dict, report: Path) -> Path | None:
    """The run folder of a record: its own ``run_dir``, else one of that name next to the report."""
    run_dir = rec.get("run_dir")
    if not isinstance(run_dir, str) or not run_dir:
        return None
    name, task = Path(run_dir).name, str(rec["task_id"])
    candidates = [Path(run_dir)]
    if RUN_NAME.fullmatch(name) and RUN_NAME.fullmatch(task):  # both come from the file: no glob, no ".."
        for base in (report.parent, report.parent.parent, report.parent.parent.parent):
            candidates += sorted((base / "runs" / task).glob(f"*/{name}")) + [base / f"{task}__{name}"]
    return next((c for c in candidates if (c / "submission").is_dir()), None)


def _local_answers(task_id: str, doc: dict, data_dir: Path | None):
    """This machine's answers for the kind of data the session was graded on."""
    task = registry().get(task_id)
    if data_kind(doc) == SYNTHETIC:
        seed = (doc.get("settings") or {}).get("seed")
        return task, ensure_synthetic(task, None, seed if isinstance(seed, int) else None)
    return task, prepared_data(task, data_dir or default_data_dir())


def _differs(claimed: dict, regraded: dict, keys: list[str]) -> list[str]:
    out = []
    for key in keys:
        try:
            a, b = float(number(claimed.get(key))), float(regraded[key])
        except (KeyError, TypeError, ValueError):
            out.append(f"{key}: {claimed.get(key)!r} claimed, {regraded.get(key)!r} re-graded")
            continue
        same = (math.isnan(a) and math.isnan(b)) or a == b or math.isclose(a, b, rel_tol=METRIC_TOLERANCE)
        if not same:
            out.append(f"{key}: {a!r} claimed, {b!r} re-graded")
    return out


def verify_record(rec: dict, doc: dict, report: Path, data_dir: Path | None) -> tuple[str, str]:
    """(``verified`` | ``refused`` | ``unverified``, why) for one graded record of a session."""
    cid = rec["task_id"]
    if cid not in registry().ids:
        return UNVERIFIED, f"{cid!r}: not a task of this version"
    run = find_run(rec, report)
    if run is None:
        return UNVERIFIED, f"{cid}: no run folder with a submission (looked for {rec.get('run_dir')!r} and next to the report)"
    if owner := _other_owner(run, rec):
        return REFUSED, f"{cid}: the run folder {run} holds {owner}'s run, not this record's"
    submissions = mapping_of(doc.get("submissions"))
    # keyed as the session report's compute table: task, task@agent (several agents), then -rN (repeats)
    suffix = f"-r{rec.get('repeat')}" if isinstance(doc.get("repeats"), int) and doc["repeats"] > 1 else ""
    stated = submissions.get(f"{cid}@{rec.get('agent')}{suffix}") or submissions.get(f"{cid}{suffix}")
    if not isinstance(stated, dict) or not isinstance(stated.get("files"), dict):
        return UNVERIFIED, f"{cid}: the report states no submission hashes"
    try:
        found = submission_digest(run / "submission")
        task, data = _local_answers(cid, doc, data_dir)
    except (RexmleError, OSError) as exc:
        return UNVERIFIED, f"{cid}: {exc}"
    if found is None or found["files"] != stated["files"]:
        return REFUSED, f"{cid}: the submission in {run} is not the one the report states (its files' sha256 differ)"
    if stated.get("answers_id") != data.answers_id:
        return UNVERIFIED, (f"{cid}: graded against other answers ({stated.get('answers_id')!r}) than this machine's "
                            f"({data.answers_id!r})")
    outcome = grade_submission(task, run / "submission", data.private)
    if outcome.status != "ok" or outcome.metrics is None:
        return REFUSED, f"{cid}: claimed OK, re-graded {outcome.status} ({outcome.reason})"
    diff = _differs(rec.get("metrics") or {}, dict(outcome.metrics), [m.key for m in task.ranking_metrics])
    if diff:
        return REFUSED, f"{cid}: re-graded metrics differ: " + "; ".join(diff)
    return VERIFIED, f"{cid}: re-graded, same metrics"


def _other_owner(run: Path, rec: dict) -> str | None:
    """The agent (name and options key) whose run the folder's ``result.json`` says it is, when that is not
    the record's: a forged report naming another agent's genuine run folder, hashes and all."""
    try:
        result = read_json(run / "result.json", MAX_RESULT_JSON, "result.json", max_depth=32)
    except RefusedFile:
        return None  # a copy without it: the submission's hashes and re-grade still decide
    if not isinstance(result, dict):
        return None
    theirs = (result.get("agent"), result.get("options_key"))
    return None if theirs == (rec.get("agent"), rec.get("options_key")) else f"{theirs[0]} [{theirs[1]}]"


def verify_session(doc: dict, report: Path, data_dir: Path | None = None) -> dict:
    """Re-grade every graded result of a (re-derived) session; its ``trust`` becomes the verdict. Results that
    are not OK claim 0 and need no proof."""
    verdicts = [verify_record(rec, doc, report, data_dir) for rec in doc.get("tasks") or []
                if rec.get("status") == "ok"]
    statuses = {status for status, _ in verdicts}
    status = REFUSED if REFUSED in statuses else UNVERIFIED if UNVERIFIED in statuses or not verdicts else VERIFIED
    why = [text for s, text in verdicts if s != VERIFIED] or [f"{len(verdicts)} graded result(s) re-graded here"]
    trust = dict(doc.get("trust") or {})
    trust.update(status=status, why="; ".join(why) if verdicts else "no graded result to re-grade")
    return {**doc, "trust": trust}
