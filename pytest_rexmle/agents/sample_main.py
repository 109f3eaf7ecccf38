"""The sample agent's program, run inside its sandbox as ``python -m pytest_rexmle.agents.sample_main``.

It imports only what writing the task's baseline needs (the task, its grader), not the agent
interface: it starts once per benchmark item, so every import here is paid twenty times a session.
"""

from __future__ import annotations

import os
from pathlib import Path


def main() -> int:
    from ..graders.base import load_grader
    from ..task import get_task

    task = get_task(os.environ["REXMLE_TASK"])
    public, submission = Path(os.environ["REXMLE_DATA_DIR"]), Path(os.environ["REXMLE_SUBMISSION_DIR"])
    print(f"sample agent: writing the baseline submission for {task.id} into {submission}", flush=True)
    load_grader(task).write_baseline(public, submission)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
