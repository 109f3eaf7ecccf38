"""The rules judge and the stage scores read a bounded amount of agent text, in bounded time and memory.

The judge reads the gateway's recorded model calls and the workspace code they name (never the
agent's own logs), so the hostile run has a gigabyte of recorded calls and 40 GiB of named code, next
to a gigabyte of stdout and FIFOs that must not be read at all.
"""

from __future__ import annotations

import json
import os

import pytest

from pytest_rexmle.capability.trace import MAX_RUN_BYTES, collect_sources

from ..capability.helpers import model_call
from .helpers import GIB, baseline_rss_mb, deep_folder, peak_rss_of, remove_tree

TRAINING_LINE = "epoch 3 step 120 loss=0.4213 lr=0.001 time=0.12s val_dice: 0.81\n"


def text_gigabyte(path, lines: int = 40_000) -> None:
    """A 1 GiB log: ~2.5 MB of training output at each end, a sparse gigabyte between them."""
    block = (TRAINING_LINE * lines).encode()
    with open(path, "wb") as fh:
        fh.write(block)
        fh.seek(GIB - len(block))
        fh.write(block)


def calls_gigabyte(path, calls: int = 2000) -> None:
    """A 1 GiB ``model-calls.jsonl``: recorded calls (each running one of the workspace's scripts and
    showing its training output) at each end, a sparse gigabyte between them."""
    block = "".join(json.dumps(model_call(f"$ python train{i % 40:02d}.py  # call {i}\n" + TRAINING_LINE * 20)) + "\n"
                    for i in range(calls)).encode()
    with open(path, "wb") as fh:
        fh.write(block)
        fh.seek(GIB - len(block))
        fh.write(block)


def hostile_layout(run) -> None:
    """The hostile run folder shared with ``benchmarks/bench_hostile.py``."""
    logs, ws = run / "logs", run / "workspace"
    logs.mkdir(parents=True)
    ws.mkdir()
    calls_gigabyte(logs / "model-calls.jsonl")
    text_gigabyte(logs / "agent.stdout.log")  # a claim: never read
    (logs / "agent.stderr.log").write_text("Traceback (most recent call last):\nValueError: boom\n")
    os.mkfifo(logs / "usage.json")
    (logs / "zero.log").symlink_to("/dev/zero")
    os.mkfifo(ws / "rexmle-usage.json")
    for i in range(40):  # 40 more gigabytes of code the recorded calls name
        text_gigabyte(ws / f"train{i:02d}.py", lines=2000)
        text_gigabyte(ws / f"train{i:02d}.log", lines=2000)
    os.mkfifo(ws / "pipe.py")
    deep_folder(ws / "deep", 1500)


@pytest.fixture
def hostile_run(tmp_path):
    run = tmp_path / "run"
    hostile_layout(run)
    yield run
    remove_tree(run)


@pytest.mark.slow  # a run folder of gigabyte logs and a 1500-level tree
def test_sources_stay_within_the_run_budget(hostile_run):
    from pytest_rexmle.capability.observed import MAX_BYTES

    sources = collect_sources(hostile_run)
    total = sum(len(s.text.encode()) for s in sources)
    assert total <= MAX_BYTES + MAX_RUN_BYTES + 64 * 1024  # plus the skipped-bytes marker lines and inventory
    rels = [s.rel for s in sources]
    # the tail's calls repeat the head's: their text is kept once
    assert rels[0] == "logs/model-calls.jsonl#1" and sum(r.startswith("logs/model-calls.jsonl#") for r in rels) == 2000
    assert not any(r.startswith("logs/agent.") or r.endswith(".log") for r in rels)
    assert "workspace/pipe.py" not in rels and "workspace/train00.py" in rels
    assert "bytes not read ...]" in next(s.text for s in sources if s.rel == "workspace/train00.py")


@pytest.mark.slow  # a run folder of gigabyte logs and a 1500-level tree
def test_judge_and_stages_finish_bounded(hostile_run):
    floor = baseline_rss_mb()
    out = peak_rss_of(f"""
        from pathlib import Path
        from pytest_rexmle.capability import get_judge
        from pytest_rexmle.capability.stages import stage_scores
        run = Path({str(hostile_run)!r})
        judge = get_judge("rules")
        doc = judge.judge_run(run, "isles22")
        stages = stage_scores(run, "isles22", None, judge)
        out["failures"] = [r["score"] for r in doc["strategies"] if r["id"] == "analyze_failures"] \\
            if isinstance(doc["strategies"][0], dict) and "id" in doc["strategies"][0] else None
        out["S3"] = stages["stages"][2]["score"]
        out["warnings"] = stages["usage"].get("warnings")
    """, timeout=300)
    assert out["warnings"] == ["logs/usage.json is a FIFO, not a regular file",
                               "workspace/rexmle-usage.json is a FIFO, not a regular file"]
    assert out["S3"] > 0  # the validation metric at the head of the log was seen
    assert out["peak_mb"] < floor + 300, out
    assert out["seconds"] < 120, out  # the goal (< 10 s on an idle machine) is measured in benchmarks/


def test_literal_indexed_search_equals_the_full_pattern():
    """The rules judge's speed-up (candidate lines by literal, per-pattern search) never changes a
    match: same span for every group on every line of the rule tests' corpus and of crafted lines."""
    from pytest_rexmle.capability.rules import RULES, STAGE_RULES, Line, Lines
    from pytest_rexmle.capability.trace import TRACE, Source

    from ..capability.test_rules import CASES

    corpus = [line for (pos, files), (neg, nfiles) in CASES.values()
              for text in (pos, neg, *files.values(), *nfiles.values()) for line in text.splitlines()]
    corpus += ["ValueError: x then Traceback (most recent call last)", "loss nan loss=nan NaN LOSS",
               "step 1: plan: first load then train", "OOM oom CUDA out of memory", "a" * 5000 + "Error: x"]
    src = Source("logs/model-calls.jsonl#1", TRACE, "\n".join(corpus))
    lines = Lines([Line(i, src, i, t, t.lower()) for i, t in enumerate(corpus)])
    groups = [g for r in RULES.values() for g in r.groups] + [g for gs in STAGE_RULES.values() for g in gs]
    checked = 0
    for grp in groups:
        for index, text in enumerate(corpus):
            full = grp.pattern.search(text)
            fast = lines.search(grp, index)
            assert (full.span() if full else None) == (fast.span() if fast else None), (grp.what, text[:80])
            checked += full is not None
    assert checked > 30
