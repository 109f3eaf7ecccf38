"""The ``sample`` agent: submits the task's trivial baseline, the floor every report should show.

It runs inside the runtime like any other agent (so it exercises the contract: the sandbox, the uid,
the submission folder), but nothing it runs there needs the harness: the host-side :meth:`setup`
writes the baseline (the task grader's ``write_baseline``, from the public data only) into the
workspace, and the command inside is a plain shell copy into the submission folder. So it works with
any interpreter, in any image, for a uid that cannot reach the harness's venv.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import RexmleError
from ..graders.base import load_grader
from .base import Agent, AgentContext

#: the workspace folder the host writes the baseline into
BASELINE = "sample-baseline"
COPY = ('echo "sample agent: copying the baseline submission for $REXMLE_TASK into $REXMLE_SUBMISSION_DIR '
        '(GPUs: ${CUDA_VISIBLE_DEVICES:-none})" && '
        f'cp -R "$REXMLE_WORKSPACE/{BASELINE}/." "$REXMLE_SUBMISSION_DIR/"')


class SampleAgent(Agent):
    #: ``delay=SECONDS`` waits before submitting: a slow agent, for exercising schedulers and resume
    known_options = ("delay",)
    #: it copies a baseline the host wrote: it runs even where only Landlock as your own uid is available
    trusted = True

    def __init__(self, name: str, options: dict[str, str]) -> None:
        super().__init__(name, options)
        delay = options.get("delay", "0")
        try:
            self.delay = float(delay)
        except ValueError:
            self.delay = -1.0
        if not 0 <= self.delay <= 86400:
            raise RexmleError(f"agent {name!r}: delay must be a number of seconds from 0 to 86400, got {delay!r}")

    def setup(self, ctx: AgentContext) -> Path | None:
        baseline = ctx.workspace / BASELINE
        baseline.mkdir(exist_ok=True)
        load_grader(ctx.task).write_baseline(ctx.public, baseline)
        return None

    def command(self, ctx: AgentContext) -> list[str]:
        wait = f"sleep {self.delay:g} && " if self.delay else ""
        return ["/bin/sh", "-c", wait + COPY]
