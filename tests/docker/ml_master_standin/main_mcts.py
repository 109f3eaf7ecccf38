"""A stand-in for ML-Master's entry point, for the end-to-end test only — NOT ML-Master.

GitHub is not reachable where the tests run, so the real ML-Master cannot be cloned into the test image.
This file mimics only the interface the ReX-MLE adapter (agents/ml_master/start.py) relies on, as
ML-Master's ``main_mcts.py`` and ``utils/config_mcts.yaml`` define it at the commit the Dockerfile pins
(tests/docker/test_ml_master_real.py runs the real code when a checkout is given):

* ``python main_mcts.py key=value ...`` with dotted keys over the config's defaults; an unknown key is
  an error (its structured config), so a misspelt override in the adapter fails the test;
* the experiment folder ``<workspace_dir>/<exp_name>/`` with ``input/`` (the data's entries symlinked
  when copy_data=False), ``working/`` and ``submission/``; programs run there, with
  ``submission/submission.csv`` in their code rewritten to ``submission/submission_<node id>.csv``;
* the coding model (``agent.code.*``) over chat completions with ``stream: true`` answering with prose
  and a fenced code block; the feedback model (``agent.feedback.*``, which must be ``gpt-*`` or a
  Qwen/DeepSeek model) reviewing each run through the forced ``submit_review`` function, whose answer
  must carry ``has_csv_submission`` and a float ``metric``;
* the best node's submission copied to ``best_submission/submission.csv``;
* ``<log_dir>/<exp_name>/`` with ``ml-master.log``, the resolved config as ``config_mcts.yaml`` (keys
  included, as ML-Master saves it) and ``best_solution.py``;
* once ``agent.steps`` nodes exist it fails printing its final solution tree (the real
  ``journal_to_string_tree`` formats the virtual root's metric, None) and exits with status 1, so the
  adapter must not trust its exit status.

There is no tree search here: ``agent.steps``'' drafts, the best valid metric wins.
"""

from __future__ import annotations

import copy
import json
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
    "preprocess_data": True, "copy_data": False, "exp_name": None, "start_cpu_id": None, "cpu_number": None,
    "exec": {"timeout": 32400, "agent_file_name": "runfile.py", "format_tb_ipython": False},
    "agent": {
        "steps": 500, "time_limit": 43200, "k_fold_validation": 1, "expose_prediction": False,
        "data_preview": True, "convert_system_to_user": False, "obfuscate": False, "check_format": True,
        "save_all_submission": True, "steerable_reasoning": True,
        "code": {"model": "deepseek-r1", "temp": 0.5, "base_url": "", "api_key": ""},
        "feedback": {"model": "gpt-4o-2024-08-06", "temp": 0.5, "base_url": "", "api_key": ""},
        "search": {"back_debug_depth": 3, "max_debug_depth": 20, "debug_prob": 1, "num_drafts": 5,
                   "num_bugs": 1, "num_improves": 3, "invalid_metric_upper_bound": 100,
                   "metric_improvement_threshold": 0.0001, "max_improve_failure": 3, "parallel_search_num": 3},
        "decay": {"decay_type": "piecewise", "exploration_constant": 1.414, "lower_bound": 0.5,
                  "linear_decay": {"alpha": 0.01}, "exponential_decay": {"gamma": 0.99},
                  "piecewise_decay": {"alpha": 0.01, "phase_ratios": [0.3, 0.7]},
                  "dynamic_piecewise_decay": {"alpha": 0.01, "phase_ratios": [0.85, 1]}},
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
    for key in ("dataset_dir", "start_cpu_id", "cpu_number"):  # typed, not Optional, in its Config schema
        if cfg[key] is None:
            raise SystemExit(f"main_mcts.py: {key} is required")
    closed = ("gpt", "gemini", "claude")
    if cfg["agent"]["steerable_reasoning"] and any(m in cfg["agent"]["code"]["model"] for m in closed):
        raise SystemExit("main_mcts.py: steerable reasoning does not support close sourced models")
    if int(cfg["cpu_number"]) < int(cfg["agent"]["search"]["parallel_search_num"]):
        raise SystemExit("main_mcts.py: the maximum level of parallelism exceeds the number of allocated CPU cores")
    feedback = cfg["agent"]["feedback"]["model"]
    if not (feedback.startswith("gpt-") or "qwen" in feedback.lower() or "deepseek" in feedback):
        raise SystemExit("main_mcts.py: please use a gpt model as a feedback model")
    return cfg


def _post(llm: dict, body: dict):
    request = urllib.request.Request(llm["base_url"].rstrip("/") + "/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {llm['api_key']}"})
    return urllib.request.urlopen(request, timeout=120)


def code_query(llm: dict, messages: list[dict]) -> str:
    """The coding model: streamed chat completions, as utils/llm_caller.LLM.stream_generate asks."""
    body = {"model": llm["model"], "messages": messages, "temperature": llm["temp"], "max_tokens": 16384,
            "stream": True, "chat_template_kwargs": {"thinking": True}, "separate_reasoning": True}
    text = ""
    with _post(llm, body) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            choices = json.loads(line[5:]).get("choices") or []
            if choices and choices[0].get("delta", {}).get("content") is not None:
                text += choices[0]["delta"]["content"]
    return text


def review_query(llm: dict, messages: list[dict]) -> dict:
    """The feedback model: one chat completion with submit_review forced (backend/backend_openai.py)."""
    body = {"model": llm["model"], "temperature": llm["temp"], "messages": messages, "tools": [REVIEW],
            "tool_choice": {"type": "function", "function": {"name": "submit_review"}}}
    with _post(llm, body) as response:
        return json.loads(response.read())["choices"][0]["message"]


REVIEW = {"type": "function", "function": {
    "name": "submit_review", "description": "Submit a review evaluating the output of the training script.",
    "parameters": {"type": "object",
                   "required": ["is_bug", "has_csv_submission", "summary", "metric", "lower_is_better"],
                   "properties": {"is_bug": {"type": "boolean"}, "has_csv_submission": {"type": "boolean"},
                                  "summary": {"type": "string"}, "metric": {"type": "number"},
                                  "lower_is_better": {"type": "boolean"}}}}}


def experiment_folders(cfg: dict) -> tuple[Path, Path]:
    name = cfg["exp_name"] or "run"
    ws, log = Path(cfg["workspace_dir"]).resolve() / name, Path(cfg["log_dir"]).resolve() / name
    for folder in (ws / "input", ws / "working", ws / "submission", log):
        folder.mkdir(parents=True, exist_ok=True)
    for entry in Path(cfg["data_dir"]).resolve().iterdir():
        if cfg["copy_data"]:
            (shutil.copytree if entry.is_dir() else shutil.copyfile)(entry, ws / "input" / entry.name)
        else:
            (ws / "input" / entry.name).symlink_to(entry)
    return ws, log


def main(argv: list[str]) -> int:
    cfg = load_config(argv)
    started = time.monotonic()
    ws, log = experiment_folders(cfg)
    log_file = log / "ml-master.log"

    def say(line: str) -> None:
        print(line, flush=True)
        with log_file.open("a") as f:
            f.write(line + "\n")

    (log / "config_mcts.yaml").write_text(json.dumps(cfg, indent=2))  # keys included, as ML-Master saves it
    task = Path(cfg["desc_file"]).read_text()
    steps = int(cfg["agent"]["steps"])
    best: dict | None = None
    nodes: list[dict] = []
    for step in range(steps):
        remaining = cfg["agent"]["time_limit"] - (time.monotonic() - started)
        user = (f"\n# Task description\n{task}\n\n# Instructions\n\n## Implementation guideline\n\n"
                f"- <TOTAL_TIME_REMAINING: {int(remaining) // 3600}hrs {(int(remaining) % 3600) // 60}mins "
                f"{int(remaining) % 60}secs>\n- <TOTAL_STEPS_REMAINING: {steps - step}>\n"
                "- **AND MOST IMPORTANTLY SAVE PREDICTIONS ON THE PROVIDED UNLABELED TEST DATA IN A `submission.csv` "
                "FILE IN THE ./submission/ DIRECTORY.**\n")
        reply = code_query(cfg["agent"]["code"], [
            {"role": "system", "content": "You are a Kaggle grandmaster attending a competition."},
            {"role": "user", "content": user}])
        match = re.search(r"```(?:python)?\n(.*?)```", reply, re.S)
        node_id = f"{step:04d}standin"
        code = (match.group(1) if match else "").replace("submission/submission.csv",
                                                         f"submission/submission_{node_id}.csv")
        runfile = ws / "runfile_0.py"
        runfile.write_text(code)
        try:
            proc = subprocess.run([sys.executable, runfile.name], cwd=ws, capture_output=True, text=True,
                                  timeout=cfg["exec"]["timeout"])
            output, failed = proc.stdout + proc.stderr, proc.returncode != 0
        except subprocess.TimeoutExpired:
            output, failed = "TimeoutError", True
        runfile.unlink()
        message = review_query(cfg["agent"]["feedback"], [
            {"role": "system", "content": f"# Introduction\nYou are a Kaggle grandmaster attending a competition.\n"
                                          f"# Task description\n{task}\n# Implementation\n```python\n{code}```\n"
                                          f"# Execution output\n```\n{output}```\n"}])
        review = json.loads(message["tool_calls"][0]["function"]["arguments"])
        produced = ws / "submission" / f"submission_{node_id}.csv"
        metric = review["metric"] if isinstance(review["metric"], float) else None
        buggy = (review["is_bug"] or failed or metric is None or not review["has_csv_submission"]
                 or not produced.is_file())
        nodes.append({"id": node_id, "buggy": buggy, "metric": metric})
        say(f"current node count is {step}, current node.id is {node_id}")  # as it logs it: before counting this one
        if not buggy and (best is None or (metric < best["metric"]) == review["lower_is_better"]):
            best = nodes[-1]
            (ws / "best_submission").mkdir(exist_ok=True)
            shutil.copy(produced, ws / "best_submission" / "submission.csv")
            (log / "best_solution.py").write_text(code)
    print("Traceback (most recent call last):\n  File \"main_mcts.py\", in journal_to_string_tree\n"
          "TypeError: unsupported format string passed to NoneType.__format__", file=sys.stderr, flush=True)
    return 1  # as the real one does at the end of its last step


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
