"""The scheduling policy and the campaign figures on their own (pure functions, no process)."""

from __future__ import annotations

import math
import os

from pytest_rexmle.schedule.figures import idle_while_waiting, list_schedule
from pytest_rexmle.schedule.policy import Active, Pending, choose, reservation, start_order


def pending(task: str, width: int = 1, expected: float = 100.0, order: int = 0) -> Pending:
    return Pending(task, width, expected, order)


def test_longest_expected_first_then_collection_order():
    queue = [pending("a", expected=10, order=0), pending("b", expected=50, order=1),
             pending("c", expected=50, order=2), pending("d", expected=30, order=3)]
    starts = choose(queue, ["0", "1", "2"], [], now=0.0)
    assert [(p.run, slots) for p, slots in starts] == [("b", ("0",)), ("c", ("1",)), ("d", ("2",))]


def test_a_wide_run_takes_the_slots_it_needs_at_once():
    starts = choose([pending("wide", width=2), pending("narrow", order=1)], ["0", "1", "2"], [], now=0.0)
    assert [(p.run, slots) for p, slots in starts] == [("wide", ("0", "1")), ("narrow", ("2",))]


def test_a_blocked_wide_run_is_not_starved_by_narrow_ones():
    """Two GPUs, one busy until t=100 at the latest: the wide run reserves; a narrow run that would
    outlast the reservation waits, one sure to end before it may use the free GPU."""
    busy = [Active("long", ("1",), started=0.0, expected=100.0)]
    queue = [pending("wide", width=2, expected=100, order=0), pending("narrow-long", expected=90, order=1),
             pending("narrow-short", expected=30, order=2)]
    starts = choose(queue, ["0"], busy, now=50.0)
    assert [p.run for p, _ in starts] == ["narrow-short"]  # 50 + 30 <= 100: ends before the wide run can start
    assert reservation(2, 1, busy, now=50.0) == (100.0, 0)


def test_narrow_runs_use_slots_the_wide_run_will_not_need():
    """Five GPUs; run a holds two until t=10 at the latest, so the wide run (3) can start then with one
    GPU to spare: one long narrow run may take that spare GPU now, a second one may not."""
    busy = [Active("a", ("1", "2"), 0.0, 10.0), Active("b", ("3",), 0.0, 20.0)]
    queue = [pending("wide", width=3, expected=600), pending("n1", expected=500, order=1),
             pending("n2", expected=500, order=2)]
    starts = choose(queue, ["0", "4"], busy, now=1.0)
    assert [(p.run, slots) for p, slots in starts] == [("n1", ("0",))]
    assert reservation(3, 2, busy, now=1.0) == (10.0, 1)
    # without the spare GPU (b holds it too), both narrow runs wait for the wide one
    busy = [Active("a", ("1", "2"), 0.0, 10.0), Active("b", ("3",), 0.0, 20.0)]
    assert choose(queue, ["0"], busy, now=1.0) == []


def test_max_active_caps_runs_at_once():
    starts = choose([pending(str(i), order=i) for i in range(5)], ["0", "1", "2", "3"], [], 0.0, max_active=2)
    assert len(starts) == 2


def test_list_schedule_is_longest_first_on_the_earliest_free_slots():
    assert list_schedule([(16, 1), (16, 1), (2, 1), (2, 1)], 2) == 18  # the four runs on two GPUs
    assert list_schedule([(5, 1), (4, 1), (3, 1), (3, 1), (3, 1)], 2) == 10   # 5,3,3 | 4,3 (LPT, not optimal 9)
    assert list_schedule([(3, 2), (1, 1), (1, 1)], 2) == 4                # the wide run holds both
    assert list_schedule([(7, 1), (2, 1)], None) == 7                     # a scheduler: all at once
    assert list_schedule([], 4) == 0


def test_idle_while_waiting_counts_only_free_slots_a_waiting_run_fits_in():
    # t=0..2: 1 free, a width-1 run waits -> 2 slot-seconds; t=2..5: 1 free, only a width-2 run waits -> 0;
    # t=5..6: nothing waits -> 0
    points = [(0.0, 1, 1), (2.0, 1, 2), (5.0, 2, None)]
    assert math.isclose(idle_while_waiting(points, 6.0), 2.0)


def test_slots_follow_the_gpus_the_parallel_option_or_the_scheduler():
    from types import SimpleNamespace

    from pytest_rexmle.schedule.executor import Slots, default_parallel

    gpus = Slots.for_session(SimpleNamespace(gpus=("0", "1"), parallel=None), batches=False)
    assert (gpus.names, gpus.gpus, gpus.max_active) == (["0", "1"], True, None)
    capped = Slots.for_session(SimpleNamespace(gpus=("0", "1", "2"), parallel=2), batches=False)
    assert capped.max_active == 2
    cpu = Slots.for_session(SimpleNamespace(gpus=(), parallel=3), batches=False)
    assert (cpu.names, cpu.gpus) == (["cpu0", "cpu1", "cpu2"], False)
    default = Slots.for_session(SimpleNamespace(gpus=(), parallel=None), batches=False)
    assert len(default.names) == default_parallel() == max(2, (os.cpu_count() or 2) // 4)
    assert Slots.for_session(SimpleNamespace(gpus=("0",), parallel=None), batches=True).unlimited


def test_a_start_reads_only_the_head_of_an_ordered_queue():
    """The executor keeps its queue in start order, so choosing two runs of 10,000 reads three of them (a
    sort or a scan of the whole queue at every start cost N² over a campaign) and picks what a sort would."""
    queue = sorted((pending(str(i), expected=float(i % 7), order=i) for i in range(10_000)), key=start_order)
    read: list[str] = []

    def tracked():
        for run in queue:
            read.append(run.run)
            yield run

    starts = choose(tracked(), ["0", "1"], [], now=0.0, ordered=True)
    assert [(p.run, s) for p, s in starts] == [(p.run, s) for p, s in choose(queue[::-1], ["0", "1"], [], now=0.0)]
    assert [p.run for p, _ in starts] == ["6", "13"] and len(read) == 3
