"""The session's schedule: one executor starts every selected run the moment its slots are free.

Why: pytest items are handed to xdist workers ahead of time, so tying a run to the item (and the worker)
that reports it left GPUs idle while runs waited behind others on the same worker. Here the controller
owns the schedule (:mod:`.executor`), runs each run in a child harness process (:mod:`.perform`), and
keeps each run's state in a file of the session's board (:mod:`.board`), so the item that reports a run
can live in any process and simply waits for its run's record.

* :mod:`.policy` — which queued runs start now (longest expected first, backfilling without starving
  a run that needs several GPUs).
* :mod:`.telemetry` — NVML samples of a run's GPUs while it is alive.
* :mod:`.figures` — the campaign's figures: makespan, sum of run times, ideal makespan, idle GPU time.
"""
