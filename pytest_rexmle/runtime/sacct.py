"""Slurm job states from accounting (``sacct``), one call for every job of the session.

Why our own: submitit watches jobs through a class-level watcher whose command and cache are private to
it; the Slurm runtime needs more columns (reason, node, elapsed, limit) and must not depend on those
internals. Accounting learns of a job a moment after ``sbatch`` answers, so an unknown job is not a lost
one (see ``slurm._controller_state``).
"""

from __future__ import annotations

import subprocess
import threading

COLUMNS = ("JobID", "State", "NodeList", "Reason", "Elapsed", "Timelimit", "Start", "ExitCode")


class Accounting:
    """Cached ``sacct`` rows by job id. ``mode``: ``cache`` (never calls sacct), ``force`` (calls it now)."""

    def __init__(self) -> None:
        self._jobs: set[str] = set()
        self._rows: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()

    def register(self, job_id: str) -> None:
        with self._lock:
            self._jobs.add(str(job_id))

    def update(self) -> None:
        """One ``sacct`` for every registered job; a failed call keeps the previous answers."""
        with self._lock:
            ids = sorted(self._jobs)
        if not ids:
            return
        try:
            out = subprocess.run(["sacct", "--noheader", "--allocations", "--parsable2", "--format", ",".join(COLUMNS),
                                  "--jobs", ",".join(ids)], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return
        if out.returncode != 0:
            return
        rows = parse(out.stdout)
        with self._lock:
            self._rows.update(rows)

    def seed(self, job_id: str, row: dict[str, str]) -> None:
        """A row another process read (the session's watcher): no ``sacct`` needed for it here."""
        with self._lock:
            self._jobs.add(str(job_id))
            self._rows[str(job_id)] = dict(row)

    def get_info(self, job_id: str, mode: str = "cache") -> dict[str, str]:
        self.register(job_id)
        if mode == "force":
            self.update()
        with self._lock:
            return dict(self._rows.get(str(job_id), {}))


def parse(text: str) -> dict[str, dict[str, str]]:
    """``sacct --parsable2`` lines in :data:`COLUMNS` order -> rows by job id (a requeued job's last row wins)."""
    rows: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) != len(COLUMNS):
            continue
        row = dict(zip(COLUMNS, fields, strict=True))
        rows[row["JobID"]] = row
    return rows


#: the process's one view of accounting (every Slurm runtime object of the process shares it)
ACCOUNTING = Accounting()
