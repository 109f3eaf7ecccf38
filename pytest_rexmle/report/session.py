"""Controller-side gathering of results into one session report (correct under xdist).

Workers attach each result to their test reports as a user property; the controller sees every report
(its own or forwarded by xdist) in ``pytest_runtest_logreport``, so nothing depends on which process ran
which item. Selected items that produced no result still count as 0 in the score: a skipped one (data
not prepared) with the skip reason, counted as skipped (as pytest counts it), not as an agent FAIL;
one the harness broke on before grading (runtime unavailable, image missing) as an ERROR with the real message and traceback, kept apart from agent FAILs.

Each session writes into its own folder ``<report dir>/<run id>/`` (see :mod:`.archive`), then moves the
``latest`` link and rebuilds the index, so no earlier session's report is ever overwritten.
"""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import pytest

from ..agents import get_agent
from ..capability import SESSION_CAPABILITY_JSON, session_document
from ..runtime import runtime_for
from ..schedule.figures import summary_line
from ..scoring.result import TaskResult
from . import archive
from .disclosure import build_disclosure, junit_properties
from .html import render_html
from .junit import rework
from .model import build_report, compute_summary, harness_error, not_run, with_aggregate
from .properties import (
    AGENT_PROPERTY,
    CAPABILITY_PROPERTY,
    REPEAT_PROPERTY,
    RESULT_PROPERTY,
    RUN_PROPERTY,
    STAGES_PROPERTY,
    TASK_PROPERTY,
)
from .render import markdown, percent, run_label, terminal_lines

#: an item's key in the session report: (task id, its agent in a session of several, its repeat: the
#: --rexmle-repeat one, or for several items of one task in a module of your own, their order);
#: one record per item, so no run hides behind another of its task
Key = tuple[str, str | None, int]


class SessionReporter:
    def __init__(self, config: pytest.Config, settings) -> None:
        self.config = config
        self.settings = settings
        self.run_id = archive.new_run_id()
        # keyed by (task id, agent of several or None, repeat or None): one record per item
        self.results: dict[Key, TaskResult] = {}
        self.seen: dict[Key, str] = {}  # why an item has no result (until it has one)
        self.skipped: set[Key] = set()  # items pytest skipped (data not prepared, grader pending)
        self.errors: dict[Key, tuple[str, str]] = {}  # (message, traceback) of a harness error
        self.folder: Path | None = None
        self.document: dict | None = None
        self.capability: dict[Key, dict] = {}
        self.stages: dict[Key, dict] = {}
        self.runs: dict[Key, dict] = {}  # the run's compute record and what it reached
        self.repeats: dict[tuple[str, str | None], dict[str, int]] = {}  # (task, agent) -> item id -> its repeat

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props = dict(report.user_properties)
        if props.get(TASK_PROPERTY) is None:
            return
        task_id = self._key(report.nodeid, props)
        if CAPABILITY_PROPERTY in props:
            self.capability[task_id] = json.loads(str(props[CAPABILITY_PROPERTY]))
            self.stages[task_id] = json.loads(str(props[STAGES_PROPERTY]))
        if RUN_PROPERTY in props:
            self.runs[task_id] = json.loads(str(props[RUN_PROPERTY]))
        if RESULT_PROPERTY in props:
            self.results[task_id] = TaskResult.from_json(json.loads(str(props[RESULT_PROPERTY])))
        elif report.skipped and task_id not in self.results:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            self.seen[task_id] = reason.removeprefix("Skipped: ")
            self.skipped.add(task_id)
        elif report.failed and task_id not in self.results:
            self.errors.setdefault(task_id, (f"during {report.when}: {_crash_message(report)}", report.longreprtext))
        else:
            self.seen.setdefault(task_id, "no result recorded")

    def _key(self, nodeid: str, props: dict) -> Key:
        """The item's key. Its repeat is ``--rexmle-repeat``'s; an item without one (a module of your own
        that parametrizes its test over repeats, as ``benchmarks/bench_slurm.py`` does) takes the next
        repeat of its (task, agent), so that several items of one task are several rows, each
        counted, never one row standing for all of them."""
        task, agent = props[TASK_PROPERTY], props.get(AGENT_PROPERTY) or None
        items = self.repeats.setdefault((task, agent), {})
        if nodeid not in items:
            given = props.get(REPEAT_PROPERTY)
            taken = set(items.values())
            items[nodeid] = int(given) if given is not None and int(given) not in taken else max(taken, default=0) + 1
        return task, agent, items[nodeid]

    def n_repeats(self) -> int:
        """The session's repeats: ``--rexmle-repeat``, or the most items any task (and agent) had."""
        return max([self.settings.repeat] + [len(items) for items in self.repeats.values()])

    def build(self) -> dict:
        records = dict(self.results)
        for key, (message, trace) in self.errors.items():
            records.setdefault(key, _for_agent(harness_error(_task(key), message, trace), key))
        for key, why in self.seen.items():
            records.setdefault(key, _for_agent(not_run(_task(key), why), key))
        repeats = self.n_repeats()
        for key, record in records.items():  # each record says which repeat it is, where there are several
            record.repeat = key[2] if repeats > 1 else None
        settings = {**self.settings.public(), **_runtime_facts(self.settings)}
        skipped = {k for k in self.skipped if k not in self.results and k not in self.errors}
        agents, one = self.settings.agents, len(self.settings.agents) <= 1
        report = functools.partial(build_report, run_id=self.run_id, settings=settings, repeats=repeats)
        doc = report(records.values(), agent=self.settings.agent if one else ",".join(agents),
                     skipped={_task(k) for k in skipped}, agent_options=_safe_options(self.settings) if one else {})
        if not one:  # several agents: every record in one document, and each agent's own score beside it
            doc["agents"] = {}
            for name in agents:
                own = report([r for r in records.values() if r.agent == name], agent=name,
                             skipped={_task(k) for k in skipped if k[1] in (None, name)},
                             agent_options=_safe_options(self.settings, name))
                doc["agents"][name] = {k: own[k] for k in ("agent_options", "score", "n_fail", "n_error", "selected")}
        with_aggregate(doc)
        doc["compute"] = compute_summary({_label(k, repeats): (run or {}).get("compute") for k, run in self.runs.items()})
        doc["submissions"] = {_label(k, repeats): run["submission"]
                              for k, run in sorted(self.runs.items(), key=lambda i: _label(i[0], repeats))
                              if isinstance(run, dict) and isinstance(run.get("submission"), dict)}
        doc["disclosure"] = build_disclosure(settings, self.runs.values(), records.values(), doc["data_kind"])
        # the executor's figures (makespan, ideal, idle GPU time, per-run telemetry) beside the results
        schedule = self.config.pluginmanager.get_plugin("rexmle-schedule")
        if schedule is not None and schedule.figures is not None:
            doc["campaign"] = schedule.figures
        return doc

    def junit_disclosure(self) -> None:
        """The session's disclosure as JUnit testsuite properties (``disclosure.*``), before the XML is written."""
        from _pytest.junitxml import xml_key  # start-up: _pytest only where this runs

        xml = self.config.stash.get(xml_key, None)
        if xml is None or (not self.results and not self.seen and not self.errors):
            return
        for name, value in junit_properties(self.build().get("disclosure")):
            xml.add_global_property(name, value)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.results and not self.seen and not self.errors:
            return
        doc = self.build()
        self.config.hook.pytest_rexmle_session_report(report=doc, config=self.config)
        root: Path = self.settings.report_dir
        out = archive.session_folder(root, self.run_id)
        archive.write_json(out / archive.REPORT_JSON, doc)
        archive.write_text(out / "rexmle-report.md", markdown(doc))
        capability = None
        if self.capability:
            capability = session_document([self.capability[k] for k in sorted(self.capability, key=_order)],
                                          [self.stages[k] for k in sorted(self.stages, key=_order)])
            archive.write_json(out / SESSION_CAPABILITY_JSON, capability)

        archive.write_text(out / "rexmle-report.html", render_html([doc], [capability] if capability else None))
        archive.point_latest(root, self.run_id)
        archive.write_index(root)
        self.document, self.folder = doc, out

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.document is None:
            return
        terminalreporter.write_sep("=", "ReX-MLE results")
        width = getattr(terminalreporter, "_tw", None)
        width = getattr(width, "fullwidth", None) or shutil.get_terminal_size().columns
        for line in terminal_lines(self.document, width=width):
            terminalreporter.write_line(line)
        for name, own in (self.document.get("agents") or {}).items():
            terminalreporter.write_line(f"agent {name}: score {percent(own['score'])} over "
                                        f"{len(own['selected'])} task(s), {own['n_fail']} FAIL")
        campaign = self.document.get("campaign")
        if campaign and campaign.get("n_runs"):
            terminalreporter.write_line(summary_line(campaign))
        root = self.settings.report_dir
        terminalreporter.write_line(f"report: {self.folder}/rexmle-report.{{json,md,html}}")
        terminalreporter.write_line(f"every session: {root / archive.INDEX_HTML} (newest: {root / archive.LATEST})")


class JUnitDisclosure:
    """Runs before the JUnit XML is written (``tryfirst``), where the reporter's own finish comes after it:
    adds the disclosure and lays the benchmark's test cases out as the ``junit_family`` allows
    (:mod:`.junit`)."""

    def __init__(self, reporter: SessionReporter) -> None:
        self.reporter = reporter

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from _pytest.junitxml import xml_key  # start-up: _pytest only where this runs

        self.reporter.junit_disclosure()
        xml = session.config.stash.get(xml_key, None)
        if xml is not None:
            rework(xml)


def _crash_message(report: pytest.TestReport) -> str:
    """The exception line of a failed phase (``Type: message``), not the location pytest prints last."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", None)
    if message:
        return message.strip()
    lines = str(report.longrepr).strip().splitlines()
    return lines[-1] if lines else "unknown error"


def _label(key: Key, repeats: int = 1) -> str:
    return run_label(key[0], key[1], key[2] if repeats > 1 else None)


def _order(key: Key) -> tuple[str, str, int]:
    return key[0], key[1] or "", key[2]


def _task(key: Key) -> str:
    return key[0]


def _for_agent(record: TaskResult, key: Key) -> TaskResult:
    """A record made here (not run, harness error) names its agent in a several-agent session."""
    if key[1]:
        record.agent = key[1]
    return record


def _safe_options(settings, agent: str | None = None) -> dict:
    name = agent or settings.agent
    try:
        return get_agent(name, settings.options_for(name)).public_options()
    except Exception:
        return {}


def _runtime_facts(settings) -> dict:
    """What the runtime reports about how the agents ran (the sandbox that was used, not the one asked for)."""
    try:
        return runtime_for(settings).facts()
    except Exception:  # a report is still written when the runtime cannot describe itself
        return {}
