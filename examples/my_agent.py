"""A small ReX-MLE agent for ldct-iqa: read the task, fit a model, ask an LLM, validate, submit.

Run it with your own stack: pytest --agent=command --agent-option cmd="python my_agent.py"
  --agent-option dir=examples --agent-option env=$VIRTUAL_ENV -k ldct-iqa   (needs numpy and tifffile)
"""
import csv
import json
import os
import pathlib
import urllib.request

import numpy as np
import tifffile

data, out = pathlib.Path(os.environ["REXMLE_DATA_DIR"]), pathlib.Path(os.environ["REXMLE_SUBMISSION_DIR"])
task = pathlib.Path(os.environ["REXMLE_INSTRUCTIONS"]).read_text(encoding="utf-8")
direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the gateway is reached directly

def post(url, body, timeout=60):
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json",
                                     "Authorization": "Bearer " + os.environ.get("REXMLE_GATEWAY_TOKEN", "")})
    return json.load(direct.open(request, timeout=timeout))

def features(path):  # low dose means noise: the image's spread and its pixel-to-pixel roughness
    image = tifffile.imread(path).astype(np.float64)
    return [1.0, image.std(), np.abs(np.diff(image, axis=0)).mean(), np.abs(np.diff(image, axis=1)).mean()]

try:  # ask the model (through the session's gateway, which holds the key) for an idea; go on without one
    answer = post(os.environ["OPENAI_BASE_URL"] + "/chat/completions", {"model": os.environ.get("MODEL", "gpt-4o-mini"),
                  "messages": [{"role": "user", "content": "One idea for this task, in one line:\n" + task[:4000]}]})
    print("model:", answer["choices"][0]["message"]["content"])
except Exception as exc:
    print("no model answer:", exc)
labels = {r["image_id"]: float(r["quality_score"]) for r in csv.DictReader(open(data / "train_labels.csv"))}
x = np.array([features(next((data / "train" / "images").glob(i + ".*"))) for i in labels])
y = np.array(list(labels.values()))
try:  # least squares with torch where the stack has it, else numpy
    import torch
    weights = torch.linalg.lstsq(torch.tensor(x), torch.tensor(y)[:, None]).solution[:, 0].numpy()
except ImportError:
    weights = np.linalg.lstsq(x, y, rcond=None)[0]
tests = sorted((data / "test" / "images").iterdir())
with open(out / "submission.csv", "w", newline="") as fh:
    csv.writer(fh).writerows([("image_id", "quality_score")] + [(p.stem, float(np.dot(features(p), weights)))
                                                                for p in tests])
print("validation:", post(os.environ["REXMLE_VALIDATE_URL"], {}, timeout=900))
