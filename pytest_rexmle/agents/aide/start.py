"""Start AIDE (aideml's ``aide`` CLI) under the ReX-MLE contract.

Mapping (aideml 0.2.2 config keys, given as ``key=value`` arguments):
  data_dir=$REXMLE_DATA_DIR (symlinked, not copied: copy_data=False, preprocess_data=False),
  desc_file=<description.md + instructions + where to write>, log_dir/workspace_dir under
  $REXMLE_WORKSPACE/aide, agent.steps (step limit), agent.code.model / agent.feedback.model,
  exec.timeout (per script), generate_report=False. The wall-clock limit is enforced here: AIDE is
  interrupted before the harness's hard limit, leaving time to collect the submission.

AIDE's generated programs run in <workspace_dir>/<n>-rexmle with ./input (the data) and ./working, and
save ``./working/submission.csv`` — overwritten by every node. So at the end the best node's program
(logs/<n>-rexmle/best_solution.py) is run once more to regenerate the best submission, which is then
copied with every file it refers to into $REXMLE_SUBMISSION_DIR; if that fails the last one is used.
API keys (OPENAI_API_KEY, ANTHROPIC_API_KEY, OPENROUTER_API_KEY, GEMINI_API_KEY) and OPENAI_BASE_URL
come from the environment; with OPENAI_BASE_URL set, a non-OpenAI model name goes through the
chat-completions API of that server.
"""

from __future__ import annotations

import shutil
import sys

from rexmle_adapter import (
    Contract,
    export_submission,
    has_submission,
    log,
    newest,
    parse,
    run_with_deadline,
    scrub_secrets,
    write_description,
)

FLAGS = {"model": "o4-mini", "feedback_model": "", "steps": 20, "exec_timeout": 0, "k_fold": 5}

WHERE = """\
Your program runs in a folder that holds `./input` (the public data above, read-only) and `./working`.
Save `submission.csv` in `./working` (columns and ids as in `./input/sample_submission.csv`) and write
every prediction file it refers to under `./working` as well, naming it in the CSV by its path relative
to `./working` (for example `predictions/case_0001.nii.gz`). At the end the harness copies
`submission.csv` and those files into the graded submission folder. To check the format, run
`rexmle validate --submission ./working`.
"""


def main(argv: list[str]) -> int:
    args = parse(argv, FLAGS)
    contract = Contract.from_env()
    root = contract.workspace / "aide"
    desc = write_description(contract, root, WHERE)
    exec_timeout = args.exec_timeout or max(60, min(32400, int(contract.time_limit * 0.375)))
    cmd = [shutil.which("aide") or "aide", f"data_dir={contract.data}", f"desc_file={desc}",
           f"log_dir={root / 'logs'}", f"workspace_dir={root / 'workspaces'}", "exp_name=rexmle",
           "copy_data=False", "preprocess_data=False", "generate_report=False",
           f"agent.steps={args.steps}", f"agent.k_fold_validation={args.k_fold}",
           f"agent.code.model={args.model}", f"agent.feedback.model={args.feedback_model or args.model}",
           f"exec.timeout={exec_timeout}"]
    code = run_with_deadline(cmd, contract.agent_budget(), cwd=root)
    log(f"aide ended with {'the deadline' if code is None else f'exit code {code}'}")
    exp_ws = newest(list((root / "workspaces").glob("*-rexmle")))
    exp_log = newest(list((root / "logs").glob("*-rexmle")))
    exported = has_submission(contract.submission)
    if not exported and exp_ws is not None:
        last = exp_ws / "working" / "submission.csv"
        fallback = exp_ws / "last_submission.csv"
        if last.is_file():
            shutil.copy2(last, fallback)
        best = exp_log / "best_solution.py" if exp_log else None
        if best is not None and best.is_file() and contract.remaining() > 30:
            last.unlink(missing_ok=True)
            rerun = run_with_deadline([sys.executable, str(best)], contract.remaining() - 15, cwd=exp_ws)
            log(f"best solution re-run ended with {rerun}")
        exported = export_submission(last, contract.submission) or \
            export_submission(fallback, contract.submission, files_base=last.parent)
    scrub_secrets(root / "logs")
    if not exported:
        log("AIDE left no submission.csv")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
