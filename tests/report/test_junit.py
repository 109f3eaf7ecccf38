"""The JUnit XML of a real benchmark session obeys the ``junit_family`` in use.

``xunit2`` (pytest's default) is checked against the rules of its schema, ``junit-10.xsd`` (the schema
pytest's own tests validate against; no installable package ships it, so its rules are written out below):
``<properties>`` only in a ``<testsuite>``, a ``<testcase>`` with no attribute but ``name``, ``time``,
``classname`` and ``group``, and only the children the schema lists. Before: every benchmark test case held
its ``<properties>`` (invalid) and had an empty ``classname``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_rexmle.report.junit import read_cases

from ..conftest import report_json

#: junit-10.xsd, element by element: the children and attributes each may have, and the required attributes
CHILDREN = {
    "testsuites": {"testsuite"},
    "testsuite": {"testsuite", "properties", "testcase", "system-out", "system-err"},
    "testcase": {"skipped", "error", "failure", "rerunFailure", "rerunError", "flakyFailure", "flakyError",
                 "system-out", "system-err"},
    "properties": {"property"},
    "property": set(),
    "failure": set(), "error": set(), "skipped": set(), "system-out": set(), "system-err": set(),
}
ATTRIBUTES = {
    "testsuites": {"name", "time", "tests", "failures", "errors"},
    "testsuite": {"name", "tests", "failures", "errors", "group", "time", "skipped", "timestamp", "hostname", "id",
                  "package", "file", "log", "url", "version"},
    "testcase": {"name", "time", "classname", "group"},
    "properties": set(),
    "property": {"name", "value"},
    "failure": {"type", "message"}, "error": {"type", "message"}, "skipped": {"type", "message"},
    "system-out": set(), "system-err": set(),
}
REQUIRED = {"testsuite": {"name", "tests", "failures", "errors"}, "testcase": {"name"}, "property": {"name", "value"}}


def xunit2_violations(path: Path) -> list[str]:
    """Every place where the file breaks junit-10.xsd's element and attribute rules (empty: valid)."""
    root = ET.parse(path).getroot()
    found = [] if root.tag in ("testsuites", "testsuite") else [f"root <{root.tag}>"]
    for element in root.iter():
        if element.tag not in CHILDREN:
            found.append(f"unknown element <{element.tag}>")
            continue
        found += [f"<{child.tag}> inside <{element.tag}>" for child in element if child.tag not in CHILDREN[element.tag]]
        found += [f"attribute {name!r} on <{element.tag}>" for name in element.attrib
                  if name not in ATTRIBUTES[element.tag]]
        found += [f"<{element.tag}> without {name!r}" for name in REQUIRED.get(element.tag, ()) if name not in element.attrib]
    return found


def test_the_rules_catch_what_pytest_writes_against_the_schema(pytester):
    """The checker can fail: a plain test's ``record_property`` under xunit2 (pytest warns it is
    incompatible) and xunit1's ``file``/``line`` attributes both break junit-10.xsd."""
    pytester.makepyfile("def test_x(record_property):\n    record_property('k', 1)\n")
    pytester.runpytest("--junitxml=two.xml", "-p", "no:cacheprovider").assert_outcomes(passed=1, warnings=1)
    assert xunit2_violations(pytester.path / "two.xml") == ["<properties> inside <testcase>"]
    pytester.runpytest("--junitxml=one.xml", "-o", "junit_family=xunit1", "-p", "no:cacheprovider")
    assert sorted(xunit2_violations(pytester.path / "one.xml")) == [
        "<properties> inside <testcase>", "attribute 'file' on <testcase>", "attribute 'line' on <testcase>"]


@pytest.mark.parametrize("family, prefix", [("xunit2", ""), ("xunit1", "ci.")])
def test_benchmark_junit_follows_its_family(bench, needs_bwrap, family, prefix):
    result = bench("--agent=sample", "-k", "ldct-iqa or topcow-cta-det", "--rexmle-judge=none", "--junitxml=out.xml",
                   "-o", f"junit_family={family}", *([f"--junit-prefix={prefix[:-1]}"] if prefix else []))
    result.assert_outcomes(passed=2)
    path = bench.path / "out.xml"
    root = ET.parse(path).getroot()
    cases = {c.get("name"): c for c in root.iter("testcase")}
    # one classname per competition (after --junit-prefix when given), where pytest left it empty
    assert {n: c.get("classname") for n, c in cases.items()} == {
        "test_task[ldct-iqa]": f"{prefix}rexmle.ldct", "test_task[topcow-cta-det]": f"{prefix}rexmle.topcow"}
    suite = root.find("testsuite")
    assert suite is not None
    suite_props = {p.get("name"): p.get("value") for p in suite.find("properties") or ()}
    if family == "xunit2":
        assert xunit2_violations(path) == []
        assert all(c.find("properties") is None for c in cases.values())
        assert suite_props["test_task[topcow-cta-det].rexmle_task"] == "topcow-cta-det"
    else:  # xunit1 allows properties in a test case: they stay there, and the suite keeps only the session's own
        assert all(c.find("properties") is not None for c in cases.values())
        assert not any(name.startswith("test_task[") for name in suite_props)
    assert suite_props["disclosure.data"] == "synthetic"  # the session's disclosure is the suite's either way
    # every item's values are those of the session report, read back from either layout
    props = read_cases(path)
    by_id = {c["task_id"]: c for c in report_json(bench.path)["tasks"]}
    for task_id in ("ldct-iqa", "topcow-cta-det"):
        own, record = props[f"test_task[{task_id}]"], by_id[task_id]
        assert own["rexmle_task"] == task_id and own["status"] == record["status"] == "ok"
        assert float(own["percentile"]) == record["percentile"]
        assert {k: float(v) for k, v in own.items() if k.startswith("metric.")} == \
            {f"metric.{k}": v for k, v in record["metrics"].items()}
