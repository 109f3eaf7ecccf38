"""The instructions file every agent receives: what to do, where things are, how to check its work."""

from __future__ import annotations

from ..task import Task


def render_instructions(task: Task, paths: dict[str, str], time_limit: float) -> str:
    hours = time_limit / 3600
    return f"""# ReX-MLE task: {task.paper_name} ({task.id})

You are solving a medical-imaging competition end to end. Read the task description first:
`{paths['data']}/description.md`.

## Where things are
- Public data (read-only): `{paths['data']}` — training inputs and labels, test inputs,
  `sample_submission.csv` (the submission format with the expected test ids).
- Your workspace (read-write, scratch space, also your working directory): `{paths['workspace']}`.
- Your submission folder (read-write, graded at the end): `{paths['submission']}`.
  Put `submission.csv` there plus every prediction file it refers to, with paths relative to that folder.
- Environment variables carry the same facts: REXMLE_TASK, REXMLE_DATA_DIR, REXMLE_WORKSPACE,
  REXMLE_SUBMISSION_DIR, REXMLE_INSTRUCTIONS, REXMLE_TIME_LIMIT, CUDA_VISIBLE_DEVICES.

## Budget
You have {time_limit:.0f} seconds ({hours:.2f} h) of wall-clock time. At the limit every process of yours is
killed and the run counts as a FAIL, so write a valid submission early and improve it.

## Checking your submission
Run `rexmle validate --submission {paths['submission']}` (also on your PATH as `rexmle-validate`; a small
standard-library client that asks the benchmark's gateway at $REXMLE_VALIDATE_URL, so it works with any
Python). It checks the format against the public test ids and test inputs — never against the answers —
and prints the first problem it finds. The metric definitions are in the description.

## Rules
- Train on the public data given here; public pre-trained weights and public external datasets are
  allowed, the challenge's own test answers are not (they are not available to you here either).
- An invalid or missing submission scores 0.
"""
