"""The capability documents (their schema: pytest_rexmle/capability/schema.py): normalisation, per-run OR over
sections, per-agent means, and the validators."""

from __future__ import annotations

import copy
import shutil

import pytest

from pytest_rexmle.capability import AgentCapability, CapabilityRun, SessionCapability, aggregate, session_document
from pytest_rexmle.capability.schema import MISSING, normalise_results, run_document, score_value
from pytest_rexmle.capability.strategies import STRATEGIES_PATH, load_strategies
from pytest_rexmle.capability.trace import collect_sources, split_sections, strip_code_blocks, trace_text

from ..reference import reference_sha256, sha256
from .helpers import make_run

JUDGE = {"name": "rules", "model": "rules", "params": {}, "prompt_version": "rules-1"}


def _section(label: str, ones: set[int]) -> dict:
    return {"label": label, "flagged": False,
            "results": [{"id": s.id, "strategy": s.name, "score": int(s.id in ones), "evidence": f"{label}:{s.id}"}
                        for s in load_strategies()]}


def _run(agent: str, cid: str, *sections: set[int], seed: int = 0) -> dict:
    secs = [_section(f"{cid}-section-{i}", ones) for i, ones in enumerate(sections, start=1)]
    return run_document(agent=agent, task_id=cid, seed=seed, run_dir=f"/runs/{cid}/{seed}", judge=JUDGE,
                        sections=secs, flags=[])


def test_packaged_strategies_are_the_reference_file():
    assert sha256(STRATEGIES_PATH) == reference_sha256("_common/strategies.json")
    assert [s.id for s in load_strategies()] == list(range(1, 14))
    assert load_strategies()[12].name == "Optimizing hyperparameters systematically"


@pytest.mark.parametrize("value,expected", [(1, 1), (1.0, 1), ("1", 1), (" 1 ", 1), ("1.0", 1), (True, 0), (0, 0),
                                            (2, 0), (0.5, 0), ("yes", 0), (None, 0), ([1], 0)])
def test_score_value(value, expected):
    assert score_value(value) == expected


def test_normalise_results_follows_section_3():
    raw = [{"id": 2, "strategy": "whatever", "score": "1", "evidence": "first"},
           {"id": 2, "score": 0, "evidence": "second, ignored"},
           {"id": 99, "score": 1}, {"id": "x"}, "junk",
           {"id": "3", "score": 1.0, "evidence": 7},
           {"id": 4, "score": True}]
    rows = normalise_results(raw)
    assert [r["id"] for r in rows] == list(range(1, 14))
    assert rows[1] == {"id": 2, "strategy": "Knowing the state of the art", "score": 1, "evidence": "first"}
    assert rows[2]["score"] == 1 and rows[2]["evidence"] == "7"  # id given as "3" is still id 3
    assert rows[3]["score"] == 0  # true is not the integer 1
    assert rows[0] == {"id": 1, "strategy": "Analyzing and handling failure cases", "score": 0, "evidence": MISSING}
    assert normalise_results("not a list")[5]["evidence"] == MISSING


def test_run_score_is_or_over_sections_with_first_evidence():
    doc = _run("a", "isles22", {1}, {1, 5}, set())
    CapabilityRun.check(doc)
    assert [r["score"] for r in doc["strategies"]] == [1, 0, 0, 0, 1] + [0] * 8
    assert doc["strategies"][0]["section"] == "isles22-section-1"
    assert doc["strategies"][0]["evidence"] == "isles22-section-1:1"
    assert doc["strategies"][4]["section"] == "isles22-section-2"
    assert doc["results"][4] == {"id": 5, "strategy": "Rapid experiment iteration pipeline", "score": 1,
                                 "evidence": "isles22-section-2:5"}


def test_aggregate_hand_computed():
    runs = [_run("a", "isles22", {1}, {1, 5}, set()),     # run scores: s1=1, s5=1; 3 sections
            _run("a", "ldct-iqa", {5}),                   # s5=1; 1 section
            _run("a", "seg-a", set(), set()),             # nothing; 2 sections
            _run("b", "seg-a", {1, 2, 3})]                # another agent: ignored
    doc = aggregate(runs, "a")
    AgentCapability.check(doc)
    assert doc["n_runs"] == 3
    s1, s5, s2 = doc["strategies"][0], doc["strategies"][4], doc["strategies"][1]
    # s1: runs (1, 0, 0) -> mean 1/3, sum 1; fragments: sections scoring s1 = 2 of 6 -> 1/3
    assert (s1["mean_score"], s1["sum_score"], s1["n_runs"]) == (pytest.approx(1 / 3), 1, 3)
    assert s1["fragment_mean"] == pytest.approx(2 / 6)
    # s5: runs (1, 1, 0) -> 2/3; fragments 2 of 6
    assert (s5["mean_score"], s5["sum_score"]) == (pytest.approx(2 / 3), 2)
    assert s5["fragment_mean"] == pytest.approx(2 / 6)
    assert (s2["mean_score"], s2["sum_score"], s2["fragment_mean"]) == (0.0, 0, 0.0)
    assert [r["task_id"] for r in doc["runs"]] == ["isles22", "ldct-iqa", "seg-a"]
    assert doc["runs"][0]["scores"][:5] == [1, 0, 0, 0, 1]
    empty = aggregate([], "nobody")
    AgentCapability.check(empty)
    assert empty["n_runs"] == 0 and all(r["fragment_mean"] is None for r in empty["strategies"])


def test_session_document_groups_agents():
    runs = [_run("a", "isles22", {1}), _run("b", "isles22", {2}), _run("b", "seg-a", set())]
    doc = session_document(runs)
    SessionCapability.check(doc)
    assert [a["agent"] for a in doc["agents"]] == ["a", "b"]
    assert doc["agents"][1]["strategies"][1]["mean_score"] == 0.5
    assert doc["judge"] == JUDGE


@pytest.mark.parametrize("mutate,message", [
    (lambda d: d.update(schema="x"), "schema"),
    (lambda d: d["strategies"].pop(), "one row per strategy"),
    (lambda d: d["strategies"][0].update(score=2), "integer 0 or 1"),
    (lambda d: d["strategies"][0].update(score=True), "integer 0 or 1"),
    (lambda d: d["strategies"][1].update(strategy="Knowing SOTA"), "must be named"),
    (lambda d: d["results"][0].update(score=0), "differs"),
    (lambda d: (d["strategies"][1].update(score=1, section="isles22-section-1"),
                d["results"][1].update(score=1)), "max over sections"),
    (lambda d: d["strategies"][0].update(section="nowhere"), "section"),
    (lambda d: d["judge"].pop("prompt_version"), "prompt_version"),
    (lambda d: d.pop("seed"), "seed"),
    (lambda d: d["sections"][0].pop("flagged"), "flagged"),
])
def test_validate_capability_rejects(mutate, message):
    doc = _run("a", "isles22", {1})
    CapabilityRun.check(doc)
    bad = copy.deepcopy(doc)
    mutate(bad)
    with pytest.raises(ValueError, match=message):
        CapabilityRun.check(bad)


def test_validate_agent_capability_rejects():
    doc = aggregate([_run("a", "isles22", {1}), _run("a", "seg-a", set())], "a")
    for mutate in (lambda d: d["strategies"][0].update(mean_score=0.9),
                   lambda d: d["strategies"][0].update(sum_score=2, mean_score=1.0),
                   lambda d: d.update(n_runs=3),
                   lambda d: d["strategies"][0].update(fragment_mean=1.5),
                   lambda d: d["runs"][0]["scores"].append(1)):
        bad = copy.deepcopy(doc)
        mutate(bad)
        with pytest.raises(ValueError):
            AgentCapability.check(bad)


def test_split_sections_at_line_boundaries():
    text = "aaaa\nbbbb\ncccc\n"  # three 5-character lines
    assert split_sections(text, 10) == ["aaaa\nbbbb\n", "cccc\n"]
    assert split_sections("x" * 25 + "\nyy\n", 10) == ["x" * 10, "x" * 10, "xxxxx\nyy\n"]
    assert split_sections("", 10) == []
    long = "".join(f"line {i:05d}\n" for i in range(3000))  # 11 chars per line, 33 000 characters
    parts = split_sections(long, 15_000)
    assert "".join(parts) == long and [len(p) for p in parts] == [14_993, 14_993, 3_014]


def test_strip_code_blocks():
    text = "plan\n```python\nimport optuna\n```\nran it\n~~~\nx\n~~~\nend"
    assert strip_code_blocks(text) == "plan\nran it\nend"
    assert strip_code_blocks("a\n```\nunterminated") == "a"


def test_sources_order_and_exclusions(tmp_path):
    # the agent's own logs (stdout, stderr, logs/*.log, workspace notes) are claims: never a source;
    # workspace code is one only where the observed trace names it; skipped folders stay skipped
    run = make_run(tmp_path / "run", ["$ python train.py", "$ python scaffold.py lib.py m.py other.py"],
                   stdout="out\n", stderr="err\n", files={
        "logs/extra.log": "x\n", "logs/usage.json": "{}", "workspace/notes.md": "n\n", "workspace/train.py": "p\n",
        "workspace/agent/scaffold.py": "s\n", "workspace/.venv/lib.py": "v\n", "workspace/data.bin": "b\n",
        "workspace/site-packages/m.py": "m\n", "workspace/unused.py": "u\n"})
    (run / "workspace" / "img.log").write_bytes(b"\x00\x01binary")
    sources = collect_sources(run)
    assert [s.rel for s in sources] == ["logs/model-calls.jsonl#1", "logs/model-calls.jsonl#2", "workspace/train.py",
                                        "files"]
    assert trace_text(sources).splitlines()[:2] == ["=== logs/model-calls.jsonl#1 ===", "$ python train.py"]
    inventory = sources[-1].text
    assert "workspace/data.bin (2 bytes)" in inventory and "workspace/unused.py (2 bytes)" in inventory
    assert "=== files ===" in trace_text(sources) and "=== workspace/train.py ===" not in trace_text(sources)
    shutil.rmtree(run / "logs")  # no observed trace: no code either, only the inventory of what exists
    assert [s.rel for s in collect_sources(run)] == ["files"]