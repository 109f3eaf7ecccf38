"""Start R&D-Agent's data-science loop (rdagent 1.0.0) under the ReX-MLE contract.

R&D-Agent reads a custom competition from ``$DS_LOCAL_DATA_PATH/<competition>/`` (data files plus
``description.md``) when ``DS_SCEN=rdagent.scenarios.data_science.scen.DataScienceScen`` and
``DS_IF_USING_MLE_DATA=False``; it is started as ``rdagent data_science --competition <task>
--timeout <agent budget>s [--loop-n N]`` (typer spells the options with dashes). The competition folder
is built in the workspace from symlinks to the read-only data, with description.md replaced by the full
prompt (description + instructions + where to write).

Code execution: R&D-Agent runs the code it writes in Docker by default; inside our container it runs it
locally instead (``DS_CODER_COSTEER_ENV_TYPE=conda``): ``python main.py`` under ``strace`` and
``coverage`` in the experiment's workspace folder, with the data linked in as ``./workspace_input``, in
the image's own Python (see agents/rd_agent/Dockerfile). Per-run limits (``DS_DEBUG_TIMEOUT``,
``DS_FULL_TIMEOUT``) are R&D-Agent's defaults (600 s / 3600 s) capped to fit the run's time limit.

LLM: ``CHAT_MODEL`` and ``EMBEDDING_MODEL`` are LiteLLM model names (``gpt-4o``; for a model an
OpenAI-compatible server names itself, ``openai/<name>``); keys and ``OPENAI_BASE_URL`` (also given as
``OPENAI_API_BASE``) come from the environment. LiteLLM's price map is read from its package, not
fetched (``LITELLM_LOCAL_MODEL_COST_MAP``). Logs go to ``LOG_TRACE_PATH`` and experiment workspaces to
``WORKSPACE_PATH``, both under the run's workspace.

The final submission is the workspace of the experiment R&D-Agent itself chose to submit (its
``sota_exp_to_submit`` log record, read with R&D-Agent's own Python by ``rdagent_sota.py``), else the
newest workspace with a submission.csv; its prediction files are resolved relative to that workspace.
R&D-Agent logs its LLM settings, OPENAI_API_KEY included: its output reaches the harness through the
adapter's masking relay, and the key is masked in every file it leaves under the run's workspace
(stars of the same length in its pickled log records, so they still load).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
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
    task_description,
)

HERE = Path(__file__).resolve().parent
RDAGENT_PYTHON = Path(os.environ.get("RDAGENT_HOME", "/opt/rdagent")) / "bin" / "python"
FLAGS = {"model": "gpt-4o", "embedding_model": "text-embedding-3-small", "loop_n": 0}
#: R&D-Agent's own per-run limits (DS_RD_SETTING.debug_timeout / full_timeout)
DEBUG_TIMEOUT, FULL_TIMEOUT = 600, 3600

WHERE = """\
Your code runs in its own workspace folder. Save `submission.csv` there (columns and ids as in
`sample_submission.csv`) and write every prediction file it refers to under that folder as well, naming
it in the CSV by its path relative to the folder (for example `predictions/case_0001.nii.gz`). The
harness copies the best experiment's submission and those files into the graded submission folder.
"""


def competition_folder(contract: Contract, root: Path) -> Path:
    folder = root / "ds_data" / contract.task
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for entry in sorted(contract.data.iterdir()):
        if entry.name != "description.md":
            (folder / entry.name).symlink_to(entry)
    (folder / "description.md").write_text(task_description(contract, WHERE), encoding="utf-8")
    return folder


def environment(contract: Contract, args: argparse.Namespace, root: Path) -> dict[str, str]:
    env = dict(os.environ)
    budget = contract.agent_budget()
    env.update({"DS_SCEN": "rdagent.scenarios.data_science.scen.DataScienceScen",
                "DS_LOCAL_DATA_PATH": str(root / "ds_data"), "DS_IF_USING_MLE_DATA": "False",
                "DS_CODER_ON_WHOLE_PIPELINE": "True", "DS_CODER_COSTEER_ENV_TYPE": "conda",
                "DS_DEBUG_TIMEOUT": str(max(30, min(DEBUG_TIMEOUT, int(budget * 0.1)))),
                "DS_FULL_TIMEOUT": str(max(60, min(FULL_TIMEOUT, int(budget * 0.375)))),
                "CHAT_MODEL": args.model, "EMBEDDING_MODEL": args.embedding_model,
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                "LOG_TRACE_PATH": str(root / "log"), "WORKSPACE_PATH": str(root / "workspace")})
    if os.environ.get("OPENAI_BASE_URL") and not os.environ.get("OPENAI_API_BASE"):
        env["OPENAI_API_BASE"] = os.environ["OPENAI_BASE_URL"]
    return env


def command(contract: Contract, args: argparse.Namespace, budget: float) -> list[str]:
    argv = [shutil.which("rdagent") or "rdagent", "data_science", "--competition", contract.task,
            "--timeout", f"{int(budget)}s"]
    if args.loop_n:
        argv += ["--loop-n", str(args.loop_n)]
    return argv


def sota_workspace(log_path: Path) -> Path | None:
    """The workspace of the experiment R&D-Agent chose to submit, read from its log by its own Python."""
    if not RDAGENT_PYTHON.is_file() or not log_path.is_dir():
        log(f"no R&D-Agent log reader ({RDAGENT_PYTHON}) or no log; using the newest workspace")
        return None
    try:
        proc = subprocess.run([str(RDAGENT_PYTHON), str(HERE / "rdagent_sota.py"), str(log_path)],
                              capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log(f"reading R&D-Agent's log failed ({exc.__class__.__name__}); using the newest workspace")
        return None
    found = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not found:
        log(f"R&D-Agent's log names no experiment to submit ({proc.stderr.strip()[-300:]}); using the newest workspace")
        return None
    log(f"R&D-Agent's experiment to submit: {found[-1]}")
    return Path(found[-1])


def collect(root: Path, submission: Path) -> bool:
    ws = sota_workspace(root / "log")
    if ws is None or not (ws / "submission.csv").is_file():
        csv = newest(list((root / "workspace").glob("*/submission.csv")))
        ws = csv.parent if csv else None
    return ws is not None and export_submission(ws / "submission.csv", submission)


def main(argv: list[str]) -> int:
    args = parse(argv, FLAGS)
    contract = Contract.from_env()
    root = contract.workspace / "rd-agent"
    competition_folder(contract, root)
    budget = contract.agent_budget()
    code = run_with_deadline(command(contract, args, budget), budget, cwd=root, env=environment(contract, args, root))
    log(f"R&D-Agent ended with {'the deadline' if code is None else f'exit code {code}'}")
    ok = has_submission(contract.submission) or collect(root, contract.submission)
    scrub_secrets(root)  # its log, workspaces and files it leaves in its working folder (selector.log)
    if not ok:
        log("R&D-Agent left no submission.csv")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
