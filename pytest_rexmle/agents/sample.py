"""The ``sample`` agent: submits the task's trivial baseline, the floor every report should show.

It runs inside the runtime like any other agent (so it exercises the contract) and uses only the
public data it is given.
"""

from __future__ import annotations

import sys

from .base import Agent, AgentContext


class SampleAgent(Agent):
    def command(self, ctx: AgentContext) -> list[str]:
        return [sys.executable, "-m", "pytest_rexmle.agents.sample_main"]


def main() -> int:
    import os
    from pathlib import Path

    from ..graders.base import load_grader
    from ..task import get_task

    task = get_task(os.environ["REXMLE_TASK"])
    public, submission = Path(os.environ["REXMLE_DATA_DIR"]), Path(os.environ["REXMLE_SUBMISSION_DIR"])
    print(f"sample agent: writing the baseline submission for {task.id} into {submission}", flush=True)
    load_grader(task).write_baseline(public, submission)
    return 0
