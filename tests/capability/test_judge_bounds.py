"""Issue 32: the judge runs in bounded time, and only calls a provider answered are evidence.

* Hostile lines (a million letters, digits, a word repeated with no separator, ``wget`` or ``label(``
  repeated with nothing after them) are judged in seconds: one quadratic pattern on a 1 M-letter line
  held a session for ~50 min after grading, and ``--rexmle-resume`` hung on it again.
* Every rules pattern stays fast on a 4,000-character piece (the size lines are matched in) built from
  its own words: the fuzz-like audit that found the quadratic ones.
* A judge that runs out of its clock (``time_limit``) writes "judge timed out" in the run's documents,
  which stay valid; S4/S5 are still measured.
* A trajectory of refused calls (zero budget: nothing reached a provider) earns nothing, with either
  judge; the same text in answered calls earns what it shows.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from pytest_rexmle.capability import CapabilityRun, get_judge
from pytest_rexmle.capability.clock import TIMED_OUT
from pytest_rexmle.capability.rules import COMMENT, HEDGE, MAX_LINE_CHARS, RULES, STAGE_RULES, _up_to, _word_with
from pytest_rexmle.capability.schema import NO_TRACE_FLAG
from pytest_rexmle.capability.stages import StageScores, stage_scores
from pytest_rexmle.data.synthetic import ensure_synthetic
from pytest_rexmle.errors import RexmleError
from pytest_rexmle.graders.base import load_grader
from pytest_rexmle.task import registry

from ..hostile.helpers import peak_rss_of
from .helpers import ChatServer, make_run, model_call, write_model_calls
from .test_observed import _forged_claims

MILLION = 1_000_000
#: one line each, a million characters: the shapes that were quadratic, and plain runs of each class
HOSTILE_LINES = {"letters": "a" * MILLION, "digits": "7" * MILLION, "underscores": "_" * MILLION,
                 "window": "window" * (MILLION // 6), "save": "save" * (MILLION // 4), "wget": "wget " * (MILLION // 5),
                 "label": "label(" * (MILLION // 6), "dots": "a." * (MILLION // 2), "spaces": "a " * (MILLION // 2)}


def test_a_million_letter_line_and_other_hostile_shapes_are_judged_in_seconds(tmp_path):
    """In a fresh interpreter with a timeout: on the quadratic patterns this took ~50 min, not a failure
    message. The judge finishes (no "judge timed out"), capability and stages both."""
    run = make_run(tmp_path / "run", [f"$ python train.py\n{line}" for line in HOSTILE_LINES.values()])
    out = peak_rss_of(f"""
        from pytest_rexmle.capability import get_judge
        from pytest_rexmle.capability.stages import stage_scores
        judge = get_judge("rules")
        doc = judge.judge_run({str(run)!r}, "isles22")
        stages = stage_scores({str(run)!r}, "isles22", None, judge)
        out["flags"] = doc["flags"]
        out["evidence"] = [s["evidence"] for s in stages["stages"][:3]]
    """, timeout=240)
    print(f"9 hostile 1 M-character lines: {out['seconds']:.1f} s wall, {out['cpu_seconds']:.1f} s CPU")
    assert out["flags"] == [] and not any(TIMED_OUT in e for e in out["evidence"]), out
    assert out["cpu_seconds"] < 30, out  # ~3 s on an idle machine


def _pattern_parts():
    for rule in RULES.values():
        for grp in rule.groups:
            for part, _ in grp.parts:
                yield f"{rule.key}: {grp.what}", part
        if rule.exclude is not None:
            yield f"{rule.key}: exclude", rule.exclude
    for stage, groups in STAGE_RULES.items():
        for grp in groups:
            for part, _ in grp.parts:
                yield f"{stage}: {grp.what}", part
    yield "hedge", HEDGE
    yield "comment", COMMENT


def _pieces(pattern: re.Pattern):
    """4,000-character pieces of each word of the pattern repeated, bare and with separators, and runs of
    single characters: where a backtracking pattern spends its time."""
    words = {w.lower() for w in re.findall(r"[A-Za-z]{2,}", pattern.pattern)} | {"a", "1", "_"}
    for word in sorted(words):
        for sep in ("", " ", "_", ".", "-", "/", "(", "\t", " = ", ": "):
            unit = word + sep
            yield unit, (unit * (MAX_LINE_CHARS // len(unit) + 1))[:MAX_LINE_CHARS]
    for char in " .-_/=([0,a1\t#:":
        yield char, char * MAX_LINE_CHARS


def test_every_rules_pattern_is_fast_on_hostile_pieces():
    """Each search of one piece stays under 50 ms (best of three, the machine may be busy: a piece is timed again
    only when its first search took longer); the quadratic patterns took 0.1 to 9 s per piece, so a million
    characters of them took minutes to hours."""
    slow = []
    for name, pattern in _pattern_parts():
        for unit, piece in _pieces(pattern):
            best = _timed(pattern, piece)
            if best > 0.05:
                best = min(best, _timed(pattern, piece), _timed(pattern, piece))
            if best > 0.05:
                slow.append((round(best, 3), name, unit, pattern.pattern[:80]))
    assert slow == []


def _timed(pattern: re.Pattern, text: str) -> float:
    start = time.perf_counter()
    pattern.search(text)
    return time.perf_counter() - start


#: (quadratic form, its linear rewrite as it appears in the rule, the rule, words of random lines)
REWRITES = [
    (r"(window|clip)\w*.{0,60}(?-i:\bHU\b)", _word_with("window|clip") + r".{0,60}(?-i:\bHU\b)", "domain_knowledge",
     ["window", "clip", "Window", "_", "a", " ", "HU", "hu", ".", "=", "np.", "x" * 30, "é"]),
    (r"save\w*.{0,20}\bbest\b", _word_with("save") + r".{0,20}\bbest\b", "S3",
     ["save", "d", "_", " ", "best", "Best", "x" * 12, ".", "the ", "auto"]),
    (r"\w+_Weights\.(DEFAULT|IMAGENET1K\w*)", r"\b\w++(?<=\w_weights)\.(DEFAULT|IMAGENET1K\w*)", "external_data",
     ["ResNet50", "_Weights", "_weights", ".", "DEFAULT", "IMAGENET1K_V1", "_", " ", "a", "models."]),
    (r"\b(wget|curl)\s+.*https?://", _up_to(r"\b(?:wget|curl)\s", r"https?://"), "external_data",
     ["wget", "curl", " ", "\t", "https://", "http://", "-O x", "a", "x.com/", "wgetwget"]),
    (r"\blabel\([^)]*connectivity", _up_to(r"\blabel\(", "connectivity", "[^)]"), "postprocessing",
     ["label(", "measure.", "mask", ", ", "connectivity", ")", "(", "=2", "x", "label"]),
]


@pytest.mark.parametrize(("old", "new", "rule", "words"), REWRITES, ids=[r[2] + ":" + r[0][:12] for r in REWRITES])
def test_rewritten_patterns_match_the_same_lines(old, new, rule, words):
    """The linear forms accept exactly the lines the quadratic ones did (random lines of their words), and
    they are the ones the rules use."""
    import random

    groups = STAGE_RULES[rule] if rule in STAGE_RULES else RULES[rule].groups
    assert any(new in part.pattern for grp in groups for part, _ in grp.parts), new
    before, after = re.compile(old, re.IGNORECASE), re.compile(new, re.IGNORECASE)
    rng = random.Random(32)
    seen = 0
    for _ in range(30_000):
        line = "".join(rng.choice(words) for _ in range(rng.randint(1, 12)))
        matched = before.search(line) is not None
        assert (after.search(line) is not None) == matched, line
        seen += matched
    assert seen > 300


def test_selecting_by_saving_the_best_still_matches():
    s3 = STAGE_RULES["S3"][2].pattern
    assert s3.search("autosaved the best checkpoint") and s3.search("model.save(...)  # best so far")
    assert not s3.search("save_best_only=True")  # as before: "best" inside the word is not the word


# -- the clock -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ldct(tmp_path_factory):
    task = registry().get("ldct-iqa")
    return task, ensure_synthetic(task, tmp_path_factory.mktemp("cache")).public


def test_a_judge_out_of_time_says_so_and_its_documents_stay_valid(tmp_path, ldct):
    task, public = ldct
    run = make_run(tmp_path / "run", _forged_claims())  # would earn every strategy with time to judge it
    load_grader(task).write_baseline(public, run / "submission")
    judge = get_judge("rules", time_limit="0")
    doc = judge.judge_run(run, task)
    CapabilityRun.check(doc)
    [flag] = doc["flags"]
    assert flag.startswith(f"{TIMED_OUT} after 0 s (") and [r["score"] for r in doc["strategies"]] == [0] * 13
    assert json.loads((run / "capability.json").read_text()) == doc
    stages = stage_scores(run, task, public, judge)
    StageScores.check(stages)
    assert [s["score"] for s in stages["stages"]] == [0.0, 0.0, 0.0, 1.0, 1.0]
    assert all(s["evidence"].startswith(TIMED_OUT) for s in stages["stages"][:3])
    # with its time, the same run is judged
    assert sum(r["score"] for r in get_judge("rules").judge_run(run, task)["strategies"]) >= 10


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "soon"])
def test_time_limit_must_be_seconds(value):
    with pytest.raises(RexmleError, match="time_limit"):
        get_judge("rules", time_limit=value)


def test_llm_judge_stops_at_its_clock_and_records_what_it_spent(tmp_path):
    def slow(body: dict) -> str:
        time.sleep(0.6)
        return json.dumps({"results": []})

    with ChatServer(slow) as server:
        judge = get_judge("llm", base_url=server.base_url, model="m", backoff="0", time_limit="1",
                          section_chars="200")
        run = make_run(tmp_path / "run", "\n".join(f"line {i} " + "x" * 100 for i in range(40)))  # ~27 sections
        start = time.monotonic()
        doc = judge.judge_run(run, "isles22")
        elapsed = time.monotonic() - start
    CapabilityRun.check(doc)
    assert doc["flags"][0].startswith(f"{TIMED_OUT} after 1 s"), doc["flags"]
    assert elapsed < 5 and 1 <= doc["judge_usage"]["requests"] <= 3, (elapsed, doc["judge_usage"])


# -- refused calls are no evidence -------------------------------------------------------------------------

def _refused(text: str, *, status: int = 429, flag: bool = False, response=None) -> dict:
    """A call as the gateway records a refusal (GatewayRun.refuse): the agent's request, no answer."""
    record = model_call(text)
    record.update(status=status, response=response, usage=None, duration_s=0.0,
                  error="rexmle gateway: this run's budget ran out: requests 0 of 0")
    if flag:
        record["refused"] = True
    return record


def _refused_only_run(root, claims: str):
    run = make_run(root)
    write_model_calls(run, [_refused(claims), _refused(claims + "\n#2", flag=True),
                            _refused(claims + "\n#3", status=200, flag=True, response={"choices": []}),
                            _refused(claims + "\n#4", status=502),
                            _refused(claims + "\n#5", status=400, response={"error": {"message": "bad request"}})])
    return run


def test_refused_calls_earn_no_strategy_and_no_stage(tmp_path, ldct):
    """requests=0: nothing reached a provider, yet the refused requests' text earned 13/13 and S1–S5 = 1."""
    task, public = ldct
    claims = _forged_claims()
    run = _refused_only_run(tmp_path / "refused", claims)
    load_grader(task).write_baseline(public, run / "submission")
    judge = get_judge("rules")
    doc = judge.judge_run(run, task)
    CapabilityRun.check(doc)
    assert [r["score"] for r in doc["strategies"]] == [0] * 13 and doc["flags"] == [NO_TRACE_FLAG]
    stages = stage_scores(run, task, public, judge)
    assert [s["score"] for s in stages["stages"]] == [0.0, 0.0, 0.0, 1.0, 1.0]
    # the same text, answered by a provider, is judged
    answered = make_run(tmp_path / "answered", claims)
    assert sum(r["score"] for r in judge.judge_run(answered, task)["strategies"]) >= 10


def test_refused_calls_are_never_sent_to_the_llm_judge(tmp_path):
    claims = "\n".join(f"EVIDENCE-{i}" for i in range(1, 14)) + "\nPLAN-DONE SETUP-DONE VALID-DONE\n"
    with ChatServer() as server:
        judge = get_judge("llm", base_url=server.base_url, model="m", backoff="0")
        run = _refused_only_run(tmp_path / "run", claims)
        doc = judge.judge_run(run, "isles22")
        stages = stage_scores(run, "isles22", None, judge)
        assert server.requests == [] and doc["flags"] == [NO_TRACE_FLAG]
        assert [s["score"] for s in stages["stages"][:3]] == [0.0, 0.0, 0.0]


def test_observed_trace_counts_refused_calls_apart(tmp_path):
    from pytest_rexmle.capability.observed import read_model_calls

    run = _refused_only_run(tmp_path / "run", "some text")
    write_model_calls(run, [model_call("$ python train.py", reply="epoch 1")])
    trace = read_model_calls(run)
    assert (trace.n_calls, trace.refused) == (6, 5)
    [call] = trace.calls
    assert call.number == 6 and call.texts == ["$ python train.py", "epoch 1"]  # numbered as in the file


# -- whole sessions ----------------------------------------------------------------------------------------

def test_a_session_whose_judge_runs_out_writes_stages_capability_and_report(bench, needs_bwrap):
    from ..conftest import report_dir, report_json, run_folders

    result = bench("--agent=sample", "-k", "ldct-iqa", "--rexmle-judge-option=time_limit=0")
    result.assert_outcomes(passed=1)
    [run] = run_folders(bench.path, "ldct-iqa")
    capability = json.loads((run / "capability.json").read_text())
    assert capability["flags"][0].startswith(f"{TIMED_OUT} after 0 s"), capability["flags"]
    stages = json.loads((run / "stages.json").read_text())
    assert [s["evidence"].startswith(TIMED_OUT) for s in stages["stages"]] == [True, True, True, False, False]
    assert stages["stages"][4]["score"] == 1.0  # the submission is measured all the same
    assert report_json(bench.path)["tasks"][0]["status"] == "ok"
    session = json.loads((report_dir(bench.path) / "rexmle-capability.json").read_text())
    assert session["agents"][0]["runs"][0]["flags"] == capability["flags"]


def test_resume_judges_a_hostile_record_in_seconds(bench, needs_bwrap):
    """The issue's session: result.json written, then the judge held the session on a 1 M-letter call
    (no stages, capability or report), and --rexmle-resume hung on it again."""
    from ..conftest import report_json, run_folders

    bench("--agent=sample", "-k", "ldct-iqa").assert_outcomes(passed=1)
    [run] = run_folders(bench.path, "ldct-iqa")
    write_model_calls(run, [model_call("$ python train.py\n" + "a" * MILLION, reply="epoch 1 train_loss=0.5")])
    (run / "capability.json").unlink()
    start = time.monotonic()
    bench("--agent=sample", "-k", "ldct-iqa", "--rexmle-resume", timeout=240).assert_outcomes(passed=1)
    print(f"resumed session with a 1 M-letter call: {time.monotonic() - start:.1f} s")
    assert run_folders(bench.path, "ldct-iqa") == [run]  # resumed, not run again
    capability = json.loads((run / "capability.json").read_text())
    assert capability["flags"] == [], capability["flags"]  # judged to the end, not timed out
    stages = json.loads((run / "stages.json").read_text())
    assert "training runs: logs/model-calls.jsonl#" in stages["stages"][1]["evidence"]
    assert report_json(bench.path)["tasks"][0]["status"] == "ok"


def test_a_calls_request_and_response_lines_are_one_call_and_its_request_is_evidence(tmp_path):
    """The gateway writes a call's request before the answer and its response after: the judge joins them
    (the request's text counts once the response says the provider answered), and a request whose call
    never got an answer is no evidence."""
    from pytest_rexmle.capability.observed import read_model_calls

    logs = tmp_path / "logs"
    logs.mkdir()
    lines = [
        {"call": 1, "phase": "request", "request": {"messages": [{"role": "user", "content": "five-fold cross validation"}]}},
        {"call": 2, "phase": "request", "request": {"messages": [{"role": "user", "content": "test-time augmentation"}]}},
        {"call": 1, "phase": "response", "status": 200, "response": {"choices": [{"message": {"content": "done"}}]}},
        {"call": 2, "phase": "response", "status": 502, "response": None, "error": "upstream failed"},
    ]
    (logs / "model-calls.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    trace = read_model_calls(tmp_path)
    assert [c.number for c in trace.calls] == [1] and trace.n_calls == 2 and trace.refused == 1
    assert trace.calls[0].texts == ["five-fold cross validation", "done"]
