"""An item's identity in its run's resume key, and the words a stopped session skips its queue with."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_rexmle.schedule.board import item_identity
from pytest_rexmle.schedule.session import repeat_of, stop_reason
from pytest_rexmle.settings import parse_min_percentile


def test_the_benchmark_item_is_said_by_its_repeat_and_its_first_repeat_by_nothing():
    # the first repeat has the key of a session without repeats: raising N later reuses those runs
    assert item_identity("::test_task[isles22]", None, benchmark=True) == {}
    assert item_identity("::test_task[isles22-r1]", 1, benchmark=True) == {}
    assert item_identity("::test_task[isles22-r2]", 2, benchmark=True) == {"repeat": 2}
    # guessed from the id alone (an xdist worker that sent no plan)
    assert item_identity("../site-packages/pytest_rexmle/benchmark.py::test_task[isles22-codex-r3]", 3) == \
        {"repeat": 3}


def test_an_item_of_your_own_module_is_said_by_its_file_and_name_wherever_pytest_runs_from():
    a = item_identity("campaign/test_mine.py::test_repeat[isles22-0]")
    b = item_identity("test_mine.py::test_repeat[isles22-0]")
    assert a == b == {"item": "test_mine.py::test_repeat[isles22-0]"}
    assert item_identity("test_mine.py::test_repeat[isles22-1]") != a


@pytest.mark.parametrize("nodeid, repeat", [("::test_task[isles22-r2]", 2), ("::test_task[isles22]", None),
                                            ("::test_task[isles22-codex-r12]", 12),
                                            ("::test_task[seg-a]", None), ("x.py::test_y", None)])
def test_repeat_of_an_item_id(nodeid, repeat):
    assert repeat_of(nodeid) == repeat


@pytest.mark.parametrize("options, expected", [
    ({"maxfail": 1, "stepwise": False}, "the session stopped (-x): stopping after 1 failures"),
    ({"maxfail": 3, "stepwise": False}, "the session stopped (--maxfail=3): stopping after 1 failures"),
    ({"maxfail": 0, "stepwise": True}, "the session stopped (--sw): stopping after 1 failures")])
def test_stop_reason_names_the_option(options, expected):
    config = SimpleNamespace(getoption=lambda name, default=None: options.get(name, default))
    assert stop_reason(config, "stopping after 1 failures") == expected


@pytest.mark.parametrize("value, fraction", [("40", 0.4), ("40%", 0.4), (" 12.5 % ", 0.125), ("0", 0.0),
                                             ("0.4%", 0.004), ("100", 1.0), (0, 0.0)])
def test_min_percentile_is_read_as_a_percent(value, fraction):
    assert parse_min_percentile(value) == pytest.approx(fraction)


@pytest.mark.parametrize("value", ["0.4", "1", "101", "-5", "forty", ""])
def test_min_percentile_refuses_what_it_cannot_read_unambiguously(value):
    with pytest.raises(pytest.UsageError, match="--rexmle-min-percentile"):
        parse_min_percentile(value)
