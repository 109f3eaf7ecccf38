"""Start R&D-Agent's data-science loop under the ReX-MLE contract.

R&D-Agent reads a custom competition from ``$DS_LOCAL_DATA_PATH/<competition>/`` (data files plus
``description.md``) when ``DS_SCEN=rdagent.scenarios.data_science.scen.DataScienceScen`` and
``DS_IF_USING_MLE_DATA=False``; it is started as ``rdagent data_science --competition <task>
[--loop_n N]``. The competition folder is built in the workspace from symlinks to the read-only data,
with description.md replaced by the full prompt (description + instructions + where to write).
Generated code runs in the conda environment "kaggle" (``DS_CODER_COSTEER_ENV_TYPE=conda``: no Docker
inside our container); the image aliases it to its own Python. The model is ``CHAT_MODEL`` (LiteLLM
names); keys and ``OPENAI_BASE_URL`` (as ``OPENAI_API_BASE``) come from the environment. Logs go to
``LOG_TRACE_PATH`` and experiment workspaces to ``WORKSPACE_PATH``, both under the run's workspace.

The final submission is the SOTA experiment's workspace (read from R&D-Agent's log when its log
reader is importable), else the newest workspace with a submission.csv; its prediction files are
resolved relative to that workspace.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rexmle_adapter import (Contract, export_submission, has_submission, log, newest,  # noqa: E402
                            run_with_deadline, scrub_secrets, task_description)

WHERE = """\
Your code runs in its own workspace folder. Save `submission.csv` there (columns and ids as in
`sample_submission.csv`) and write every prediction file it refers to under that folder as well, naming
it in the CSV by its path relative to the folder (for example `predictions/case_0001.nii.gz`). The
harness copies the best experiment's submission and those files into the graded submission folder.
"""


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Start R&D-Agent under the ReX-MLE contract")
    p.add_argument("--model", default="gpt-4o")
    p.add_argument("--embedding-model", default="text-embedding-3-small")
    p.add_argument("--loop-n", type=int, default=None)
    return p.parse_args(argv)


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
    env.update({"DS_SCEN": "rdagent.scenarios.data_science.scen.DataScienceScen",
                "DS_LOCAL_DATA_PATH": str(root / "ds_data"), "DS_IF_USING_MLE_DATA": "False",
                "DS_CODER_ON_WHOLE_PIPELINE": "True", "DS_CODER_COSTEER_ENV_TYPE": "conda",
                "CHAT_MODEL": args.model, "EMBEDDING_MODEL": args.embedding_model,
                "LOG_TRACE_PATH": str(root / "log"), "WORKSPACE_PATH": str(root / "workspace")})
    if os.environ.get("OPENAI_BASE_URL") and not os.environ.get("OPENAI_API_BASE"):
        env["OPENAI_API_BASE"] = os.environ["OPENAI_BASE_URL"]
    return env


def command(contract: Contract, args: argparse.Namespace) -> list[str]:
    argv = [shutil.which("rdagent") or "rdagent", "data_science", "--competition", contract.task]
    if args.loop_n:
        argv += ["--loop_n", str(args.loop_n)]
    return argv


def sota_workspace(log_path: Path) -> Path | None:
    """The SOTA experiment's workspace from R&D-Agent's own log (best effort: its API moves)."""
    try:
        from rdagent.log.storage import FileStorage

        sota = None
        for msg in FileStorage(log_path).iter_msg():
            if "SOTA experiment" in str(getattr(msg, "tag", "")) and getattr(msg, "content", None) is not None:
                sota = msg.content
        path = sota.experiment_workspace.workspace_path if sota is not None else None
        return Path(path) if path else None
    except Exception as exc:  # not importable here, or another log format
        log(f"no SOTA experiment from the log ({exc.__class__.__name__}); using the newest workspace")
        return None


def collect(root: Path, submission: Path) -> bool:
    ws = sota_workspace(root / "log")
    if ws is None or not (ws / "submission.csv").is_file():
        csv = newest(list((root / "workspace").glob("*/submission.csv")))
        ws = csv.parent if csv else None
    return ws is not None and export_submission(ws / "submission.csv", submission)


def main(argv: list[str]) -> int:
    args = parse(argv)
    contract = Contract.from_env()
    root = contract.workspace / "rd-agent"
    competition_folder(contract, root)
    code = run_with_deadline(command(contract, args), contract.agent_budget(), cwd=root,
                             env=environment(contract, args, root))
    log(f"R&D-Agent ended with {'the deadline' if code is None else f'exit code {code}'}")
    ok = has_submission(contract.submission) or collect(root, contract.submission)
    scrub_secrets(root / "log")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
