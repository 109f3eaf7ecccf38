"""Shared fixtures for the project's tests.

Tests that need a real service (bubblewrap now; Docker and Slurm later) skip when it is missing on a
developer's machine, but CI sets ``REXMLE_REQUIRE_SANDBOX=1`` (see ``.ci/run``) and then a missing
service is a failure, never a silent skip.

Which tests are slow, and how long they may take, is said here once per folder rather than
on every test (``MARKED``), so that ``pytest -m "not slow"`` is a fast lane and the per-test time-out of
pyproject.toml (``timeout``) stays tight for everything else.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
AGENTS = REPO / "fixtures" / "agents"
TESTS = Path(__file__).resolve().parent

#: test paths (a folder, a file or ``file::test``, relative to tests/, longest first wins) with the markers they
#: get and their time-out in seconds (None: pyproject's default). Setup counts against the time-out: an image
#: build or a cluster start is paid by the first test that uses it. A single test is named here rather than
#: marked in its file where that file belongs to a folder being reorganised (prepare/, report/).
MARKED: dict[str, tuple[tuple[str, ...], int | None]] = {
    "docker": (("slow", "docker"), 1800),                          # image builds, containers, agents end to end
    "docker/test_agent_adapters.py": ((), None),                   # adapters without Docker (engine tests marked there)
    "newcomer/test_fresh_machine.py": ((), 3600),
    "journeys/test_journey.py": (("slow",), 1500),                 # the README's commands on a fresh clone  # fresh Debian containers, real pip installs (marked there)
    "slurm/test_slurm_runtime.py": (("slow",), 1200),              # jobs through a real Slurm cluster
    "security": (("slow", "sandbox"), 1200),                       # whole attack sessions per mechanism and user
    "selfcheck": (("slow", "sandbox"), 1200),                      # rexmle selfcheck per runtime; fresh installs
    "hostile/test_session.py": (("slow",), None),                  # whole sessions of hostile agents, resumed
    "schedule/test_campaign.py": (("slow",), None),                # GPU campaigns of sandboxed runs, interrupted
    "schedule/test_repeats.py": (("slow",), None),                 # repeated sandboxed runs, killed and resumed
    "schedule/test_gpu_check.py": (("slow", "sandbox"), 900),      # benchmarks/gpu_check.sh on the stand-in NVML
    "slurm/test_slurm_gateway.py": (("slow",), 1200),              # a job through a real Slurm cluster
    "prepare/test_plugin_prepare.py::test_prepare_on_demand_under_xdist": (("slow",), None),  # an xdist session
    "report/test_archive.py::test_two_sessions_keep_both_reports": (("slow",), None),  # two whole sessions
    "test_plugin.py::test_resume_reuses_finished_results": (("slow",), None),  # two sessions, the second resumed
    "schedule/test_telemetry.py::test_each_run_gets_its_own_gpus_samples_and_the_session_its_busy_fraction":
        (("slow",), None),                                         # a GPU session of sandboxed runs
    "sandbox": (("slow", "sandbox"), None),                        # bubblewrap/Landlock runs of seconds each
    "sandbox/test_policy.py": ((), None),                          # the policy rendered, nothing run: fast lane
    "sandbox/test_seccomp.py": (("sandbox",), None),               # the filter built and probed in a child: fast lane
    "test_sandbox.py": (("slow", "sandbox"), None),
    # sessions whose runs are real sandboxed agent runs (their harnesses are detached, so CPU counters of the test
    # miss them), the wheel's build and a flood of calls: the fast lane keeps the logic beside them
    "sandbox/test_seccomp.py::test_sandboxed_python_meets_the_refusals_and_still_works": (("slow", "sandbox"), None),
    "images/test_drop_before_exec.py": (("slow", "sandbox"), None),  # small hostile images run under bubblewrap
    "test_own_agent.py::test_example_agent_with_its_venv_is_graded_ok": (("slow",), None),  # a venv, a sandboxed run
    "test_own_agent.py::test_landlock_refuses_an_env_the_agents_uid_cannot_read_and_says_how": (("slow",), None),
    "test_toy_competition.py": (("slow",), None),                  # the guide followed: synth, prepare, a session
    "test_toy_competition.py::test_a_wrongly_shaped_signatures_is_a_clear_error": ((), None),  # `rexmle info` only
    "report/test_merge_selections.py::test_full_and_k_sessions_merge_to_the_full_score": (("slow",), None),  # 3 sessions
    "report/test_session_kind.py": (("slow",), None),
    "report/test_verify.py::test_verify_regrades_and_refuses_a_forged_result": (("slow",), None),
    "report/test_run_page_bounds.py::test_a_flood_of_calls_pages_on_through_view": (("slow",), None),  # 7 s of CPU
    "test_headline.py::test_an_agent_that_runs_on_the_host_keeps_the_local_default": (("slow",), None),
    "test_status_interrupted.py::test_stopped_session_shows_interrupted_with_when": (("slow",), None),
    "test_reruns.py::test_reruns_of_zero_change_nothing": (("slow",), None),
    "test_registry.py::test_the_wheel_holds_every_file_of_every_task": (("slow",), None),  # a real wheel build
}

#: fixtures that bring a service (a Slurm cluster, a Docker engine, an agent image exported from it and imported,
#: bubblewrap for a real sandboxed run): a test requesting one, directly or through another fixture, is slow
#: wherever it lives, so the fast lane never waits for a service or fails for want of one
SERVICE_FIXTURES = ("needs_slurm", "docker_client", "imported", "needs_bwrap")


def _marked_entry(item) -> tuple[tuple[str, ...], int | None] | None:
    try:
        rel = item.path.resolve().relative_to(TESTS).as_posix()
    except ValueError:
        return None
    test = f"{rel}::{getattr(item, 'originalname', item.name)}"
    for prefix in sorted(MARKED, key=len, reverse=True):
        if prefix in (rel, test) or rel.startswith(prefix + "/"):
            return MARKED[prefix]
    return None


def pytest_collection_modifyitems(config, items) -> None:
    """Mark the listed folders and the tests that need a service, and raise the listed folders' time-out (a test's
    own ``timeout`` marker wins)."""
    for item in items:
        if item.get_closest_marker("slow") is None and set(SERVICE_FIXTURES) & set(getattr(item, "fixturenames", ())):
            item.add_marker("slow")
        entry = _marked_entry(item)
        if entry is None:
            continue
        markers, seconds = entry
        for name in markers:
            if item.get_closest_marker(name) is None:
                item.add_marker(name)
        if seconds is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(seconds))
    if getattr(config.option, "loadgroup", False):  # an xdist worker under --dist=loadgroup
        _group_suffixes(items)


def _group_suffixes(items) -> None:
    """``--dist=loadgroup`` sends the tests of one ``xdist_group`` to one worker by a ``@group`` suffix on their
    node ids, which pytest-xdist 3.8 writes to ``item._nodeid``: pytest 9.2 keeps the id in ``item._id`` and
    ignores it, so every group was split across the workers (both imported the same 8 GB images: 16 GB more
    disk and two exports). The suffix is written where pytest reads it, once (a fixed xdist writes it first)."""
    from _pytest.nodeid import NodeId

    for item in items:
        groups = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                         for mark in item.iter_markers("xdist_group")})
        if groups and "@" not in item.nodeid:
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(groups)}")


def require_service(present: bool, variable: str, what: str) -> None:
    if present:
        return
    if os.environ.get(variable) == "1":
        pytest.fail(f"{what} is required here ({variable}=1) but missing")
    pytest.skip(f"{what} not available (set {variable}=1 to make this a failure)")


#: how the local runtime words its refusal of Landlock as the harness's own uid (runtime/local.py)
SAME_UID_MARK = "the Landlock sandbox would run the agent as your own uid"


def need_agent_sandbox() -> None:
    """This machine has no sandbox that keeps an agent under test from the harness's user (no user
    namespaces for bubblewrap, not root; only Landlock as the same uid, which the harness refuses)."""
    require_service(False, "REXMLE_REQUIRE_SANDBOX",
                    "a sandbox for agents under test (bubblewrap with user namespaces, or a root harness: "
                    "Landlock as your own uid is refused)")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _same_uid_refusal_is_a_missing_sandbox())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _same_uid_refusal_is_a_missing_sandbox())


def _same_uid_refusal_is_a_missing_sandbox():
    """A test that starts a hostile or user agent where only same-uid Landlock exists: a skip naming what
    is missing (a failure under REXMLE_REQUIRE_SANDBOX=1), like every other absent service."""
    from pytest_rexmle.runtime.local import AgentIdentityRefused

    try:
        return (yield)
    except AgentIdentityRefused as exc:
        if SAME_UID_MARK in str(exc):
            need_agent_sandbox()
        raise


@pytest.fixture
def needs_bwrap() -> str:
    path = shutil.which("bwrap")
    require_service(path is not None, "REXMLE_REQUIRE_SANDBOX", "bubblewrap (bwrap)")
    return path


@pytest.fixture
def needs_slurm() -> None:
    """A one-node (or real) Slurm cluster that answers sbatch and sacct (``.ci/slurm-setup.sh`` starts one)."""
    import subprocess

    ok = shutil.which("sbatch") is not None and shutil.which("sacct") is not None
    if ok:
        ok = subprocess.run(["sinfo", "-h"], capture_output=True).returncode == 0 and \
            subprocess.run(["sacct", "-n", "-j", "1"], capture_output=True).returncode == 0
    require_service(ok, "REXMLE_REQUIRE_SLURM", "a Slurm cluster (sbatch, sinfo, sacct; see .ci/slurm-setup.sh)")


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory) -> Path:
    """One synthetic-data cache for the whole test session (twins are deterministic)."""
    return tmp_path_factory.mktemp("rexmle-cache")


@pytest.fixture
def bench(pytester, shared_cache, monkeypatch):
    """Run the benchmark in a subprocess pytest inside a fresh folder; returns a runner."""
    monkeypatch.setenv("REXMLE_CACHE_DIR", str(shared_cache))

    def run(*args: str, timeout: float = 300):
        # Hypothesis's plugin is half of a session's start-up (about 1 s of CPU) and no session here uses it
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                                               "--rexmle-data=synthetic", *args, timeout=timeout)
        if result.ret == pytest.ExitCode.USAGE_ERROR and SAME_UID_MARK in result.stdout.str() + result.stderr.str():
            need_agent_sandbox()
        return result

    run.path = pytester.path
    return run


def report_dir(folder: Path) -> Path:
    """The newest session's report folder (``.rexmle/report/latest``, one folder per session)."""
    return folder / ".rexmle" / "report" / "latest"


def report_json(folder: Path) -> dict:
    """The newest session's ``rexmle-report.json`` under ``folder``."""
    return json.loads((report_dir(folder) / "rexmle-report.json").read_text())


def run_folders(folder: Path, task_id: str) -> list[Path]:
    return sorted((folder / ".rexmle" / "runs" / task_id).glob("*/*/"))


def pytest_terminal_summary(terminalreporter, config) -> None:
    """The closing note names the documented commands (README.md and docs/) tests/journeys does not run, each
    with its reason (on the controller too, where xdist collects nothing: whenever the session's paths hold
    tests/journeys)."""
    journeys = TESTS / "journeys"
    paths = [Path(str(arg).split("::")[0]).resolve() for arg in config.args] or [TESTS]
    if not any(path == journeys or path in journeys.parents or journeys in path.parents for path in paths):
        return
    from .journeys.plan import JOURNEY, NotRun

    skipped = [step for step in JOURNEY if isinstance(step, NotRun)]
    terminalreporter.section(f"documented commands tests/journeys does not run ({len(skipped)})")
    for step in skipped:
        terminalreporter.write_line(f"{step.readme[:100]}{'…' if len(step.readme) > 100 else ''}\n    why: {step.reason}")
