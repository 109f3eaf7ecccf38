"""``rexmle export harbor``: real sessions' runs as a Harbor job folder.

Two sessions share a folder: the sample agent on two challenges (graded), and an agent that sleeps past a
2 s limit (a timeout). The export must give one trial per run with the reward = the percentile, the
timeout as Harbor's ``AgentTimeoutError`` (graded, reward 0), each trial's ATIF trajectory, and the job's
stats and mean reward as Harbor counts them. Where Harbor itself installs (Python 3.12 and later; this
project's CI runs 3.11), the last test loads the folder with Harbor's own scanner and models.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_rexmle.cli import main
from pytest_rexmle.report.atif import load

from ..conftest import AGENTS


@pytest.fixture
def job(bench, needs_bwrap, tmp_path, capsys) -> Path:
    bench("--agent=sample", "-k", "ldct-iqa or isles22", "--rexmle-judge=none").assert_outcomes(passed=2)
    bench("--agent=command", f"--agent-option=dir={AGENTS / 'sleeper'}", "--agent-option=cmd=python agent.py harbor",
          "--rexmle-time-limit=2", "-k", "ldct-iqa", "--rexmle-judge=none").assert_outcomes(failed=1)
    out = tmp_path / "jobs"
    assert main(["export", "harbor", str(bench.path / ".rexmle" / "runs"), "--out", str(out)]) == 0
    assert "3 trial(s) in the Harbor job" in capsys.readouterr().out
    (folder,) = out.iterdir()
    return folder


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def test_each_run_is_a_trial_with_its_reward_usage_trajectory_and_the_job_counts(job):
    trials = {p.name: _json(p / "result.json") for p in job.iterdir() if p.is_dir()}
    assert len(trials) == 3
    by_agent = {}
    for name, trial in trials.items():
        record = trial["rexmle"]["result"]
        assert name == trial["trial_name"] and name.startswith(f"{record['task_id']}__")
        assert trial["task_name"] == record["task_id"] and trial["source"] == "rexmle"
        assert trial["agent_info"]["name"] == record["agent"]
        assert trial["verifier_result"]["rewards"] == {"reward": record["percentile"]}
        assert (job / name / "verifier" / "reward.txt").read_text() == f"{record['percentile']}\n"
        assert trial["agent_result"]["n_input_tokens"] == 0 and trial["agent_result"]["cost_usd"] == 0.0
        assert _json(job / name / "config.json")["task"] == {"path": f"rexmle/{record['task_id']}",
                                                             "source": "rexmle"}
        assert load(job / name / "agent" / "trajectory.json").schema_version == "ATIF-v1.7"
        by_agent.setdefault(record["agent"], []).append(trial)
    (timed_out,) = by_agent["command"]
    assert timed_out["rexmle"]["result"]["status"] == "timeout"
    assert timed_out["exception_info"]["exception_type"] == "AgentTimeoutError"
    assert "time limit of 2 s exceeded" in timed_out["exception_info"]["exception_message"]
    assert timed_out["verifier_result"]["rewards"] == {"reward": 0.0}
    assert all(t["exception_info"] is None for t in by_agent["sample"])
    # the job counts as Harbor's JobStats.increment and its default metric (the mean reward) would
    result = _json(job / "result.json")
    assert result["n_total_trials"] == 3
    stats = result["stats"]
    assert (stats["n_completed_trials"], stats["n_errored_trials"]) == (3, 1)
    sample, command = stats["evals"]["sample__rexmle"], stats["evals"]["command__rexmle"]
    assert (sample["n_trials"], sample["n_errors"], command["n_trials"], command["n_errors"]) == (2, 0, 1, 1)
    assert command["exception_stats"] == {"AgentTimeoutError": [p.name for p in job.glob("ldct-iqa__*")
                                                                if _json(p / "result.json")["agent_info"]["name"]
                                                                == "command"]}
    percentiles = [_json(p / "result.json")["rexmle"]["result"]["percentile"] for p in job.iterdir()
                   if p.is_dir() and _json(p / "result.json")["agent_info"]["name"] == "sample"]
    assert sample["metrics"] == [{"mean": sum(percentiles) / 2}]  # the agent's ReX-MLE score over the two


def test_harbor_loads_the_job(request):
    """Harbor's own loaders (its viewer's scanner) and its own counting of the same trials."""
    pytest.importorskip("harbor.viewer.scanner", reason="Harbor is not installed (it needs Python 3.12 or later)")
    job = request.getfixturevalue("job")
    from harbor.metrics.mean import Mean
    from harbor.models.job.result import JobStats
    from harbor.viewer.scanner import JobScanner

    scanner = JobScanner(job.parent)
    assert scanner.list_jobs() == [job.name]
    assert scanner.get_job_config(job.name) is not None
    loaded = scanner.get_job_result(job.name)
    assert loaded is not None
    trials = [scanner.get_trial_result(job.name, name) for name in scanner.list_trials(job.name)]
    assert len(trials) == 3 and all(t is not None for t in trials)
    assert all(scanner.get_trial_config(job.name, name) is not None for name in scanner.list_trials(job.name))
    own = JobStats.from_trial_results(trials, n_total_trials=3)
    for key, stats in own.evals.items():
        rewards = [t.verifier_result.rewards if t.verifier_result else None for t in trials
                   if f"{t.agent_info.name}__rexmle" == key]
        stats.metrics = [Mean().compute(rewards)]
    assert own.model_dump(mode="json") == loaded.stats.model_dump(mode="json")


@pytest.mark.parametrize("kind", ["harbor", "atif"])
def test_a_task_name_from_the_run_folder_never_leaves_the_export(tmp_path, capsys, kind):
    """run.json sits in a folder the agent could write: a task named ``../../x`` must not place a folder
    outside --out (before: ``atif`` wrote ``<out>/../../x__<run>``): the export is refused, nothing written."""
    run = tmp_path / "runs" / "x" / "20261128T000000-1"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"task": "../../escaped", "agent": "sample"}))
    out = tmp_path / "deep" / "er" / "out"
    assert main(["export", kind, str(run), "--out", str(out)]) == 2
    assert "not a plain name" in capsys.readouterr().err
    assert not list(tmp_path.rglob("escaped*"))
    assert not list(out.rglob("*__20261128T000000-1")) if out.exists() else True


@pytest.mark.parametrize("kind", ["harbor", "atif"])
def test_an_out_that_cannot_be_written_is_one_line(tmp_path, capsys, kind):
    """Before: a NotADirectoryError traceback."""
    run = tmp_path / "runs" / "x" / "20261128T000000-1"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"task": "ldct-iqa", "agent": "sample"}))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["export", kind, str(run), "--out", str(blocker)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rexmle export: cannot write ") and "Not a directory" in err and "Traceback" not in err
    assert err.count("\n") == 1
