"""The session's executor: starts every selected run the moment the slots it needs are free.

One per session, in the controller process (the only process that sees the whole selection, with or
without xdist). It plans one run per selected task, writes them as ``queued`` on the board, and
from a thread of its own starts each run as a child harness process (:mod:`.perform`) when
:func:`.policy.choose` says so; a waiter thread per child frees the run's slots the moment the child
exits and wakes the scheduler. A scheduler runtime (``Runtime.batches``: Slurm) owns its queue and
GPUs, so there every run is submitted at once (submit-ahead), by at most :data:`BATCH_CHILDREN` short
harnesses at a time, each of which exits once its job is queued. One watcher (this executor's thread) then
asks the scheduler for every job's state in one call per poll and, when a job ends, starts a short harness
that collects and records it: a campaign of thousands of jobs costs the submitting host a few processes,
not one waiting process per job.

``cancel()`` (pytest decided to stop: ``-x``, ``--maxfail``, ``--sw``) starts nothing more: the queued runs are
skipped at once, so no GPU time goes to runs nobody will report. ``stop()`` (session end, Ctrl-C, SIGTERM,
``-x``) interrupts the children (each cleans its run up as an
interrupted run would: sandbox, staging, container, Slurm job) and marks runs never started as
interrupted, so no item waits for them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

from ..runtime import RUNTIMES
from ..task import registry
from .board import FINAL, Board, Submitted, task_of_key
from .perform import write_settings
from .policy import Active, Pending, choose, start_order

#: how long interrupted run harnesses get to clean up before they are killed
STOP_GRACE_SECONDS = 60.0
#: a batch runtime: run harnesses (submitting or finishing a job) alive at once
BATCH_CHILDREN = 4


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
            self.queue.append(Pending(key, width, settings.time_limit_for(task), order))
        if not slots.unlimited:  # in start order (a scheduler's: collection order), so that no start sorts the queue
            self.queue.sort(key=start_order)
        self._widths = Counter(p.width for p in self.queue)  # the narrowest queued run without a scan
        self._finished, self._watched_states = 0, Counter[str]()  # the watched jobs' :meth:`_label`, counted
        self.free = list(slots.names)
        self.active: dict[str, Active] = {}
        self.children: dict[str, subprocess.Popen] = {}
        self.times = {p.run: RunTimes(p.run, p.width, p.expected) for p in self.queue}
        #: (time, free slots, narrowest waiting run's width or None) at every change, for the idle figure
        self.timeline: list[tuple[float, int, int | None]] = []
        #: a batch runtime's jobs handed to the watcher (run key -> job id), and those ended, waiting for a harness
        self.watching: dict[str, str] = {}
        self.ended: list[str] = []
        self.ended_rows: dict[str, dict] = {}  # the scheduler's last record of each ended job, for its harness
        self.scheduler_states: dict[str, str] = {}  # run key -> the scheduler's last word on its job
        self.polls = 0
        self._poll_seconds = float(os.environ.get("REXMLE_SLURM_POLL_SECONDS") or 5.0)
        self._beats = 0
        self._last_poll = 0.0
        self._cond = threading.Condition()
        self._stopping = False
        self._cancelled: str | None = None  # why pytest stopped the session (-x), once it has
        self._thread: threading.Thread | None = None
        self._waiters: list[threading.Thread] = []

    def start(self) -> None:
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
            while not self._stopping and (self.queue or self.active or self.watching or self.ended):
                now = time.monotonic()
                if self.slots.unlimited:  # at least every 5 s: the jobs' sign that the session is alive
                    self._beats += 1
                    self.board.beat(self._beats)
                starts: list[tuple[Pending, tuple[str, ...]]]
                if self.slots.unlimited:
                    room = max(0, BATCH_CHILDREN - len(self.children))
                    while self.ended and room:  # ended jobs first: their items are waiting
                        self._start_finish(self.ended.pop(0), now)
                        room -= 1
                    starts = [(p, ()) for p in self.queue[:room]]
                else:
                    starts = choose(self.queue, self.free, list(self.active.values()), now, self.slots.max_active,
                                    ordered=True)
                for pending, slots in starts:
                    self._start(pending, slots, now)
                if starts:
                    self._note(time.monotonic())
                if self.watching and now >= self._next_poll:
                    self._cond.release()  # the scheduler's answer may take seconds: runs may end meanwhile
                    try:
                        self._poll_jobs()
                    finally:
                        self._cond.acquire()
                    continue
                self._cond.wait(timeout=min(5.0, max(0.05, self._next_poll - now)) if self.watching else 5.0)

    @property
    def _next_poll(self) -> float:
        return self._last_poll + self._poll_seconds

    def _poll_jobs(self) -> None:
        """One query of the scheduler for every watched job; an ended one goes to :attr:`ended`."""
        with self._cond:
            watched = dict(self.watching)
        runtime = RUNTIMES.load(self.settings.runtime)
        try:
            states = runtime.job_states(sorted(set(watched.values())))
        except Exception:  # the scheduler did not answer this time: ask again at the next poll
            states = {}
        self._last_poll = time.monotonic()
        with self._cond:
            self.polls += 1
            for key, job_id in watched.items():
                row = states.get(job_id)
                if row is None:
                    continue
                watched_now = key in self.watching
                self._watched_states[self._label(key)] -= watched_now
                self.scheduler_states[key] = state = row["state"]
                if state in runtime.final_states and watched_now:
                    del self.watching[key]
                    self.ended.append(key)
                    self.ended_rows[key] = row
                else:
                    self._watched_states[self._label(key)] += watched_now
            self.board.write_status(self._status())

    def _label(self, key: str) -> str:
        """A watched job's state on the progress line: the scheduler's, lower case, or "submitted" before its first."""
        state = self.scheduler_states.get(key)
        return state.lower() if state is not None else "submitted"

    def _start_finish(self, key: str, now: float) -> None:
        """A harness that attaches to an ended job and records it (``perform ... finish ROW``)."""
        self._spawn(key, [], now, mode="finish", extra=[json.dumps(self.ended_rows.pop(key, {}))])

    def _start(self, pending: Pending, slots: tuple[str, ...], now: float) -> None:
        self.queue.remove(pending)  # near the head: the queue is in start order
        self._widths[pending.width] -= 1
        for slot in slots:
            self.free.remove(slot)
        gpus = slots if self.slots.gpus and self._needs_gpu(pending) else ()
        self.board.write(pending.run, "starting", gpus=list(gpus))
        times = self.times[pending.run]
        times.slots, times.started = slots, now
        times.started_at = datetime.now(UTC).isoformat()
        self._spawn(pending.run, list(gpus), now, mode="submit" if self.slots.unlimited else "", slots=slots,
                    expected=pending.expected)

    def _spawn(self, key: str, gpus: list[str], now: float, mode: str, slots: tuple[str, ...] = (),
               expected: float = 0.0, extra: list[str] | None = None) -> None:
        """Start a run's harness (the whole run, or a batch job's submission or finish: ``mode``)."""
        argv = [sys.executable, "-m", "pytest_rexmle.schedule.perform", str(self.board.folder), key,
                ",".join(gpus), str(os.getpid()), *([mode] if mode else []), *(extra or [])]
        try:
            # the run's harness writes to its own log on the board, never into an item's captured output
            with open(self.board.folder / f"run-{key}.log", "ab") as log:
                child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        except OSError as exc:
            self.board.write(key, "error", message=f"cannot start the run's harness: {exc}", traceback="")
            self.free.extend(slots)
            self._ended(key, now)
            return
        self.active[key] = Active(key, slots, now, expected)
        self.children[key] = child
        waiter = threading.Thread(target=self._await, args=(key, child), daemon=True, name=f"rexmle-run-{key}")
        self._waiters.append(waiter)
        waiter.start()

    def _needs_gpu(self, pending: Pending) -> bool:
        return registry().get(task_of_key(pending.run)).gpus > 0

    def _await(self, key: str, child: subprocess.Popen) -> None:
        code = child.wait()
        ended = time.monotonic()
        record = self.board.read(key)
        job_id = record.job_id if isinstance(record, Submitted) else ""
        submitted = bool(job_id)
        if submitted:  # the job is queued: the watcher has it from now on (or the stop cancels it)
            with self._cond:
                late = self._stopping
                if not late:
                    self.watching[key] = job_id
                    self._watched_states[self._label(key)] += 1
                    self._last_poll = min(self._last_poll, time.monotonic() - self._poll_seconds + 1.0)
            if late:
                self._stop_watched({key: job_id})
        elif not isinstance(record, FINAL):  # the harness died without saying how the run ended
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
            if not submitted:
                self._ended(key, ended)
            self._note(ended)
            self._cond.notify_all()

    def _ended(self, key: str, now: float) -> None:
        if self.times[key].ended is None:
            self._finished += 1
        self.times[key].ended = now

    def _note(self, now: float) -> None:
        narrowest = min((w for w, n in self._widths.items() if n > 0), default=None)
        self.timeline.append((now, len(self.free), narrowest))
        self.board.write_status(self._status())

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
            self._widths.clear()
            self._cond.notify_all()
        return dropped

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Interrupt every run in flight and drop the queue; returns once the children have exited."""
        with self._cond:
            self._stopping = True
            for pending in self.queue:
                self.board.write(pending.run, "interrupted", reason="the session stopped before the run started")
            self.queue.clear()
            self._widths.clear()
            children = list(self.children.values())
            watched, self.watching = {**self.watching, **{k: "" for k in self.ended}}, {}
            self._watched_states.clear()
            self.ended.clear()
            self._cond.notify_all()
        self._stop_watched(watched)
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

    def _stop_watched(self, watched: dict[str, str]) -> None:
        """The session stops with batch jobs queued or running and no harness on them: cancel them all at
        once (unless ``--rexmle-slurm-detach``) and say so on their records; ``--rexmle-resume`` takes a
        detached one up again."""
        if not watched:
            return

        detach = bool(getattr(self.settings, "slurm_detach", False))
        if not detach:
            RUNTIMES.load(self.settings.runtime).cancel_jobs(sorted({j for j in watched.values() if j}))
        for key, job_id in watched.items():
            reason = (f"the session stopped; its job {job_id} goes on (detached): --rexmle-resume takes it up"
                      if detach else f"the session stopped while the run was in flight (job {job_id} cancelled)")
            self.board.write(key, "interrupted", reason=reason)

    def _status(self) -> dict:
        """What the progress line shows, written at each change: no reader needs the run records for it, and
        its counts are kept as runs move (no count over every run at each of the campaign's starts)."""
        status: dict = {"queued": len(self.queue), "running": len(self.children), "finished": self._finished}
        if self.slots.unlimited:  # a scheduler's runs: its own states of the watched jobs
            status.update(scheduler={state: n for state, n in self._watched_states.items() if n > 0},
                          ended=len(self.ended), polls=self.polls)
        return status

    def close(self) -> None:
        """Session end: runs still queued or in flight (``-x``, an interrupt) are stopped."""
        if self.queue or self.children or self.watching or self.ended:
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
