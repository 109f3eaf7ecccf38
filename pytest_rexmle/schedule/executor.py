"""The session's executor: starts every selected run the moment the slots it needs are free.

One per session, in the controller process (the only process that sees the whole selection, with or
without xdist). It plans one run per selected challenge, writes them as ``queued`` on the board, and
from a thread of its own starts each run as a child harness process (:mod:`.perform`) when
:func:`.policy.choose` says so; a waiter thread per child frees the run's slots the moment the child
exits and wakes the scheduler. A scheduler runtime (``Runtime.batches``: Slurm) owns its queue and
GPUs, so there every run starts at once (submit-ahead).

``cancel()`` (pytest decided to stop: ``-x``, ``--maxfail``, ``--sw``) starts nothing more: the queued runs are
skipped at once, so no GPU time goes to runs nobody will report. ``stop()`` (session end, Ctrl-C, SIGTERM,
``-x``) interrupts the children (each cleans its run up as an
interrupted run would: sandbox, staging, container, Slurm job) and marks runs never started as
interrupted, so no item waits for them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from .board import FINAL, Board, task_of_key
from .policy import Active, Pending, choose

#: how long interrupted run harnesses get to clean up before they are killed
STOP_GRACE_SECONDS = 60.0


def default_parallel() -> int:
    """CPU slots without GPUs: one run per four cores, at least two (agents train models; a run wants cores)."""
    return max(2, (os.cpu_count() or 2) // 4)


@dataclass
class RunTimes:
    """What the executor saw of one run (its own clock)."""

    run: str
    width: int
    expected: float
    slots: tuple[str, ...] = ()
    started: float | None = None
    ended: float | None = None
    #: the wall-clock time (UTC, ISO) the executor started the run's harness: comparable with other clocks
    started_at: str | None = None


@dataclass
class Slots:
    """The session's slots: GPU ids, or CPU slot names; ``unlimited`` for a scheduler runtime."""

    names: list[str]
    gpus: bool
    unlimited: bool = False
    max_active: int | None = None

    @classmethod
    def for_session(cls, settings, batches: bool) -> Slots:
        if batches:
            return cls([], gpus=False, unlimited=True)
        if settings.gpus:
            return cls(list(settings.gpus), gpus=True, max_active=settings.parallel)
        return cls([f"cpu{i}" for i in range(settings.parallel or default_parallel())], gpus=False)


class Executor:
    def __init__(self, settings, board: Board, runs: list[str], batches: bool,
                 identities: dict[str, dict] | None = None) -> None:
        """``runs``: the board keys of the items that ask for a run, in collection order; ``identities``:
        each one's item identity (:func:`.board.item_identity`), announced for the runs' harnesses."""
        from ..task import registry

        self.settings, self.board = settings, board
        self.identities = dict(identities or {})
        self.slots = slots = Slots.for_session(settings, batches)
        self.queue: list[Pending] = []
        self.problems: dict[str, str] = {}  # run key -> why it cannot run (more GPUs than the session has)
        reg = registry()
        for order, key in enumerate(dict.fromkeys(runs)):
            task_id = task_of_key(key)
            task = reg.get(task_id)
            if not task.implemented:
                continue
            width = 0 if slots.unlimited else max(task.gpus, 1) if slots.gpus else 1
            if slots.gpus and width > len(slots.names):
                self.problems[key] = (f"{task_id} needs {task.gpus} GPU(s) but the session has {len(slots.names)} "
                                      f"({','.join(slots.names)}); pass more with --rexmle-gpus")
                continue
            self.queue.append(Pending(key, width, settings.time_limit or task.time_limit_seconds, order))
        self.free = list(slots.names)
        self.active: dict[str, Active] = {}
        self.children: dict[str, subprocess.Popen] = {}
        self.times = {p.run: RunTimes(p.run, p.width, p.expected) for p in self.queue}
        #: (time, free slots, narrowest waiting run's width or None) at every change, for the idle figure
        self.timeline: list[tuple[float, int, int | None]] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._cancelled: str | None = None  # why pytest stopped the session (-x), once it has
        self._thread: threading.Thread | None = None
        self._waiters: list[threading.Thread] = []

    def start(self) -> None:
        from .perform import write_settings

        write_settings(self.board, self.settings)
        runs = [p.run for p in self.queue] + sorted(self.problems)
        self.board.announce(os.getpid(), runs, {k: self.identities[k] for k in runs if self.identities.get(k)})
        for key, why in self.problems.items():
            self.board.write(key, "error", message=f"RexmleError: {why}", traceback="")
        self._thread = threading.Thread(target=self._loop, name="rexmle-executor", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        """Start what fits, sleep until a run ends; this thread forks every child (their PDEATHSIG parent)."""
        with self._cond:
            while not self._stopping and (self.queue or self.active):
                now = time.monotonic()
                starts: list[tuple[Pending, tuple[str, ...]]]
                if self.slots.unlimited:
                    starts = [(p, ()) for p in self.queue]
                else:
                    starts = choose(self.queue, self.free, list(self.active.values()), now, self.slots.max_active)
                for pending, slots in starts:
                    self._start(pending, slots, now)
                if starts:
                    self._note(time.monotonic())
                self._cond.wait(timeout=5.0)

    def _start(self, pending: Pending, slots: tuple[str, ...], now: float) -> None:
        self.queue.remove(pending)
        for slot in slots:
            self.free.remove(slot)
        gpus = slots if self.slots.gpus and self._needs_gpu(pending) else ()
        argv = [sys.executable, "-m", "pytest_rexmle.schedule.perform", str(self.board.folder), pending.run,
                ",".join(gpus), str(os.getpid())]
        self.board.write(pending.run, "starting", gpus=list(gpus))
        times = self.times[pending.run]
        times.slots, times.started = slots, now
        times.started_at = datetime.now(UTC).isoformat()
        try:
            # the run's harness writes to its own log on the board, never into an item's captured output
            with open(self.board.folder / f"run-{pending.run}.log", "ab") as log:
                child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        except OSError as exc:
            self.board.write(pending.run, "error", message=f"cannot start the run's harness: {exc}", traceback="")
            self.free.extend(slots)
            times.ended = now
            return
        self.active[pending.run] = Active(pending.run, slots, now, pending.expected)
        self.children[pending.run] = child
        waiter = threading.Thread(target=self._await, args=(pending.run, child), daemon=True,
                                  name=f"rexmle-run-{pending.run}")
        self._waiters.append(waiter)
        waiter.start()

    def _needs_gpu(self, pending: Pending) -> bool:
        from ..task import registry

        return registry().get(task_of_key(pending.run)).gpus > 0

    def _await(self, key: str, child: subprocess.Popen) -> None:
        code = child.wait()
        ended = time.monotonic()
        record = self.board.read(key)
        if record is None or record["state"] not in FINAL:  # the harness died without saying how the run ended
            if self._stopping:
                self.board.write(key, "interrupted", reason="the session stopped while the run was in flight")
            else:
                self.board.write(key, "error", message=f"the run's harness process ended with code {code} "
                                                       f"without recording an outcome", traceback="")
        with self._cond:
            active = self.active.pop(key)
            self.children.pop(key, None)
            self.free.extend(active.slots)
            self.free.sort(key=self.slots.names.index)
            self.times[key].ended = ended
            self._note(ended)
            self._cond.notify_all()

    def _note(self, now: float) -> None:
        narrowest = min((p.width for p in self.queue), default=None)
        self.timeline.append((now, len(self.free), narrowest))

    def wait(self, timeout: float | None = None) -> None:
        """Until every run has ended or ``timeout`` passed."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                return
        for waiter in list(self._waiters):
            waiter.join(timeout)

    def cancel(self, reason: str) -> list[str]:
        """pytest decided to stop (``-x``, ``--maxfail``, ``--sw``): start nothing more. Every queued run is
        recorded as skipped with ``reason`` (an item still waiting for one skips, saying why) and the
        stop's time goes on the board; runs in flight go on until the session ends (``close`` stops
        them). Returns the runs taken off the queue."""
        with self._cond:
            if self._stopping or self._cancelled is not None:
                return []
            self._cancelled = reason
            dropped = [pending.run for pending in self.queue]
            self.board.note_stop(reason)
            for key in dropped:
                self.board.write(key, "skipped", reason=reason)
            self.queue.clear()
            self._cond.notify_all()
        return dropped

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Interrupt every run in flight and drop the queue; returns once the children have exited."""
        with self._cond:
            self._stopping = True
            for pending in self.queue:
                self.board.write(pending.run, "interrupted", reason="the session stopped before the run started")
            self.queue.clear()
            children = list(self.children.values())
            self._cond.notify_all()
        for child in children:
            _signal(child, signal.SIGINT)  # the child reads the board's stop reason (a SIGTERM) itself
        deadline = time.monotonic() + grace
        for child in children:
            try:
                child.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal(child, signal.SIGKILL, group=True)
                child.wait()
        self.wait(timeout=grace)

    def close(self) -> None:
        """Session end: runs still queued or in flight (``-x``, an interrupt) are stopped."""
        if self.queue or self.children:
            self.stop()
        self.wait()


def _signal(child: subprocess.Popen, signum: int, group: bool = False) -> None:
    try:
        if group:
            os.killpg(child.pid, signum)
        else:
            child.send_signal(signum)
    except (ProcessLookupError, PermissionError):
        pass
