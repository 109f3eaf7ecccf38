"""The benchmark's items in pytest's JUnit XML, laid out as the ``junit_family`` in use allows.

Each benchmark item carries its result as pytest user properties (``status``, ``percentile``,
``metric.<key>``, ...). pytest writes them as ``<properties>`` inside the ``<testcase>``, which the legacy
``xunit1`` family allows but ``xunit2`` (pytest's default, schema ``junit-10.xsd``) does not: there,
``<properties>`` live only in a ``<testsuite>``. So with ``xunit2`` each item's properties move to the
suite's properties, named ``<test case name>.<property>`` (``test_task[isles22].percentile``), the
layout of ``record_testsuite_property``; with ``xunit1`` they stay in the test case. Either way each
benchmark test case gets a ``classname`` per competition (``rexmle.topcow``), where pytest leaves it
empty for an item of the plugin's own module. :func:`read_cases` reads a file of either layout.

The rework runs on the elements pytest has already built for finished items, just before pytest writes
the file (:class:`pytest_rexmle.report.session.JUnitDisclosure`), so nothing here depends on which process
(xdist worker or controller) ran an item.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from ..errors import RexmleError
from ..task import competition_of_folder, registry
from .properties import TASK_PROPERTY  # marks a benchmark item (the task id)

#: the prefix of every benchmark test case's ``classname``
CLASSNAME_PREFIX = "rexmle"


def classname_for(task_id: str) -> str:
    """``rexmle.<competition>`` (the task's competition folder, e.g. ``rexmle.topcow``), so that CI readers
    group a session's test cases by competition; a task the registry does not know keeps its own id."""
    try:
        task = registry().get(task_id)
    except RexmleError:  # UnknownTaskError, or a task folder that no longer reads
        return f"{CLASSNAME_PREFIX}.{task_id}"
    return f"{CLASSNAME_PREFIX}.{competition_of_folder(task.folder) or task.id}"


def finished_cases(xml: Any) -> list[ET.Element]:
    """The ``<testcase>`` elements pytest's ``LogXML`` has finalized: a finalized node reporter keeps only
    its built element (``to_xml`` returns the same object each time), so changes to it are what is written.
    A reporter still open (an interrupted item) builds a fresh element per call and is left alone."""
    return [reporter.to_xml() for reporter in xml.node_reporters_ordered if "to_xml" in vars(reporter)]


def rework(xml: Any) -> None:
    """Give each finished benchmark test case its competition's classname and, under ``xunit2``, move
    its properties to the suite's (named ``<test case>.<property>``) where that family's schema puts them."""
    for case in finished_cases(xml):
        properties = case.find("properties")
        if properties is None:
            continue
        values = [(p.get("name") or "", p.get("value") or "") for p in properties.iter("property")]
        task_id = dict(values).get(TASK_PROPERTY)
        if task_id is None:
            continue  # not a benchmark item: pytest's own layout, untouched
        case.set("classname", ".".join(filter(None, (xml.prefix, classname_for(task_id)))))  # --junit-prefix first
        if xml.family == "xunit2":
            case.remove(properties)
            for name, value in values:
                xml.add_global_property(f"{case.get('name')}.{name}", value)


def read_cases(path: Path) -> dict[str, dict[str, str]]:
    """Every test case's properties by test case name, from a JUnit file of either layout (in the test
    case, ``xunit1``; or in the suite as ``<test case>.<property>``, ``xunit2``)."""
    root = ET.parse(path).getroot()
    cases = {case.get("name") or "": {p.get("name") or "": p.get("value") or "" for p in case.iter("property")}
             for case in root.iter("testcase")}
    for suite in root.iter("testsuite"):
        own = suite.find("properties")
        for prop in own.iter("property") if own is not None else ():
            name = prop.get("name") or ""
            for case_name, values in cases.items():
                if name.startswith(f"{case_name}."):
                    values[name[len(case_name) + 1:]] = prop.get("value") or ""
    return cases
