"""Controller-side gathering of results into one session report (correct under xdist).

Workers attach each result to their test reports as a user property; the controller sees every report
(its own or forwarded by xdist) in ``pytest_runtest_logreport``, so nothing depends on which process ran
which item. Selected items that produced no result (skipped for missing data, or broken before
grading) still count as FAIL in the score, with the reason shown.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from ..fixtures import CAPABILITY_PROPERTY, RESULT_PROPERTY, STAGES_PROPERTY, TASK_PROPERTY
from ..result import ChallengeResult, write_json_atomic
from .model import build_report, not_run
from .render import markdown, terminal_lines


class SessionReporter:
    def __init__(self, config: pytest.Config, settings) -> None:
        self.config = config
        self.settings = settings
        self.run_id = uuid.uuid4().hex[:12]
        self.results: dict[str, ChallengeResult] = {}
        self.seen: dict[str, str] = {}  # task id -> why it has no result (until it has one)
        self.document: dict | None = None
        self.capability: dict[str, dict] = {}
        self.stages: dict[str, dict] = {}

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props = dict(report.user_properties)
        task_id = props.get(TASK_PROPERTY)
        if task_id is None:
            return
        if CAPABILITY_PROPERTY in props:
            self.capability[task_id] = json.loads(props[CAPABILITY_PROPERTY])
            self.stages[task_id] = json.loads(props[STAGES_PROPERTY])
        if RESULT_PROPERTY in props:
            self.results[task_id] = ChallengeResult.from_json(json.loads(props[RESULT_PROPERTY]))
        elif report.skipped and task_id not in self.results:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            self.seen[task_id] = reason.removeprefix("Skipped: ")
        elif report.failed and task_id not in self.results:
            self.seen[task_id] = f"harness error during {report.when}: {str(report.longrepr).strip().splitlines()[-1][:300]}"
        else:
            self.seen.setdefault(task_id, "no result recorded")

    def build(self) -> dict:
        records = dict(self.results)
        for task_id, why in self.seen.items():
            records.setdefault(task_id, not_run(task_id, why))
        return build_report(records.values(), agent=self.settings.agent, run_id=self.run_id,
                            agent_options=_safe_options(self.settings), settings=self.settings.public())

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.results and not self.seen:
            return
        doc = self.build()
        self.config.hook.pytest_rexmle_session_report(report=doc, config=self.config)
        out: Path = self.settings.report_dir
        write_json_atomic(out / "rexmle-report.json", doc)
        (out / "rexmle-report.md").write_text(markdown(doc), encoding="utf-8")
        capability = None
        if self.capability:
            from ..capability import session_document

            capability = session_document([self.capability[k] for k in sorted(self.capability)],
                                          [self.stages[k] for k in sorted(self.stages)])
            write_json_atomic(out / "rexmle-capability.json", capability)
        from .html import write_html

        write_html([doc], [capability] if capability else None, out / "rexmle-report.html")
        self.document = doc

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.document is None:
            return
        terminalreporter.write_sep("=", "ReX-MLE results")
        for line in terminal_lines(self.document):
            terminalreporter.write_line(line)
        terminalreporter.write_line(f"report: {self.settings.report_dir / 'rexmle-report.json'} "
                                    f"(also .md, .html; capability in rexmle-capability.json)")


def _safe_options(settings) -> dict:
    from ..agents import get_agent

    try:
        return get_agent(settings.agent, settings.agent_options).public_options()
    except Exception:
        return {}
