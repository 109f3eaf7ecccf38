"""``--rexmle-repeat N`` end to end: real sessions, real sandboxed runs of the ``command`` agent on synthetic
twins. Each repeat is its own item, run, JUnit case and report row; a killed campaign resumes with each item
taking back its own finished run (none lost, none shared); ``-x`` starts no run once the failure is known."""

from __future__ import annotations

import json
import signal
import time
from datetime import datetime
from pathlib import Path

import pytest

from pytest_rexmle.report.junit import read_cases

from ..conftest import report_json, run_folders
from .conftest import COPY_BASELINE, baseline_agent, spawn

#: breaks the setup of one repeat after its task is known (a harness error, as a broken fixture would be)
BREAKER = '''import pytest


@pytest.fixture(autouse=True)
def _break_one_repeat(request, rexmle_task):
    if request.node.name == "test_task[ldct-iqa-r2]":
        raise RuntimeError("the harness broke on this repeat")
'''


def _finished(folder: Path, tasks: list[str]) -> list[Path]:
    return [f for t in tasks for f in run_folders(folder, t) if (f / "result.json").exists()]


def _board(folder: Path) -> Path:
    return sorted((folder / ".rexmle" / "runs" / ".schedule").iterdir())[-1]


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["one-process", "xdist-2"])
def test_each_repeat_is_its_own_item_run_and_row_and_an_error_is_not_hidden(bench, needs_bwrap, xdist):
    (bench.path / "breaker.py").write_text(BREAKER)
    agent = baseline_agent(bench.path, ["ldct-iqa"])
    result = bench("-p", "breaker", "--agent=command", f"--agent-option=dir={agent}",
                   f"--agent-option=cmd={COPY_BASELINE}", "--rexmle-repeat=3", "-k", "ldct-iqa",
                   "--junitxml=junit.xml", "-rA", *xdist)
    result.assert_outcomes(passed=2, errors=1)
    cases = read_cases(bench.path / "junit.xml")  # xunit2: each case's properties on the suite, by case name
    assert sorted(cases) == [f"test_task[ldct-iqa-r{r}]" for r in (1, 2, 3)]
    for name, props in cases.items():
        assert props["repeat"] == name[-2]
    folders = run_folders(bench.path, "ldct-iqa")
    metas = [json.loads((f / "run.json").read_text()) for f in folders]  # the identity reached each run's harness
    assert sorted((m["repeat"], m["key"].get("repeat")) for m in metas) == [(1, None), (2, 2), (3, 3)]
    doc = report_json(bench.path)
    assert doc["selected"] == ["ldct-iqa"] and doc["repeats"] == 3 and doc["n_runs"] == 3
    assert [(c["repeat"], c["status"]) for c in doc["tasks"]] == [(1, "ok"), (2, "error"), (3, "ok")]
    assert doc["n_error"] == 1  # the error of r2 is not masked by its ok siblings
    ok = [c["percentile"] for c in doc["tasks"] if c["status"] == "ok"]
    assert doc["score"] == pytest.approx(sum(ok) / 3)  # the mean over the three repeats, the error as 0
    row = doc["aggregate"][0]["tasks"][0]
    assert row["counts"] == {"ok": 2, "error": 1} and row["n_runs"] == 3
    result.stdout.fnmatch_lines(["*ldct-iqa: mean * over 3 runs (SEM *, interval *): 2 ok, 1 ERROR",
                                 "*over 1 task(s) (3 runs, 3 repeats each), 0 FAIL, 1 ERROR*"])
    runs_with_results = [f for f in folders if (f / "result.json").exists()]
    assert len(runs_with_results) == 2  # r2's run was done, but its item broke before grading it


def test_a_killed_campaign_with_repeats_resumes_each_item_from_its_own_run(bench, needs_bwrap, tmp_path):
    """The issue's case, small: kill -9 of the controller mid-campaign, then --rexmle-resume. Before, every
    repeat of a challenge resumed the newest finished run of it (items sharing one run folder, the other
    finished runs dropped) and re-ran the rest."""
    tasks = ["isles22", "ldct-iqa"]
    agent = baseline_agent(tmp_path, tasks)
    args = ("--agent=command", f"--agent-option=dir={agent}", f"--agent-option=cmd=sleep 2; {COPY_BASELINE}",
            "--rexmle-gpus=none", "--rexmle-parallel=2", "--rexmle-repeat=3", "-k", " or ".join(tasks))
    session = spawn(bench.path, *args)
    try:
        deadline = time.monotonic() + 240
        while len(_finished(bench.path, tasks)) < 2:
            assert time.monotonic() < deadline and session.poll() is None, "no run finished"
            time.sleep(0.2)
        session.send_signal(signal.SIGKILL)
        session.wait(timeout=60)
    finally:
        session.kill()
    time.sleep(3)  # the runs in flight see their parent gone (PDEATHSIG) and clean up
    before = {f: json.loads((f / "run.json").read_text())["repeat"] for f in _finished(bench.path, tasks)}
    assert 2 <= len(before) < 6, f"the kill came too late to test a resume: {len(before)} runs finished"

    result = bench(*args, "--rexmle-resume")
    result.assert_outcomes(passed=6)
    doc = report_json(bench.path)
    used = [Path(c["run_dir"]) for c in doc["tasks"]]
    assert len(doc["tasks"]) == 6 and len(set(used)) == 6, "two items shared one run folder"
    lost = set(before) - set(used)
    assert not lost, f"{len(lost)} finished run(s) were not resumed: {sorted(map(str, lost))}"
    finished = _finished(bench.path, tasks)
    assert len(finished) == 6, f"{len(finished) - 6} run(s) ran again although they had finished"
    for rec in doc["tasks"]:  # each item took back its own repeat's run
        assert json.loads((Path(rec["run_dir"]) / "run.json").read_text())["repeat"] == rec["repeat"]
    states = [r["state"] for r in doc["campaign"]["runs"]]
    assert states.count("resumed") == len(before) and states.count("done") == 6 - len(before)


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["one-process", "xdist-2"])
def test_x_starts_no_run_once_the_failure_is_known(bench, needs_bwrap, xdist):
    """The first item fails (no submission); under -x the queued runs are skipped, none starts after."""
    tasks = ["cellseg", "dentex", "isles22", "ldct-iqa", "seg-a"]
    result = bench("--agent=command", "--agent-option=cmd=sleep 3", "--rexmle-gpus=none", "--rexmle-parallel=1",
                   "-x", *xdist, "-k", " or ".join(tasks), "-rs")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 1 and not outcomes.get("passed"), outcomes
    board = _board(bench.path)
    stopped = json.loads((board / "stopped.json").read_text())
    assert stopped["reason"].startswith("the session stopped (-x)")
    stop = datetime.fromisoformat(stopped["at"])
    runs = report_json(bench.path)["campaign"]["runs"]  # every run the executor started, by its own clock
    late = {r["task"]: r["started_at"] for r in runs if datetime.fromisoformat(r["started_at"]) > stop}
    assert not late, f"runs started after pytest decided to stop at {stop}: {late}"
    records = {r["task"]: r for r in map(json.loads, map(Path.read_text, board.glob("run-*.json")))}
    skipped = [t for t in tasks if records[t]["state"] == "skipped"]
    assert len(skipped) >= 3, records  # at most the first run and the one started before the failure ran
    assert all(records[t]["reason"].startswith("the session stopped (-x)") for t in skipped)
    assert len(runs) == len(tasks) - len(skipped) and not any(run_folders(bench.path, t) for t in skipped)


#: how benchmarks/bench_slurm.py repeats runs: a module of your own parametrizing its test
REPEAT_MODULE = '''import pytest


@pytest.mark.parametrize("repeat", range(3))
def test_repeat(rexmle_result, repeat):
    assert rexmle_result.status == "ok"
'''


def test_repeats_of_a_module_of_your_own_are_rows_of_their_own_and_resume_their_own_runs(bench, needs_bwrap):
    """Before, the report kept one row for the three items (one run standing for three), and a resumed
    session gave all three the newest finished run."""
    (bench.path / "test_mine.py").write_text(REPEAT_MODULE)
    args = ("--agent=sample", "test_mine.py", "-k", "test_repeat and ldct-iqa")
    bench(*args).assert_outcomes(passed=3)
    doc = report_json(bench.path)
    assert doc["repeats"] == 3 and doc["n_runs"] == 3 and doc["selected"] == ["ldct-iqa"]
    assert sorted(c["repeat"] for c in doc["tasks"]) == [1, 2, 3]
    first = {Path(c["run_dir"]) for c in doc["tasks"]}
    assert len(first) == 3 and doc["aggregate"][0]["tasks"][0]["counts"] == {"ok": 3}
    items = sorted(json.loads((f / "run.json").read_text())["key"]["item"] for f in first)
    assert items == [f"test_mine.py::test_repeat[ldct-iqa-{r}]" for r in range(3)]

    bench(*args, "--rexmle-resume").assert_outcomes(passed=3)
    again = report_json(bench.path)
    assert {Path(c["run_dir"]) for c in again["tasks"]} == first  # each item took back its own run
    assert len(run_folders(bench.path, "ldct-iqa")) == 3
    assert [r["state"] for r in again["campaign"]["runs"]] == ["resumed"] * 3
