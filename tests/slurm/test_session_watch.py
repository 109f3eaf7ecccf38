"""A queued job's only link to its session: the session's heartbeat, named by a pointer beside the job's spec.

No process of the session waits for a Slurm job (the executor's watcher polls every job at once), so a
session killed with SIGKILL cannot cancel its jobs: each job stops itself once the heartbeat stands still.
"""

from __future__ import annotations

import threading
import time

from pytest_rexmle.runtime.slurm_job import HEARTBEAT_POINTER, watch_session


def _watch(tmp_path, stale=0.6):
    beat, pointer = tmp_path / "heartbeat", tmp_path / HEARTBEAT_POINTER
    beat.write_text('{"beat": 1}')
    pointer.write_text(str(beat))
    fired, stop = threading.Event(), threading.Event()
    watch_session(pointer, stale, check=0.05, stop=stop, on_stale=fired.set)
    return beat, pointer, fired, stop


def test_a_job_stops_when_its_sessions_heartbeat_stands_still(tmp_path):
    beat, _, fired, stop = _watch(tmp_path)
    for n in range(2, 12):  # a live session: never stale however long it lasts
        beat.write_text(f'{{"beat": {n}}}')
        time.sleep(0.1)
    assert not fired.is_set()
    assert fired.wait(3.0), "a still heartbeat must stop the job"
    stop.set()


def test_a_detached_job_or_one_taken_over_is_not_stopped(tmp_path):
    beat, pointer, fired, stop = _watch(tmp_path)
    pointer.unlink()  # --rexmle-slurm-detach
    time.sleep(1.2)
    assert not fired.is_set()
    newer = tmp_path / "new-session-heartbeat"  # --rexmle-resume from another session rewrites the pointer
    newer.write_text('{"beat": 1}')
    pointer.write_text(str(newer))
    for n in range(2, 12):
        newer.write_text(f'{{"beat": {n}}}')
        time.sleep(0.1)
    assert not fired.is_set()
    stop.set()


def test_a_missing_heartbeat_counts_as_still(tmp_path):
    beat, _, fired, stop = _watch(tmp_path)
    beat.unlink()  # the session's board is gone
    assert fired.wait(3.0)
    stop.set()
