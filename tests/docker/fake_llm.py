"""A loopback server speaking the OpenAI chat-completions protocol with scripted replies.

aideml 0.2.2 asks for a plan and code in plain text (answered with prose and a code block) and for
the review of each run through the ``submit_review`` tool (answered with a tool call); newer aideml
asks for the code through a ``submit_plan_and_code`` tool, answered in kind. ML-Master (AIDE's
lineage) asks the same two ways. Every request body is kept so tests can check what the agent was told.

The protocol parts beyond one JSON reply: ``"stream": true`` is answered as server-sent events
(``chat.completion.chunk`` deltas, then ``data: [DONE]``), as LiteLLM streams by default, and
``POST /embeddings`` returns deterministic vectors. Subclasses script other agents by overriding
:meth:`ScriptedLLM.content` (see ``rdagent_llm.py``).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler

from ..loopback import LoopbackServer, send_json

# AIDE runs this in ./ (with ./input = the data, ./working): a valid ldct-iqa submission
SCRIPT = """\
import os
import shutil

os.makedirs("./working", exist_ok=True)
shutil.copyfile("./input/sample_submission.csv", "./working/submission.csv")
print("Validation metric: 0.5")
"""

# ML-Master's programs leave their submission in ./submission/ (its prompt and start script say so); it
# rewrites "submission/submission.csv" in the code to submission_<node id>.csv before running it
ML_MASTER_SCRIPT = """\
import os
import shutil

os.makedirs("./submission", exist_ok=True)
shutil.copyfile("./input/sample_submission.csv", "./submission/submission.csv")
print("Validation metric: 0.5")
"""

EMBEDDING_DIM = 16


def embedding(text: str) -> list[float]:
    """A deterministic unit-free vector per text (equal texts, equal vectors)."""
    digest = hashlib.sha256(text.encode()).digest()
    return [(b - 127.5) / 127.5 for b in digest[:EMBEDDING_DIM]]


class ScriptedLLM(LoopbackServer):
    def __init__(self, script: str = SCRIPT, host: str = "0.0.0.0") -> None:
        """``host``: where to listen; ``127.0.0.1`` for agents run with ``--rexmle-network=host``."""
        self.script = script
        self.requests: list[dict] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()
        super().__init__(self._handler(), host)

    def content(self, body: dict) -> str:
        """The text answer to a request without tools."""
        return f"Copy the sample submission.\n\n```python\n{self.script}```\n"

    def embeddings(self, body: dict) -> dict:
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else list(texts or [])
        data = [{"object": "embedding", "index": i, "embedding": embedding(str(t))} for i, t in enumerate(texts)]
        return {"object": "list", "data": data, "model": body.get("model", "scripted"),
                "usage": {"prompt_tokens": len(texts), "total_tokens": len(texts)}}

    def reply(self, body: dict) -> dict:
        tools = body.get("tools") or []
        message: dict = {"role": "assistant", "content": None}
        finish = "tool_calls"
        if tools:
            name = tools[0]["function"]["name"]
            if name == "submit_review":
                args = {"is_bug": False, "summary": "Ran fine.", "metric": 0.5, "lower_is_better": False}
                if "has_csv_submission" in tools[0]["function"].get("parameters", {}).get("properties", {}):
                    args["has_csv_submission"] = True  # ML-Master's review asks for it too
            else:
                args = {"plan": "Copy the sample submission as a first valid baseline.",
                        "code": f"```python\n{self.script}```"}
            message["tool_calls"] = [{"id": f"call_{len(self.requests)}", "type": "function",
                                      "function": {"name": name, "arguments": json.dumps(args)}}]
        else:
            message["content"] = self.content(body)
            finish = "stop"
        return {"id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", "scripted"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}

    def _handler(self):
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server naming)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                body["_path"] = self.path
                body["_auth"] = self.headers.get("Authorization", "")
                with owner.lock:
                    owner.requests.append(body)
                    try:
                        answer = owner.embeddings(body) if self.path.endswith("/embeddings") else owner.reply(body)
                    except Exception as exc:  # a scripting gap: visible to the test, not a hang
                        owner.errors.append(f"{exc.__class__.__name__}: {exc}")
                        self.send_error(500, str(exc)[:200])
                        return
                if body.get("stream") and "choices" in answer:
                    self._stream(answer)
                    return
                send_json(self, answer)

            def _stream(self, answer: dict) -> None:
                """The same answer as server-sent events: the role, the content in pieces, the finish."""
                choice = answer["choices"][0]
                text = choice["message"].get("content") or ""
                base = {"id": answer["id"], "object": "chat.completion.chunk", "created": answer["created"],
                        "model": answer["model"]}
                deltas = [{"role": "assistant", "content": ""}]
                deltas += [{"content": text[i:i + 400]} for i in range(0, len(text), 400)]
                if choice["message"].get("tool_calls"):
                    deltas.append({"tool_calls": [dict(call, index=i) for i, call
                                                  in enumerate(choice["message"]["tool_calls"])]})
                events = [dict(base, choices=[{"index": 0, "delta": d, "finish_reason": None}]) for d in deltas]
                events.append(dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for event in events:
                    self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

            def log_message(self, *args) -> None:
                pass

        return Handler


# -- R&D-Agent ---------------------------------------------------------------------------------------------

# What the scripted R&D-Agent "writes": its pipeline contract (rdagent 1.0.0's data-science coder) is one
# main.py run in the experiment folder with the data at ./workspace_input/, `--debug` for a quick run that
# prints debug_time/estimated_time, a scores.csv indexed by model name with an "ensemble" row and one column
# named after the metric, and submission.csv next to it. R&D-Agent rejects code that opens
# sample_submission.csv (it traces the files opened), so the ids come from the test images' names.
RD_METRIC = "PLCC"
RD_MAIN = """\
import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
import tifffile

parser = argparse.ArgumentParser()
parser.add_argument("--debug", action="store_true")
args = parser.parse_args()
started = time.time()
data = Path("./workspace_input")


def noise(path):
    image = tifffile.imread(path).astype("float64")
    return float(np.abs(np.diff(image, axis=-1)).mean())


labels = pd.read_csv(data / "train_labels.csv", dtype={"image_id": str})
train_files = {p.stem: p for p in (data / "train" / "images").glob("*.tif*")}
labels = labels[labels["image_id"].isin(train_files)]
if args.debug:
    labels = labels.head(10)
x = np.array([noise(train_files[i]) for i in labels["image_id"]])
y = labels["quality_score"].to_numpy(dtype=float)
half = len(x) // 2
slope, intercept = np.polyfit(x[:half], y[:half], 1)
held_out = slope * x[half:] + intercept
plcc = float(np.corrcoef(held_out, y[half:])[0, 1]) if np.std(held_out) > 0 else 0.0
slope, intercept = np.polyfit(x, y, 1)

test_files = sorted((data / "test" / "images").glob("*.tif*"))
scores = [slope * noise(p) + intercept for p in test_files]
pd.DataFrame({"image_id": [p.stem for p in test_files], "quality_score": np.clip(scores, 0, 4)}).to_csv(
    "submission.csv", index=False)
pd.DataFrame({"%s": [0.0 if np.isnan(plcc) else plcc]}, index=["ensemble"]).to_csv("scores.csv")
print(f"linear fit on a noise estimate; held-out PLCC {plcc:.3f}")
if args.debug:
    elapsed = time.time() - started
    print(f"debug_time: {elapsed:.2f}")
    print(f"estimated_time: {elapsed * 4:.2f}")
""" % RD_METRIC  # noqa: UP031 (a Python template full of braces: % needs no escaping)


class RDAgentLLM(ScriptedLLM):
    """Answers R&D-Agent's data-science loop (rdagent 1.0.0, a model without response schemas: JSON mode).

    Each request is recognised by the output format its system prompt asks for; an unrecognised one is
    kept in ``errors`` and answered with ``{}`` so that the test names the gap instead of hanging.
    ``kinds`` records what was asked, in order.
    """

    PROBLEM = "Predictions ignore image noise"

    def __init__(self, main: str = RD_MAIN) -> None:
        super().__init__(script=main)
        self.kinds: list[str] = []

    @staticmethod
    def _text(body: dict, role: str) -> str:
        return "\n".join(str(m.get("content") or "") for m in body.get("messages", []) if m.get("role") == role)

    def kind(self, body: dict) -> str:
        system, user = self._text(body, "system"), self._text(body, "user")
        both = system + "\n" + user
        rules = (
            ("competition", '"Metric Direction"' in system),
            ("problems", "problem name 1 (name of the identified problem" in system),
            ("hypotheses", "problem name 1 (should be exactly same as the problem name provided)" in system),
            ("task", "A detailed, step-by-step implementation guide for `main.py`" in system),
            ("exp_feedback", '"Replace Best Result"' in system),
            ("runner_eval", '"hyperparameter_tuning_decision"' in system),
            ("coder_eval", '"final_decision"' in system),
            ("code", "```python" in both or "main.py" in system),
        )
        return next((name for name, hit in rules if hit), "unknown")

    def content(self, body: dict) -> str:
        kind = self.kind(body)
        self.kinds.append(kind)
        answer = getattr(self, f"answer_{kind}", None)
        if answer is None:
            self.errors.append(f"unrecognised R&D-Agent request: {self._text(body, 'system')[:300]!r}")
            return "{}"
        return answer(body)

    def answer_competition(self, body: dict) -> str:
        return json.dumps({
            "Task Type": "Regression", "Data Type": "Image (Computer Vision)",
            "Brief Description": "Predict radiologists' quality scores of low-dose CT slices.",
            "Dataset Description": "train/images/*.tif with train_labels.csv; test/images/*.tiff to score.",
            "Submission Specifications": "submission.csv with image_id,quality_score for every test image.",
            "Submission channel number to each sample": 1,
            "Metric Evaluation Description": "Correlation between predicted and radiologists' scores.",
            "Metric Name": RD_METRIC, "Metric Direction": True, "Longer time limit required": False})

    def answer_problems(self, body: dict) -> str:
        return json.dumps({self.PROBLEM: {"problem": "There is no model yet.",
                                          "reason": "Quality falls with noise, which a simple statistic captures."}})

    def answer_hypotheses(self, body: dict) -> str:
        scores = {k: 8 for k in ("alignment_score", "impact_score", "novelty_score", "feasibility_score",
                                 "risk_reward_balance_score")}
        return json.dumps({self.PROBLEM: {"reason": "Noise lowers perceived quality.", "component": "Model",
                                          "hypothesis": "A linear fit on a noise estimate ranks slices by quality.",
                                          "evaluation": scores}})

    def answer_task(self, body: dict) -> str:
        return json.dumps({"description": "### Steps\nEstimate noise per slice, fit a line to the training "
                                          "scores, predict the test slices, write scores.csv and submission.csv.",
                           "packages": ["numpy", "pandas", "tifffile"]})

    def answer_code(self, body: dict) -> str:
        return f"A linear model on a noise estimate.\n\n```python\n{self.script}```\n"

    def answer_coder_eval(self, body: dict) -> str:
        return json.dumps({"execution": "The script ran without errors.", "return_checking": "scores.csv and "
                           "submission.csv are present and well formed.", "code": "Simple and correct.",
                           "error_message": None, "final_decision": True})

    def answer_runner_eval(self, body: dict) -> str:
        return json.dumps({"execution": "The full run finished.", "return_checking": "Outputs are valid.",
                           "code": "Fine.", "acceptable": True, "hyperparameter_tuning_decision": False,
                           "hyperparameter_tuning_suggestion": "", "score": "0.5", "final_decision": True})

    def answer_exp_feedback(self, body: dict) -> str:
        return json.dumps({"Submission Format Check": "yes", "First Valid Submission": "yes",
                           "Code Change Summary": "First pipeline: linear fit on a noise estimate.",
                           "Observations": "The pipeline produced a valid submission.",
                           "Feedback for Hypothesis": "Confirmed: the noise estimate orders the slices.",
                           "Evaluation Aligned With Task": "yes", "Replace Best Result": "yes", "Acceptable": "yes",
                           "Reasoning": "[Experiment Analysis] First valid submission.", "EDA Improvement": "no"})
