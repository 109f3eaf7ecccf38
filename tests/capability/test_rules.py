"""The offline rules judge: one positive and one near-miss negative crafted observed trace (the gateway's
recorded model calls) per strategy, the filters (hedging, comments, echoed task text, the agent's own
scaffold), evidence format, documents."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from pytest_rexmle.capability import CapabilityRun, get_judge
from pytest_rexmle.capability.rules import RULES, RulesJudge
from pytest_rexmle.capability.schema import NO_TRACE_FLAG
from pytest_rexmle.capability.strategies import load_strategies
from pytest_rexmle.errors import RexmleError

from .helpers import make_run


def _load_cases() -> dict[str, tuple[tuple[str, dict], tuple[str, dict]]]:
    """key -> (positive run, negative run) from rule_cases.yaml; a run is (observed trace, {workspace file:
    text}) and workspace code counts only where the trace names it (the model ran or wrote it)."""
    cases = yaml.safe_load((Path(__file__).parent / "rule_cases.yaml").read_text(encoding="utf-8"))
    return {key: tuple((case[run]["trace"], case[run].get("files", {})) for run in ("positive", "negative"))
            for key, case in cases.items()}


CASES = _load_cases()


def _judge(tmp_path, trace: str, files: dict, task: str = "isles22") -> dict:
    return get_judge("rules").judge_run(make_run(tmp_path / "run", trace, files=files), task)


def _score(doc: dict, key: str) -> dict:
    return next(r for r in doc["strategies"] if r["key"] == key)


def test_cases_cover_all_13_strategies():
    assert sorted(CASES) == sorted(s.key for s in load_strategies()) == sorted(RULES)


@pytest.mark.parametrize("key", sorted(CASES))
def test_positive_case_scores_one_with_file_and_line(tmp_path, key):
    (trace, files), _ = CASES[key]
    doc = _judge(tmp_path, trace, files)
    row = _score(doc, key)
    assert row["score"] == 1, row
    assert row["section"] == "isles22-rules"
    # evidence quotes "<file relative to the run>:<line>: <text>"
    assert re.search(r"(logs/model-calls\.jsonl#1|workspace/\w+\.py):\d+: \S", row["evidence"]), row["evidence"]
    CapabilityRun.check(doc)


@pytest.mark.parametrize("key", sorted(CASES))
def test_negative_case_scores_zero(tmp_path, key):
    _, (trace, files) = CASES[key]
    row = _score(_judge(tmp_path, trace, files), key)
    assert row["score"] == 0 and row["evidence"] == "" and row["section"] is None, row


def test_evidence_points_at_the_exact_line(tmp_path):
    doc = _judge(tmp_path, *CASES["hyperparameter_optimization"][0])
    # line 1 is "import optuna" (the first hit); both lines of tune.py match
    assert _score(doc, "hyperparameter_optimization")["evidence"].startswith("workspace/tune.py:1: import optuna")


def test_error_and_fix_are_both_quoted(tmp_path):
    row = _score(_judge(tmp_path, CASES["analyze_failures"][0][0], {}), "analyze_failures")
    assert "failure observed: logs/model-calls.jsonl#1:1: Traceback" in row["evidence"]
    assert "fix applied: logs/model-calls.jsonl#1:4: Reducing the batch size" in row["evidence"]


def test_hedged_talk_is_not_execution(tmp_path):
    doc = _judge(tmp_path, "We could add test-time augmentation and connected components later.\n"
                           "Maybe resample to isotropic spacing?\n", {})
    assert _score(doc, "postprocessing")["score"] == 0
    assert _score(doc, "domain_knowledge")["score"] == 0


def test_code_comments_are_not_execution(tmp_path):
    doc = _judge(tmp_path, "$ python train.py", {"workspace/train.py": "# import optuna\n# TODO: TTA with flips\nx = 1\n"})
    assert _score(doc, "hyperparameter_optimization")["score"] == 0
    assert _score(doc, "postprocessing")["score"] == 0


def test_agent_scaffold_in_workspace_agent_is_skipped(tmp_path):
    # the command agent copies its own folder to workspace/agent; its prompts are not the run's actions
    doc = _judge(tmp_path, "$ python prompts.py", {"workspace/agent/prompts.py": "import optuna\nstudy = optuna.create_study()\n"})
    assert _score(doc, "hyperparameter_optimization")["score"] == 0
    # ... but a nested folder that happens to be called "agent" deeper down is the agent's own work
    doc = _judge(tmp_path, "$ python src/agent/tune.py", {"workspace/src/agent/tune.py": "import optuna\n"})
    assert _score(doc, "hyperparameter_optimization")["score"] == 1


def test_echoed_task_text_is_not_evidence(tmp_path):
    # the LDCT-IQA task file says the slices use a "soft-tissue window"; an instructions line the agent
    # prints back verbatim must not count, the agent's own windowing must
    echo = "The organisers keep the largest connected component of every prediction before scoring."
    run = make_run(tmp_path / "run", f"$ cat instructions.md\n{echo}\n", files={"instructions.md": echo + "\n"})
    doc = get_judge("rules").judge_run(run, "ldct-iqa")
    assert _score(doc, "postprocessing")["score"] == 0
    run2 = make_run(tmp_path / "run2", "Applied keep_largest connected component to 40 predictions\n")
    assert _score(get_judge("rules").judge_run(run2, "ldct-iqa"), "postprocessing")["score"] == 1


def test_run_without_observed_trace_scores_zero_and_is_flagged(tmp_path):
    run = make_run(tmp_path / "run", "")
    doc = get_judge("rules").judge_run(run, "isles22")
    assert doc["flags"] == [NO_TRACE_FLAG]
    assert doc["sections"][0]["flagged"] is True
    assert all(r["score"] == 0 for r in doc["strategies"])
    assert {r["evidence"] for r in doc["sections"][0]["results"]} == {"No observed trace"}
    CapabilityRun.check(doc)


def test_document_is_written_and_complete(tmp_path):
    trace = "\n".join(trace for (trace, _), _ in CASES.values())
    files = {k: v for (_, f), _ in CASES.values() for k, v in f.items()}
    run = make_run(tmp_path / "run", trace, files=files, agent="toy", extra={"seed": 3})
    doc = get_judge("rules").judge_run(run, "isles22")
    assert json.loads((run / "capability.json").read_text()) == doc
    CapabilityRun.check(doc)
    assert doc["agent"] == "toy" and doc["seed"] == 3 and doc["task_id"] == "isles22"
    assert doc["judge"] == {"name": "rules", "model": "rules", "params": {}, "prompt_version": "rules-2"}
    # every positive case is in this run, so every strategy scores 1
    assert [r["score"] for r in doc["strategies"]] == [1] * 13
    assert [r["id"] for r in doc["results"]] == list(range(1, 14))
    names = {s.key: s.name for s in load_strategies()}
    assert all(r["strategy"] == names[r["key"]] for r in doc["strategies"])


def test_reference_id_alias_is_accepted(tmp_path):
    doc = get_judge("rules").judge_run(make_run(tmp_path / "run", "hello\n"), "topcow-track1-task2")
    assert doc["task_id"] == "topcow-cta-det"


def test_unknown_judge_and_options_are_usage_errors():
    with pytest.raises(RexmleError, match="unknown capability judge"):
        get_judge("oracle")
    with pytest.raises(RexmleError, match="no options"):
        RulesJudge(model="x")


def test_large_log_is_fast(tmp_path):
    import time

    line = "epoch 3 step 120 loss=0.4213 lr=0.001 time=0.12s\n"
    stdout = line * 25_000  # ~1.2 MB of ordinary training output, nothing to find
    run = make_run(tmp_path / "run", stdout)
    start = time.perf_counter()
    doc = get_judge("rules").judge_run(run, "isles22")
    elapsed = time.perf_counter() - start
    assert sum(r["score"] for r in doc["strategies"]) == 0
    assert elapsed < 10, elapsed


def test_literal_index_is_only_a_necessary_condition():
    """Every line a group's full pattern matches holds one of its required literals (so results never change)."""
    from pytest_rexmle.capability.rules import STAGE_RULES, required_literals

    corpus = [line for (pos, files), (neg, nfiles) in CASES.values()
              for text in (pos, neg, *files.values(), *nfiles.values()) for line in text.splitlines()]
    corpus += ["Using nnU-Net v2 (3d_fullres)", "HU window [-1000, 400] applied", "clip to HU range", "SAM ViT-B",
               "sh run.sh --epochs 3", "val_dice: 0.8", "for lr in [1e-3, 1e-4]:", "np.clip(img, -1024, 3071)",
               "RandFlipd(keys=['img'])", "5 folds averaged predictions", "cross_validation with 5 folds"]
    groups = [g for r in RULES.values() for g in r.groups] + [g for gs in STAGE_RULES.values() for g in gs]
    matched = 0
    for grp in groups:
        for line in corpus:
            if grp.pattern.search(line):
                matched += 1
                held = [lits is None or any(x in line.lower() for x in lits) for _, lits in grp.parts]
                assert any(held), (grp.what, line)
    assert matched > 40
    # hand-checked extraction: in (ab|cde)fgh both {ab, cde} and {fgh} are required; {fgh} has the longer
    # shortest literal (3 > 2) so it is kept; (abc|defg)x keeps the branch union (3 > 1, "x" is too short)
    assert required_literals(re.compile(r"(ab|cde)fgh")) == {"fgh"}
    assert required_literals(re.compile(r"(abc|defg)x")) == {"abc", "defg"}
    assert required_literals(re.compile(r"\w+\s*")) is None


def test_common_false_friends(tmp_path):
    # "fixed random seed" after an error is not a fix; a plain MONAI U-Net is the generic default, not
    # the state of the art; reading a tissue mask target (PUMA) is not an expert prior
    doc = _judge(tmp_path, "Traceback (most recent call last):\nValueError: x\nUsing a fixed random seed 42.\n",
                 {"workspace/train.py": "from monai.networks.nets import UNet\ntissue_mask = load(p)\n"})
    assert [_score(doc, k)["score"] for k in ("analyze_failures", "state_of_the_art", "expert_priors")] == [0, 0, 0]
