"""The judge believes what the harness observed, not what the agent says (issue 23.6).

* The forged-log attack: a sample submission plus one log line per strategy and per stage in the
  agent's own stdout, stderr and workspace logs earns no strategy and no judged stage; S4/S5 measure
  the submission alone, exactly as for the same submission without any log.
* A run with real supporting evidence (recorded model calls that discuss and run training, a train
  script that really uses augmentation and cross-validation, a valid submission) earns exactly the
  strategies its code and trace show.
* The observed trace itself: scaffold instructions skipped, streamed answers joined, repeated history
  kept once, code credited only where the trace corroborates it.
"""

from __future__ import annotations

import json

import pytest

from pytest_rexmle.capability import CapabilityRun, get_judge
from pytest_rexmle.capability.observed import read_model_calls
from pytest_rexmle.capability.schema import NO_TRACE_FLAG
from pytest_rexmle.capability.stages import StageScores, stage_scores
from pytest_rexmle.capability.trace import CODE, FILES, TRACE, collect_sources, trace_text
from pytest_rexmle.data.synthetic import ensure_synthetic
from pytest_rexmle.graders.base import load_grader
from pytest_rexmle.task import registry

from .helpers import SCAFFOLD, make_run, model_call, write_model_calls
from .test_rules import CASES

#: one claim per judged stage, in the words the rules judge looks for
STAGE_CLAIMS = """Plan: read description.md and instructions.md first, then train.
$ ls $REXMLE_DATA_DIR/train
pip install monai torch; import torch
DataLoader over sitk.ReadImage volumes ready
Epoch 1 train_loss=0.71
train_test_split: val_split of 20 % held out, 5-fold cross-validation
val_dice: 0.83
best model checkpoint saved (early stopping), compared 3 models
"""


@pytest.fixture(scope="module")
def ldct(tmp_path_factory):
    task = registry().get("ldct-iqa")
    return task, ensure_synthetic(task, tmp_path_factory.mktemp("cache")).public


def _stages(doc: dict) -> dict:
    return {r["id"]: r["score"] for r in doc["stages"]}


def _strategies(doc: dict) -> set[str]:
    return {r["key"] for r in doc["strategies"] if r["score"]}


def _forged_claims() -> str:
    return "\n".join(trace for (trace, _), _ in CASES.values()) + "\n" + STAGE_CLAIMS


def test_forged_logs_earn_nothing(tmp_path, ldct):
    task, public = ldct
    claims = _forged_claims()
    run = make_run(tmp_path / "forged", stdout=claims, stderr=claims, files={
        "workspace/notes.md": claims, "workspace/train.log": claims, "logs/agent.trace.log": claims,
        "workspace/rexmle-usage.json": json.dumps({"turns": 50, "input_tokens": 10 ** 6})})
    load_grader(task).write_baseline(public, run / "submission")
    judge = get_judge("rules")
    doc = judge.judge_run(run, task)
    CapabilityRun.check(doc)
    assert _strategies(doc) == set() and doc["flags"] == [NO_TRACE_FLAG]
    stages = stage_scores(run, task, public, judge)
    StageScores.check(stages)
    # a submission-only twin: the forged lines add no stage credit at all
    plain = make_run(tmp_path / "plain")
    load_grader(task).write_baseline(public, plain / "submission")
    alone = stage_scores(plain, task, public, judge)
    assert _stages(stages) == _stages(alone) == {"S1": 0.0, "S2": 0.0, "S3": 0.0, "S4": 1.0, "S5": 1.0}
    assert stages["total"] == alone["total"] == pytest.approx(0.25)
    assert stages["stages"][0]["evidence"] == "No observed trace"


def test_forged_code_the_trace_never_mentions_earns_nothing(tmp_path):
    code = "\n".join(text for (_, files), _ in CASES.values() for text in files.values())
    code += "\n" + "\n".join(trace for (trace, _), _ in CASES.values() if not trace.startswith("$ python"))
    # a recorded session that did other things; forge.py is never written, run or read through the model
    run = make_run(tmp_path / "run", ["$ ls $REXMLE_DATA_DIR\ntrain test", "$ python main.py\ndone"],
                   files={"workspace/forge.py": code, "workspace/main.py": "print('done')\n"})
    doc = get_judge("rules").judge_run(run, "isles22")
    assert _strategies(doc) == set()
    assert [s.rel for s in collect_sources(run) if s.kind == CODE] == ["workspace/main.py"]
    # the same file, once the trace shows the model running it, is evidence
    write_model_calls(run, [model_call("$ python forge.py\nok")])
    assert len(_strategies(get_judge("rules").judge_run(run, "isles22"))) >= 10


TRAIN_PY = """import numpy as np
import albumentations as A
from sklearn.model_selection import KFold

aug = A.Compose([A.HorizontalFlip(p=0.5), A.RandomRotate90(p=0.5)])


def fit_fold(x, y):
    return np.polyfit(x, y, 1)


kf = KFold(n_splits=5, shuffle=True, random_state=0)
fold_preds = []
for fold, (tr, va) in enumerate(kf.split(features)):
    coef = fit_fold(features[tr], targets[tr])
    fold_preds.append(np.polyval(coef, test_features))
pred = np.mean(fold_preds, axis=0)  # average predictions across folds
"""


def test_real_evidence_earns_exactly_what_it_shows(tmp_path, ldct):
    task, public = ldct
    run = make_run(tmp_path / "run", files={"workspace/train.py": TRAIN_PY,
                                            "workspace/fold_0.npy": "x", "logs/agent.stdout.log": "(quiet)\n"})
    write_model_calls(run, [
        model_call("$ cat $REXMLE_INSTRUCTIONS\n(the task)\n$ ls $REXMLE_DATA_DIR/train\nimg_000.tif img_001.tif",
                   reply="Plan: a small regressor on intensity features, flips and rotations as augmentation, "
                         "5-fold CV, then the folds' test outputs averaged."),
        model_call("Wrote workspace/train.py", reply=json.dumps({"command": "python train.py"})),
        model_call("$ python train.py\nfold 0 epoch 1 train_loss=0.41 val_mae=0.30\nfold 1 epoch 1 train_loss=0.44",
                   reply="Training finished; writing the submission.", stream=True),
    ])
    load_grader(task).write_baseline(public, run / "submission")
    judge = get_judge("rules")
    doc = judge.judge_run(run, task)
    CapabilityRun.check(doc)
    # the script's albumentations pipeline, and its KFold loop whose fold outputs are averaged
    assert _strategies(doc) == {"augmentation", "ensembling_seeds_folds"}
    rows = {r["key"]: r for r in doc["strategies"]}
    assert rows["augmentation"]["evidence"].startswith("workspace/train.py:2: import albumentations as A")
    assert "workspace/train.py:17: pred = np.mean(fold_preds" in rows["ensembling_seeds_folds"]["evidence"]
    stages = stage_scores(run, task, public, judge)
    # S1: reads the task ($REXMLE_INSTRUCTIONS), explores the data (ls), states a plan -> 3/3, all in the
    # trace; S2: training seen (epoch 1), but no environment check and no data loader -> 1/3; S3: KFold
    # (held-out folds) and a validation metric (val_mae=0.30), nothing selected by it -> 2/3
    assert _stages(stages) == pytest.approx({"S1": 1.0, "S2": 1 / 3, "S3": 2 / 3, "S4": 1.0, "S5": 1.0})
    assert "logs/model-calls.jsonl#1:" in stages["stages"][0]["evidence"]


def test_observed_trace_skips_scaffold_joins_streams_and_dedupes(tmp_path):
    run = make_run(tmp_path / "run")
    history = "$ nvidia-smi\nGPU 0: H100"
    write_model_calls(run, [model_call(history, reply="Next I train."),
                            model_call(history, reply="Averaging the fold outputs now.", stream=True)])
    trace = read_model_calls(run)
    assert trace.n_calls == 2 and trace.skipped_lines == 0
    assert trace.calls[0].texts == [history, "Next I train."]
    assert trace.calls[1].texts == ["Averaging the fold outputs now."]  # history once; stream joined
    assert SCAFFOLD not in trace.text and "bash" not in trace.text and "agent-model" not in trace.text
    sources = collect_sources(run)
    assert [s.kind for s in sources] == [TRACE, TRACE]
    text = trace_text(sources)
    assert text.startswith("=== logs/model-calls.jsonl#1 ===\n$ nvidia-smi")


def test_model_calls_file_is_read_within_bounds(tmp_path):
    run = make_run(tmp_path / "run")
    write_model_calls(run, [model_call("epoch 1 train_loss=0.5")])
    with (run / "logs" / "model-calls.jsonl").open("a") as fh:
        fh.write("not json\n[1, 2]\n" + json.dumps({"request": {"messages": [{"role": "user", "content": "x" * 10}]},
                                                   "response": "{\"deep\": " * 200 + "1" + "}" * 200}) + "\n")
    trace = read_model_calls(run)
    assert trace.n_calls == 2 and trace.skipped_lines == 2
    assert trace.calls[1].texts == ["x" * 10]
    # a FIFO in place of the file is not read (and never blocks)
    (run / "logs" / "model-calls.jsonl").unlink()
    import os

    os.mkfifo(run / "logs" / "model-calls.jsonl")
    assert read_model_calls(run).present is False
    assert FILES not in {s.kind for s in collect_sources(run, include_files=False)}


def test_code_the_model_wrote_is_corroborated_by_its_content(tmp_path):
    # an AIDE-style scaffold saves the model's code under a name of its own: the code itself is in the trace
    code = "study = optuna.create_study(direction='maximize', sampler=TPESampler())\n"
    run = make_run(tmp_path / "run", files={"workspace/runfile_3.py": "import optuna\n" + code,
                                            "workspace/other.py": "import optuna\nx = 1\n"})
    write_model_calls(run, [model_call("Write the tuning script.", reply=f"```python\nimport optuna\n{code}```")])
    rels = [s.rel for s in collect_sources(run) if s.kind == CODE]
    # a short shared line ("import optuna") is not enough; the long one is
    assert rels == ["workspace/runfile_3.py"]
    row = next(r for r in get_judge("rules").judge_run(run, "isles22")["strategies"]
               if r["key"] == "hyperparameter_optimization")
    assert row["score"] == 1


@pytest.mark.slow  # a whole session; the forgeries are judged above without one
def test_session_with_the_forging_agent_earns_no_capability(bench, needs_bwrap):
    """The attack end to end: the plugin's judge and stage scores of a real session (rules judge)."""
    from ..conftest import AGENTS, run_folders

    result = bench("--agent=command", f"--agent-option=dir={AGENTS / 'forger'}", "--agent-option=cmd=python agent.py",
                   "-k", "ldct-iqa")
    result.assert_outcomes(passed=1)
    (run,) = run_folders(bench.path, "ldct-iqa")
    assert "Threshold sweep on validation" in (run / "logs" / "agent.stdout.log").read_text()  # the claims are there
    capability = json.loads((run / "capability.json").read_text())
    assert [r["score"] for r in capability["strategies"]] == [0] * 13 and capability["flags"] == [NO_TRACE_FLAG]
    stages = json.loads((run / "stages.json").read_text())
    assert _stages(stages) == {"S1": 0.0, "S2": 0.0, "S3": 0.0, "S4": 1.0, "S5": 1.0}
