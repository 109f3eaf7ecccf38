"""``POST /rexmle/validate``: the harness's own submission validator, run for the agent on its run's
submission folder, against public data only, in a worker process with a time-out.

Why a worker: validation decodes agent-written images; a slow or huge submission must cost the agent
its own time, never stall the gateway or another run. Why here: the agent then needs no harness code
(and no harness interpreter) inside its sandbox, only ``validate_client.py``.

Run as a module, this file is that worker: ``python -m pytest_rexmle.gateway.validation TASK PUBLIC SUBMISSION``
prints one JSON verdict.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

#: variables the worker does not inherit: it reads agent files and needs no credentials
_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")


def _worker_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not any(m in k.upper() for m in _SECRET_MARKERS)}


def validate_submission(task_id: str, public_dir: Path | None, submission_dir: Path, timeout: float) -> dict:
    """The verdict ``{ok, problems, warnings, task, cases, checked_against, seconds}``; never raises."""
    started = time.monotonic()
    verdict = {"ok": False, "problems": [], "warnings": [], "task": task_id, "cases": None,
               "checked_against": "public data only (never the answers)"}
    if public_dir is None or not Path(public_dir).is_dir():
        verdict["problems"] = ["the gateway has no public data for this run, so it cannot validate"]
        return verdict
    if not Path(submission_dir).is_dir():
        verdict["problems"] = ["the run's submission folder does not exist"]
        return verdict
    cmd = [sys.executable, "-m", "pytest_rexmle.gateway.validation", task_id, str(public_dir), str(submission_dir)]
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout, env=_worker_env(),
                              stdin=subprocess.DEVNULL, cwd="/")
        verdict.update(json.loads(proc.stdout.decode().strip().splitlines()[-1]))
    except subprocess.TimeoutExpired:
        verdict["problems"] = [f"validation did not finish within {timeout:g} s"]
    except (ValueError, IndexError):
        # start-up: keeps its imports out of the validation worker
        from ..agent_output import clean_text

        tail = clean_text(proc.stderr.decode("utf-8", "replace")[-500:], limit=500)
        verdict["problems"] = [f"the validator failed (exit {proc.returncode}): {tail}"]
    verdict["seconds"] = round(time.monotonic() - started, 3)
    return verdict


def _main(argv: list[str]) -> int:
    # start-up: these (pydantic among them) load in the worker only, never with the gateway
    from ..agent_output import clean_text
    from ..errors import InvalidSubmission
    from ..graders.base import load_grader
    from ..medimage.header_notes import collecting
    from ..task import get_task

    task_id, public, submission = argv
    task = get_task(task_id)
    try:
        with collecting() as notes:
            table = load_grader(task).validate(Path(submission), Path(public))
    except InvalidSubmission as exc:
        print(json.dumps({"ok": False, "problems": [clean_text(str(exc), limit=2000)], "task": task.id}))
        return 0
    # valid, but with headers unlike the inputs': scored on the answers' grid, said as warnings (as rexmle validate)
    warnings = [clean_text(note, limit=2000) for note in notes.messages()][:20]
    print(json.dumps({"ok": True, "problems": [], "warnings": warnings, "task": task.id, "cases": len(table.ids)}))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
