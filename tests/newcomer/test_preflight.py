"""Everything knowable is checked before the first run and reported together (issue #40): a wrong ``dir=``,
a model key the host lacks, the image, the data, the Slurm partition and account, each with its fix, in one
usage error; the header states the campaign's size. Before, each surfaced on its own attempt, some only
inside a run (a harness ERROR with a traceback, an agent FAIL with ``HTTP Error 502: Bad Gateway``)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from pytest_rexmle.agents import get_agent
from pytest_rexmle.preflight import campaign_line, model_key_problems, selected_tasks, usage_message
from pytest_rexmle.runtime.slurm import account_problems, partition_problems, slurm_minutes_of
from pytest_rexmle.settings import read_settings
from pytest_rexmle.task import registry

from ..conftest import require_service

KEYS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL",
        "GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GEMINI_BASE_URL")


def _out(result) -> str:
    return result.stdout.str() + result.stderr.str()


def _problems(text: str) -> list[str]:
    """The numbered problems of the one message (their first lines)."""
    return re.findall(r"^(\d+)\. (.*)$", text, re.M)


@pytest.mark.parametrize("kind", ["absent", "file"])
def test_wrong_dir_is_a_usage_error_before_any_run(bench, tmp_path, kind):
    """Before: the run started, and ``dir=`` failed in the agent's setup as a harness ERROR with a 20-line
    traceback inside the results table."""
    target = tmp_path / "my-agent"
    if kind == "file":
        target.write_text("print('hi')\n")
    result = bench("--agent=command", "--agent-option", "cmd=true", "--agent-option", f"dir={target}",
                   "-k", "ldct-iqa")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    out = _out(result)
    why = "does not exist" if kind == "absent" else f"is not a folder ({target}); give the folder that holds the file"
    assert f"agent 'command': option dir='{target}' {why}" in out
    assert "Traceback" not in out
    assert not (bench.path / ".rexmle" / "runs").exists(), "nothing may run before the usage error"


def test_a_wrong_env_and_a_wrong_dir_are_said_together(bench, tmp_path):
    """Two options of the same agent: one stops the agent from being made, the other is still looked at."""
    result = bench("--agent=command", "--agent-option", "cmd=true", "--agent-option", f"env={tmp_path / 'no-venv'}",
                   "--agent-option", f"dir={tmp_path / 'no-agent'}", "-k", "ldct-iqa")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    firsts = [text for _, text in _problems(_out(result))]
    assert len(firsts) == 2, _out(result)
    assert firsts[0].startswith(f"agent option env={tmp_path / 'no-venv'}: ") and "not a virtual environment" in firsts[0]
    assert firsts[1].startswith(f"agent 'command': option dir='{tmp_path / 'no-agent'}' does not exist")


def test_every_problem_in_one_message(bench, tmp_path, monkeypatch):
    """An image agent with no model key, its image not imported, and the data of six challenges not
    prepared: three problems, one message, each with its fix; before, only the image was said (then the
    data, on the next attempt), and the missing key was a ``502 Bad Gateway`` inside the run."""
    for name in KEYS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("REXMLE_CACHE_DIR", str(tmp_path / "empty-cache"))
    data = tmp_path / "no-data"
    result = bench("--agent=aide", "--rexmle-runtime=local", "--rexmle-data=prepared", f"--rexmle-data-dir={data}",
                   "-k", "topcow")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    out = _out(result)
    assert "rexmle: 3 problems stop the session before any run; fix them all, then run again:" in out
    numbered = _problems(out)
    assert [n for n, _ in numbered] == ["1", "2", "3"]
    assert numbered[0][1].startswith("agent 'aide' calls the OpenAI(-compatible) API (https://api.openai.com/v1) and "
                                     "this host has no key for it: export OPENAI_API_KEY=...")
    assert "the local runtime cannot run image 'rexmle/aide:latest' here" in numbered[1][1]
    assert numbered[2][1].startswith(f"data not prepared in {data} for 6 selected task(s)")
    # one line per download, the six TopCoW challenges in one command
    assert re.findall(r"^ +topcow \(14.4 GB download, 6 task\(s\)\): rexmle prepare (.*) --data-dir", out,
                      re.M) == ["topcow-cta-cls topcow-cta-det topcow-cta-seg topcow-mra-cls topcow-mra-det topcow-mra-seg"]
    assert "Traceback" not in out and out.count("ERROR:") == 1
    assert not (bench.path / ".rexmle" / "runs").exists()


def test_data_alone_is_still_the_note_and_a_skip(bench, tmp_path):
    """Missing data with nothing else wrong keeps its note and skips (the runs that can run, run)."""
    result = bench("--agent=sample", "--rexmle-data=prepared", f"--rexmle-data-dir={tmp_path / 'none'}",
                   "-k", "ldct-iqa")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(skipped=1)
    assert "data not prepared in" in _out(result) and "problems stop the session" not in _out(result)


@pytest.mark.parametrize(("agent", "options", "env", "want"), [
    ("aide", {}, {}, ["OPENAI_API_KEY"]),
    ("aide", {}, {"OPENAI_API_KEY": "sk-test"}, []),
    ("aide", {}, {"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"}, []),  # a server of one's own, no key
    ("aide", {"model": "claude-sonnet-4-5"}, {"OPENAI_API_KEY": "sk-test"}, ["ANTHROPIC_API_KEY"]),
    ("aide", {"model": "claude-sonnet-4-5", "feedback_model": "gpt-4o"}, {}, ["ANTHROPIC_API_KEY", "OPENAI_API_KEY"]),
    ("ml-master", {}, {}, ["OPENAI_API_KEY"]),  # deepseek-r1 and gpt-4o through the OpenAI-compatible endpoint
    ("claude-code", {}, {"OPENAI_API_KEY": "sk-test"}, ["ANTHROPIC_API_KEY"]),
    ("gemini-cli", {}, {"GOOGLE_API_KEY": "g-test"}, []),
    ("codex", {}, {"ANTHROPIC_API_KEY": "a"}, ["OPENAI_API_KEY"]),
    ("mini-swe-agent", {"model": "anthropic/claude-sonnet-4-5"}, {}, ["ANTHROPIC_API_KEY"]),
    ("mini-swe-agent", {}, {}, ["OPENAI_API_KEY"]),  # its start script's gpt-5-mini
    ("sample", {}, {}, []),
    ("command", {"cmd": "true"}, {}, []),  # declares no model: nothing to check
])
def test_model_keys_the_agent_needs(agent, options, env, want):
    problems = model_key_problems(get_agent(agent, options), "gateway", env)
    assert [re.search(r"export (\w+)=", p).group(1) for p in problems] == want


def test_no_key_check_without_a_network_and_a_broken_base_url_is_named():
    aide = get_agent("aide", {})
    assert model_key_problems(aide, "none", {}) == []
    # a key the agent may use itself (ML-Master's DeepSeek one): the check does not stop a session that may work
    assert model_key_problems(get_agent("ml-master", {}), "gateway", {"DEEPSEEK_API_KEY": "d"}) == []
    (problem,) = model_key_problems(aide, "gateway", {"OPENAI_BASE_URL": "ftp://example.org", "OPENAI_API_KEY": "k"})
    assert "OPENAI_BASE_URL" in problem and "expected an http:// or https:// URL" in problem


@pytest.mark.parametrize("args", [["-k", "topcow"], ["-k", "isles or dentex"], ["-k", "not topcow and cta"],
                                  ["-m", "segmentation and mri"], ["-k", "neurips-cellseg"], ["-k", "puma-t1-det"],
                                  ["-k", "TopBrain", "-m", "not mra"]])
def test_the_selection_known_before_collection_is_pytests(bench, pytester, args):
    """The checks and the header run before collection; they read -k/-m as pytest then applies them."""
    result = bench("--agent=sample", *args, "--collect-only", "-q")
    collected = sorted(re.findall(r"test_task\[([^\]]+)\]", result.stdout.str()))
    assert collected
    config = pytester.parseconfig("--agent=sample", *args)
    assert sorted(t.id for t in selected_tasks(config, read_settings(config))) == collected


def test_the_header_states_the_campaign(bench):
    result = bench("--agent=sample,command", "--agent-option", "command:cmd=true", "-k", "topcow",
                   "--rexmle-time-limit=600", "--rexmle-budget=usd=5,tokens=2000000", "--rexmle-gpus=none",
                   "--collect-only")
    result.stdout.fnmatch_lines([
        "rexmle: plan: 12 run(s) (6 task(s) x 2 agent(s)), at most 2 h of runs and 2 GPU-hour(s) at the "
        "time limit (the tasks' GPUs; this session has none: --rexmle-gpus); model budget usd=5,tokens=2000000 "
        "per run, at most USD 60.00, tokens 24,000,000 in all"])


def test_campaign_line_at_the_tasks_budgets_with_gpus(pytester):
    """20 tasks x 24 h x 1 GPU: 480 GPU-hours, the order of magnitude a newcomer must know."""
    config = pytester.parseconfig("--agent=sample", "--rexmle-gpus=0,1")
    settings = read_settings(config)
    line = campaign_line(settings, list(registry()))
    assert line == ("rexmle: plan: 20 run(s) (20 task(s) x 1 agent(s)), at most 480 h of runs and 480 "
                    "GPU-hour(s) at the time limit; no model budget (--rexmle-budget)")


def test_slurm_durations():
    assert [slurm_minutes_of(t) for t in ("infinite", "UNLIMITED", "1-00:00:00", "2:00:00", "30:00", "30", "1-12",
                                          "2-00:30:00", "n/a")] == [None, None, 1440, 120, 30, 30, 2160, 2910, None]


def test_partition_shorter_than_the_jobs_names_the_way_out():
    table = {"short": (60.0, True), "day": (1440.0, False), "long": (None, False)}
    (problem,) = partition_problems(table, None, 1445, 300.0)  # 24 h + 5 min margin, on the default 'short'
    assert problem == ("Slurm partition 'short' allows jobs of 60 min, and each job asks for 1445 min (the run's "
                       "time limit plus a 300 s margin): choose one with a longer limit (long) with "
                       "--rexmle-slurm-partition, or lower --rexmle-time-limit to at most 3300 s")
    assert partition_problems(table, "long", 1445, 300.0) == []
    assert partition_problems(table, "day", 1440, 300.0) == []
    assert "does not exist on this cluster (sinfo lists: day, long, short)" in partition_problems(table, "gpu", 5, 0)[0]
    assert account_problems("lab", ["root"]) == ["Slurm account 'lab' is not one this user may charge (sacctmgr "
                                                 "lists: root); pass --rexmle-slurm-account with one of them"]
    assert account_problems("root", ["root"]) == [] and account_problems("lab", None) == []


def test_slurm_partition_and_account_beside_the_other_problems(bench, tmp_path):
    """On the real cluster: sinfo's partitions and sacctmgr's accounts, read at start (before: sbatch's refusal
    at the probe job, one attempt each)."""
    ok = shutil.which("sinfo") is not None and subprocess.run(["sinfo", "-h"], capture_output=True).returncode == 0
    require_service(ok, "REXMLE_REQUIRE_SLURM", "a Slurm cluster")
    result = bench("--agent=command", "--agent-option", "cmd=true", "--agent-option", f"dir={tmp_path / 'nope'}",
                   "--rexmle-runtime=slurm", "--rexmle-slurm-partition=no-such-partition",
                   "--rexmle-slurm-account=no-such-account", "-k", "ldct-iqa")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    out = _out(result)
    firsts = [text for _, text in _problems(out)]
    assert len(firsts) == 3, out
    assert firsts[0].startswith("agent 'command': option dir=")
    assert firsts[1].startswith("Slurm partition 'no-such-partition' does not exist on this cluster (sinfo lists: ")
    assert firsts[2].startswith("Slurm account 'no-such-account' is not one this user may charge")


def test_one_problem_is_said_as_it_is():
    assert usage_message(["only this"]) == "only this"
    assert usage_message(["a", "b\n  c"]) == ("rexmle: 2 problems stop the session before any run; fix them all, then "
                                              "run again:\n1. a\n2. b\n     c")


def test_no_runtime_for_an_image_agent_names_the_agent_in_every_command(bench, tmp_path, monkeypatch):
    """The commands a message gives are runnable as printed: the agent is known, so no literal ``NAME``."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/rexmle-test/docker.sock")
    monkeypatch.setenv("REXMLE_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    result = bench("--agent=ml-master", "-k", "isles22")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    out = _out(result)
    assert "agent 'ml-master' runs only from an image, and no runtime here can run one" in out
    assert out.count("`rexmle images export --agent ml-master FILE`") == 2  # the local runtime's and the summary's
    assert "NAME" not in out
