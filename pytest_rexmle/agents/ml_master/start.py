"""Start ML-Master under the ReX-MLE contract.

ML-Master (sjtu-sai-agents/ML-Master, commit pinned in the Dockerfile) is launched like its own run.sh
does: ``python main_mcts.py key=value ...`` (OmegaConf overrides of utils/config_mcts.yaml) with
dataset_dir, data_dir, desc_file, exp_name, log_dir, workspace_dir, copy_data, preprocess_data,
start_cpu_id, cpu_number, agent.code.{model,base_url,api_key}, agent.feedback.{model,base_url,api_key},
agent.steps, agent.time_limit, agent.search.parallel_search_num, exec.timeout,
agent.steerable_reasoning=false (that mode needs a raw ``completions`` endpoint with DeepSeek/Qwen chat
templates) and agent.check_format=false. check_format would POST each node's submission to its MLE-bench
grading server (grading_server.py, hard-wired to http://127.0.0.1:5001/validate, answering from
mlebench's registry); ReX-MLE's validator is `rexmle validate` / $REXMLE_VALIDATE_URL, which the task
description tells the agent's programs about, so the server is not started and the check is off.

How it calls the models: the coding model through chat completions with ``stream: true`` (a ``gpt-5*``
model through the Responses API instead), the feedback model through chat completions with the
``submit_review`` tool forced. Its feedback model must be an OpenAI ``gpt-*`` model or a Qwen/DeepSeek
one (``backend.determine_provider``); anything else fails on the first review, so it is refused here.

Keys: the coding and feedback endpoints default to $OPENAI_BASE_URL (else api.openai.com) and
$OPENAI_API_KEY; a deepseek-* coding model uses $DEEPSEEK_API_KEY / $DEEPSEEK_BASE_URL when set. ML-Master
saves its config (keys included) as <log_dir>/<exp_name>/config_mcts.yaml, so keys are scrubbed at the end.

Folders: <workspace_dir>/<exp_name>/ holds input/ (the data, symlinked), working/, submission/
(each node's submission.csv renamed by ML-Master to submission_<node id>.csv) and best_submission/
(the best node's, as submission.csv). Prediction files are taken from ./submission/ where the programs
write them. Once agent.steps nodes exist ML-Master logs its final solution tree and fails doing so
(main_mcts.journal_to_string_tree formats the virtual root's metric, None: a TypeError, exit status 1),
so its exit status says nothing: the best submission is collected whatever it is.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

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

HOME = Path(os.environ.get("ML_MASTER_HOME", "/opt/ml-master"))
FLAGS = {"model": "deepseek-r1", "feedback_model": "gpt-4o-2024-08-06", "steps": 500, "parallel": 3,
         "exec_timeout": 0}
EXP = "rexmle"  # exp_name: its folders are <log_dir>/rexmle/ and <workspace_dir>/rexmle/
WHERE = """\
Your program runs in a folder that holds `./input` (the public data above, read-only), `./working` and
`./submission`. Save `submission.csv` in `./submission/` (columns and ids as in
`./input/sample_submission.csv`) and write every prediction file it refers to under `./submission/` too,
naming it in the CSV by its path relative to `./submission/` (for example `predictions/case_0001.nii.gz`).
The harness copies the best submission and those files into the graded submission folder.
"""


def endpoint(model: str) -> tuple[str, str]:
    env = os.environ
    if model.startswith("deepseek") and env.get("DEEPSEEK_API_KEY"):
        return env.get("DEEPSEEK_BASE_URL", "https://api.deepseek.com/v1"), env["DEEPSEEK_API_KEY"]
    return env.get("OPENAI_BASE_URL", "https://api.openai.com/v1"), env.get("OPENAI_API_KEY", "")


def format_time(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}hrs {(s % 3600) // 60}mins {s % 60}secs"


def cpus() -> tuple[int, int]:
    """ML-Master pins each of its parallel runs to cpus start_cpu_id .. start_cpu_id + cpu_number - 1
    (os.sched_setaffinity): the first and the count of the cpus this container may use."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return 0, os.cpu_count() or 1
    first = allowed[0]
    run = 1
    while run < len(allowed) and allowed[run] == first + run:
        run += 1
    return first, run


def feedback_model_ok(model: str) -> bool:
    """ML-Master's backend.determine_provider: gpt-* goes to OpenAI, qwen/deepseek to its Qwen backend."""
    return model.startswith("gpt-") or "qwen" in model or "Qwen" in model or "deepseek" in model


def command(contract: Contract, args: argparse.Namespace, root: Path, desc: Path, budget: float) -> list[str]:
    code_url, code_key = endpoint(args.model)
    fb_url, fb_key = endpoint(args.feedback_model)
    exec_timeout = args.exec_timeout or max(60, min(32400, int(contract.time_limit * 0.375)))
    first_cpu, n_cpus = cpus()
    parallel = max(1, min(args.parallel, n_cpus))  # it refuses more parallel runs than cpus
    return [sys.executable, str(HOME / "main_mcts.py"), f"dataset_dir={contract.data}",
            f"data_dir={contract.data}", f"desc_file={desc}", f"exp_name={EXP}", f"log_dir={root / 'logs'}",
            f"workspace_dir={root / 'workspaces'}", "copy_data=False", "preprocess_data=False",
            f"start_cpu_id={first_cpu}", f"cpu_number={n_cpus}",
            f"agent.steps={args.steps}", f"agent.time_limit={int(budget)}",
            f"agent.code.model={args.model}", f"agent.code.base_url={code_url}", f"agent.code.api_key={code_key}",
            f"agent.feedback.model={args.feedback_model}", f"agent.feedback.base_url={fb_url}",
            f"agent.feedback.api_key={fb_key}", "agent.steerable_reasoning=false", "agent.check_format=false",
            "agent.save_all_submission=true", f"agent.search.parallel_search_num={parallel}",
            f"exec.timeout={exec_timeout}"]


def collect(root: Path, submission: Path) -> bool:
    """The best node's submission, else the newest saved one; prediction files from ./submission/."""
    exp_ws = root / "workspaces" / EXP
    files = exp_ws / "submission"
    if export_submission(exp_ws / "best_submission" / "submission.csv", submission, files_base=files):
        return True
    latest = newest(list(files.glob("submission_*.csv")))
    return latest is not None and export_submission(latest, submission, files_base=files)


def main(argv: list[str]) -> int:
    args = parse(argv, FLAGS)
    if not feedback_model_ok(args.feedback_model):
        log(f"ML-Master's feedback model must be an OpenAI gpt-* model or a Qwen/DeepSeek one, not "
            f"{args.feedback_model!r} (its backend.determine_provider refuses anything else)")
        return 2
    contract = Contract.from_env()
    root = contract.workspace / "ml-master"
    desc = write_description(contract, root, WHERE)
    budget = contract.agent_budget()
    env = {**os.environ, "TIME_LIMIT": format_time(budget), "STEP_LIMIT": str(args.steps)}
    code = run_with_deadline(command(contract, args, root, desc, budget), budget, cwd=root, env=env)
    log(f"ML-Master ended with {'the deadline' if code is None else f'exit code {code}'}")
    ok = has_submission(contract.submission) or collect(root, contract.submission)
    scrub_secrets(root / "logs")
    scrub_secrets(root / "workspaces")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
