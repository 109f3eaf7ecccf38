"""The campaign's own figures: how well the session used the slots it was given.

The makespan against its list-scheduling ideal (the same measured durations, longest first, each on the
earliest-free slots it needs), the slot-seconds left idle while a run that would have fitted waited, and
with GPUs their allocated and NVML-busy fractions (``null`` with the reason where a GPU run has no samples:
no guess). Each field is defined in docs/clusters.md, "The campaign's figures".
"""

from __future__ import annotations

import heapq

from .board import BoardRecord, Done, Skipped, task_of_key


def list_schedule(runs: list[tuple[float, int]], slots: int | None) -> float:
    """Makespan of ``(duration, width)`` runs placed longest first on the earliest-free slots."""
    if not runs:
        return 0.0
    if not slots:
        return max(d for d, _ in runs)
    free = [0.0] * slots
    for duration, width in sorted(runs, key=lambda r: -r[0]):
        width = max(1, min(width, slots))
        earliest = heapq.nsmallest(width, range(slots), key=free.__getitem__)
        start = max(free[i] for i in earliest)
        for i in earliest:
            free[i] = start + duration
    return max(free)


def idle_while_waiting(points: list[tuple[float, int, int | None]], end: float) -> float:
    """Integral of free slots over the times a waiting run would have fitted in them."""
    idle = 0.0
    for (t, free, narrowest), (t_next, _, _) in zip(points, [*points[1:], (end, 0, None)], strict=True):
        if narrowest is not None and free > 0 and narrowest <= free:
            idle += free * max(0.0, t_next - t)
    return idle


def campaign_figures(executor, records: dict[str, BoardRecord]) -> dict:
    """The figures of a finished (or stopped) executor; ``records``: the board's final records by run key."""
    slots = executor.slots
    # a run whose harness only found its data missing ran no agent: it is no part of the campaign
    ran = [t for t in executor.times.values() if t.started is not None and t.ended is not None
           and not isinstance(records.get(t.run), Skipped)]
    n_slots = None if slots.unlimited else len(slots.names)
    doc: dict = {"slots": "scheduler" if slots.unlimited else ("gpus" if slots.gpus else "cpu"),
                 "n_slots": n_slots, "gpus": list(slots.names) if slots.gpus else [], "n_runs": len(ran)}
    if not ran:
        return {**doc, "makespan_s": 0.0, "run_seconds_sum": 0.0, "ideal_makespan_s": 0.0, "ratio": None,
                "idle_while_waiting_s": 0.0, "runs": []}
    first = min(t.started for t in ran)
    last = max(t.ended for t in ran)
    makespan = last - first
    ideal = list_schedule([(t.ended - t.started, t.width) for t in ran], n_slots)
    runs = []
    for t in sorted(ran, key=lambda r: r.started):
        record = records.get(t.run)
        done = record if isinstance(record, Done) else None  # only a run that ended as "done" used GPUs it names
        runs.append({"task": task_of_key(t.run), "run": t.run, "slots": list(t.slots), "gpus": done.gpus if done else [],
                     "state": record.state if record else None, "started_at": t.started_at,
                     "start_s": round(t.started - first, 3), "end_s": round(t.ended - first, 3),
                     "seconds": round(t.ended - t.started, 3), "expected_s": t.expected,
                     "telemetry": done.telemetry if done else None})
    doc.update(makespan_s=round(makespan, 3), run_seconds_sum=round(sum(r["seconds"] for r in runs), 3),
               ideal_makespan_s=round(ideal, 3), ratio=round(makespan / ideal, 4) if ideal > 0 else None,
               idle_while_waiting_s=round(idle_while_waiting(executor.timeline, last), 3), runs=runs)
    if slots.gpus:
        doc.update(_gpu_fractions(runs, len(slots.names), makespan))
    return doc


def _gpu_fractions(runs: list[dict], n_gpus: int, makespan: float) -> dict:
    capacity = n_gpus * makespan
    held = sum(r["seconds"] * len(r["gpus"]) for r in runs)
    out: dict = {"gpu_hours": round(held / 3600.0, 6),
                 "gpu_allocated_fraction": round(held / capacity, 4) if capacity > 0 else None}
    with_gpus = [r for r in runs if r["gpus"]]
    missing = [r["task"] for r in with_gpus if not (r.get("telemetry") or {}).get("available")]
    if missing or not with_gpus:
        reason = (f"no NVML samples for {', '.join(missing)}" if missing else "no run used a GPU")
        out.update(gpu_busy_fraction=None, gpu_busy_reason=reason)
        return out
    busy = sum(r["telemetry"]["utilisation_mean"] / 100.0 * r["telemetry"]["seconds"] * len(r["gpus"])
               for r in with_gpus)
    out["gpu_busy_fraction"] = round(busy / capacity, 4) if capacity > 0 else None
    return out


def summary_line(doc: dict) -> str:
    """The terminal summary's campaign line."""
    where = {"gpus": f"{doc['n_slots']} GPU(s)", "cpu": f"{doc['n_slots']} CPU slot(s)",
             "scheduler": "the scheduler's nodes"}[doc["slots"]]
    ratio = f" ({doc['ratio']:.2f}x)" if doc.get("ratio") else ""
    line = (f"campaign: makespan {doc['makespan_s']:.1f} s for {doc['n_runs']} run(s) of {doc['run_seconds_sum']:.1f} s "
            f"in all; ideal {doc['ideal_makespan_s']:.1f} s on {where}{ratio}")
    if doc["slots"] != "scheduler":
        unit = "GPU" if doc["slots"] == "gpus" else "slot"
        line += f"; {unit}-idle while runs waited {doc['idle_while_waiting_s']:.1f} s"
    if doc["slots"] == "gpus":
        busy = doc.get("gpu_busy_fraction")
        line += f"; GPUs busy {100 * busy:.0f}% (NVML)" if busy is not None else "; GPU busy: no NVML samples"
    return line
