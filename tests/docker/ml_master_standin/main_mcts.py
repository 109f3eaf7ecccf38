"""A stand-in for ML-Master's entry point, for the end-to-end test only — NOT ML-Master.

GitHub is not reachable where the tests run, so the real ML-Master cannot be cloned into the test image.
This file mimics only the interface the ReX-MLE adapter (images/ml-master/start.py) relies on, as
ML-Master's ``main_mcts.py`` and ``utils/config_mcts.yaml`` define it:

* ``python main_mcts.py key=value ...`` with dotted keys over the config's defaults; an unknown key is
  an error (OmegaConf's struct mode), so a misspelt override in the adapter fails the test;
* the experiment folder ``<workspace_dir>/<n>-<exp_name>/`` with ``input/`` (the data, symlinked when
  copy_data=False), ``working/`` and ``submission/``; programs are saved as ``runfile.py`` and run there;
* the coding model (``agent.code.*``) over chat completions answering with prose and a fenced code block,
  the feedback model (``agent.feedback.*``) reviewing each run through the ``submit_review`` function;
* each node's ``submission/submission.csv`` kept as ``submission/submission_<node>.csv``
  (save_all_submission) and the best one copied to ``best_submission/submission.csv``;
* ``<log_dir>/<n>-<exp_name>/`` with the resolved config (keys included, as ML-Master saves it),
  ``journal.json`` and ``best_solution.py``.

There is no tree search here: ``agent.steps`` drafts, the best valid metric wins.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

DEFAULTS: dict = {
    "data_dir": None, "dataset_dir": None, "desc_file": None, "goal": None, "eval": None,
    "log_dir": "./logs/run", "log_level": "INFO", "workspace_dir": "./workspaces/run",
    "preprocess_data": True, "copy_data": False, "exp_name": None, "start_cpu_id": 0, "cpu_number": 1,
    "exec": {"timeout": 32400, "agent_file_name": "runfile.py", "format_tb_ipython": False},
    "agent": {
        "steps": 500, "time_limit": 43200, "k_fold_validation": 1, "expose_prediction": False,
        "data_preview": True, "convert_system_to_user": False, "obfuscate": False, "check_format": True,
        "save_all_submission": True, "steerable_reasoning": False,
        "code": {"model": "deepseek-r1", "temp": 0.5, "base_url": "", "api_key": ""},
        "feedback": {"model": "gpt-4o-2024-08-06", "temp": 0.5, "base_url": "", "api_key": ""},
        "search": {"back_debug_depth": 3, "max_debug_depth": 20, "debug_prob": 1, "num_drafts": 5,
                   "num_bugs": 1, "num_improves": 3, "invalid_metric_upper_bound": 100,
                   "metric_improvement_threshold": 0.0001, "max_improve_failure": 3, "parallel_search_num": 3},
    },
}


def parse_value(text: str):
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "none"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def load_config(argv: list[str]) -> dict:
    cfg = copy.deepcopy(DEFAULTS)
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep:
            raise SystemExit(f"main_mcts.py: expected key=value, got {arg!r}")
        node, parts = cfg, key.split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                raise SystemExit(f"main_mcts.py: unknown config key {key!r}")
            node = node[part]
        if parts[-1] not in node:
            raise SystemExit(f"main_mcts.py: unknown config key {key!r}")
        node[parts[-1]] = parse_value(value)
    if not cfg["data_dir"] or not cfg["desc_file"]:
        raise SystemExit("main_mcts.py: data_dir and desc_file are required")
    return cfg


def chat(llm: dict, messages: list[dict], tools: list[dict] | None = None) -> dict:
    body = {"model": llm["model"], "temperature": llm["temp"], "messages": messages}
    if tools:
        body["tools"] = tools
        body["tool_choice"] = {"type": "function", "function": {"name": tools[0]["function"]["name"]}}
    request = urllib.request.Request(llm["base_url"].rstrip("/") + "/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {llm['api_key']}"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())["choices"][0]["message"]


REVIEW = {"type": "function", "function": {
    "name": "submit_review", "description": "Submit a review of the execution of the code.",
    "parameters": {"type": "object", "required": ["is_bug", "summary", "metric", "lower_is_better"], "properties": {
        "is_bug": {"type": "boolean"}, "summary": {"type": "string"}, "metric": {"type": ["number", "null"]},
        "lower_is_better": {"type": "boolean"}}}}}


def experiment_folders(cfg: dict) -> tuple[Path, Path]:
    name = cfg["exp_name"] or "run"
    workspaces, logs = Path(cfg["workspace_dir"]), Path(cfg["log_dir"])
    index = len(list(workspaces.glob(f"*-{name}"))) if workspaces.is_dir() else 0
    ws, log = workspaces / f"{index}-{name}", logs / f"{index}-{name}"
    for folder in (ws / "working", ws / "submission", ws / "best_submission", log):
        folder.mkdir(parents=True, exist_ok=True)
    data = Path(cfg["data_dir"]).resolve()
    if cfg["copy_data"]:
        shutil.copytree(data, ws / "input")
    else:
        (ws / "input").symlink_to(data)
    return ws, log


def main(argv: list[str]) -> int:
    cfg = load_config(argv)
    started = time.monotonic()
    ws, log = experiment_folders(cfg)
    (log / "config.json").write_text(json.dumps(cfg, indent=2))  # keys included, as ML-Master saves its config
    task = Path(cfg["desc_file"]).read_text()
    limits = {"TIME_LIMIT": os.environ.get("TIME_LIMIT"), "STEP_LIMIT": os.environ.get("STEP_LIMIT")}
    journal: list[dict] = []
    best: dict | None = None
    for step in range(int(cfg["agent"]["steps"])):
        if time.monotonic() - started > cfg["agent"]["time_limit"]:
            break
        prompt = [{"role": "system", "content": "You are a Kaggle grandmaster attending a competition.\n\n"
                                                f"# Task description\n{task}\n\n# Limits\n{json.dumps(limits)}"},
                  {"role": "user", "content": "Write a plan and then a single Python program in a ```python block."}]
        reply = chat(cfg["agent"]["code"], prompt)["content"] or ""
        match = re.search(r"```(?:python)?\n(.*?)```", reply, re.S)
        code = match.group(1) if match else ""
        (ws / cfg["exec"]["agent_file_name"]).write_text(code)
        (ws / "submission" / "submission.csv").unlink(missing_ok=True)
        try:
            proc = subprocess.run([sys.executable, cfg["exec"]["agent_file_name"]], cwd=ws, capture_output=True,
                                  text=True, timeout=cfg["exec"]["timeout"])
            output, code_rc = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired:
            output, code_rc = "TimeoutError", -1
        review_msg = chat(cfg["agent"]["feedback"], [{"role": "user", "content": f"Review this run:\n{output}"}],
                          tools=[REVIEW])
        review = json.loads(review_msg["tool_calls"][0]["function"]["arguments"])
        node = {"step": step, "id": f"node{step}", "code": code, "output": output, "exit_code": code_rc, **review}
        produced = ws / "submission" / "submission.csv"
        node["has_submission"] = produced.is_file()
        if produced.is_file() and cfg["agent"]["save_all_submission"]:
            shutil.copy2(produced, ws / "submission" / f"submission_{node['id']}.csv")
        journal.append(node)
        good = not review["is_bug"] and code_rc == 0 and node["has_submission"] and review["metric"] is not None
        if good and (best is None or (review["metric"] < best["metric"]) == review["lower_is_better"]):
            best = node
            shutil.copy2(produced, ws / "best_submission" / "submission.csv")
            (log / "best_solution.py").write_text(code)
        (log / "journal.json").write_text(json.dumps({"nodes": journal}, indent=1))
    print(f"stand-in main_mcts.py: {len(journal)} node(s), best {best['id'] if best else None}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
