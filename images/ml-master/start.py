"""Start ML-Master under the ReX-MLE contract.

ML-Master is launched like its own run.sh does: ``python main_mcts.py key=value ...`` (OmegaConf overrides
of utils/config_mcts.yaml) with data_dir, desc_file, exp_name, log_dir, workspace_dir, start_cpu_id,
cpu_number, agent.code.{model,base_url,api_key}, agent.feedback.{model,base_url,api_key},
agent.steps (step limit), agent.time_limit, exec.timeout, agent.steerable_reasoning=false (closed models
have no raw completions endpoint) and agent.check_format=false (its format server is MLE-bench's; our
validator is `rexmle validate`). TIME_LIMIT / STEP_LIMIT are exported as its run.sh does.

Keys: the coding and feedback endpoints default to $OPENAI_BASE_URL (else api.openai.com) and
$OPENAI_API_KEY; a deepseek-* coding model uses $DEEPSEEK_API_KEY / $DEEPSEEK_BASE_URL when set. ML-Master
saves its config (keys included) into its log folder, so the keys are scrubbed from it at the end.

Its best submission is <workspace>/<n>-rexmle/best_submission/submission.csv (a copy of
submission/submission_<node>.csv); prediction files are taken from ./submission/ where the programs
write them.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rexmle_adapter import (Contract, export_submission, has_submission, log, newest,  # noqa: E402
                            run_with_deadline, scrub_secrets, write_description)

HOME = Path(os.environ.get("ML_MASTER_HOME", "/opt/ml-master"))
WHERE = """\
Your program runs in a folder that holds `./input` (the public data above, read-only), `./working` and
`./submission`. Save `submission.csv` in `./submission/` (columns and ids as in
`./input/sample_submission.csv`) and write every prediction file it refers to under `./submission/` too,
naming it in the CSV by its path relative to `./submission/` (for example `predictions/case_0001.nii.gz`).
The harness copies the best submission and those files into the graded submission folder.
"""


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Start ML-Master under the ReX-MLE contract")
    p.add_argument("--model", default="deepseek-r1")
    p.add_argument("--feedback-model", default="gpt-4o-2024-08-06")
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--parallel", type=int, default=3)
    p.add_argument("--exec-timeout", type=int, default=None)
    return p.parse_args(argv)


def endpoint(model: str) -> tuple[str, str]:
    env = os.environ
    if model.startswith("deepseek") and env.get("DEEPSEEK_API_KEY"):
        return env.get("DEEPSEEK_BASE_URL", "https://api.deepseek.com/v1"), env["DEEPSEEK_API_KEY"]
    return env.get("OPENAI_BASE_URL", "https://api.openai.com/v1"), env.get("OPENAI_API_KEY", "")


def format_time(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}hrs {(s % 3600) // 60}mins {s % 60}secs"


def command(contract: Contract, args: argparse.Namespace, root: Path, desc: Path, budget: float) -> list[str]:
    code_url, code_key = endpoint(args.model)
    fb_url, fb_key = endpoint(args.feedback_model)
    exec_timeout = args.exec_timeout or max(60, min(32400, int(contract.time_limit * 0.375)))
    return [sys.executable, str(HOME / "main_mcts.py"), f"data_dir={contract.data}", f"desc_file={desc}",
            "exp_name=rexmle", f"log_dir={root / 'logs'}", f"workspace_dir={root / 'workspaces'}",
            "copy_data=False", "preprocess_data=False", "start_cpu_id=0", f"cpu_number={os.cpu_count() or 1}",
            f"agent.steps={args.steps}", f"agent.time_limit={int(budget)}",
            f"agent.code.model={args.model}", f"agent.code.base_url={code_url}", f"agent.code.api_key={code_key}",
            f"agent.feedback.model={args.feedback_model}", f"agent.feedback.base_url={fb_url}",
            f"agent.feedback.api_key={fb_key}", "agent.steerable_reasoning=false", "agent.check_format=false",
            "agent.save_all_submission=true", f"agent.search.parallel_search_num={args.parallel}",
            f"exec.timeout={exec_timeout}"]


def collect(root: Path, submission: Path) -> bool:
    """The best node's submission, else the newest saved one; prediction files from ./submission/."""
    exp_ws = newest(list((root / "workspaces").glob("*-rexmle")))
    if exp_ws is None:
        return False
    files = exp_ws / "submission"
    if export_submission(exp_ws / "best_submission" / "submission.csv", submission, files_base=files):
        return True
    latest = newest(list(files.glob("submission_*.csv")))
    return latest is not None and export_submission(latest, submission, files_base=files)


def main(argv: list[str]) -> int:
    args = parse(argv)
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
