"""The run page of a big run: a 1 GiB trajectory's ``run.html`` is built, and opens, in little time.

A run folder is written (streaming, in a temporary folder) with ``--gib`` GiB of recorded model calls
(default 1): conversations that resend their growing history, so each call's request is large
(``--request-kib``, default 2048, the gateway's own cap on a kept request). With ``--hostile`` (the
default) every answer also carries what once made a 62 MiB record a 290 MiB page: a tool call whose
name is ``--name-kib`` KiB and whose arguments are ``--args-kib`` KiB of ``<`` (fourfold when escaped),
with bidi overrides and zero-width characters in both. Measured:

* **build**: ``render_run_page`` — the previews of the first calls, the metadata of the rest — and the
  process's peak RSS;
* **page size**: what the browser has to load. Goal: at most 5 MiB;
* **open**: headless Chromium loading the page and building its DOM (``--dump-dom``), minus Chromium's
  start-up on an empty page, the median of ``--repeat`` runs. Goal: under 2 s.

    python benchmarks/bench_run_page.py [--gib 1] [--request-kib 2048] [--repeat 3] [--no-hostile]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_rexmle.report.runpage import render_run_page  # noqa: E402

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def _tool_call(n: int, name_kib: int, args_kib: int) -> dict:
    """A tool call of an agent that floods the page: a long name and long arguments, bidi in both."""
    name = "read_file \u202egnp.tsil-srewsna\u200b" + "n" * (name_kib * 1024)
    arguments = json.dumps({"path": "\u2066x\u2069" + "<" * (args_kib * 1024)})
    return {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": arguments}}


def write_run(folder: Path, gib: float, request_kib: int, hostile: tuple[int, int] | None = None) -> int:
    """A run folder whose call record holds ``gib`` GiB, written line by line; returns the number of calls.
    ``hostile``: (name KiB, arguments KiB) of a tool call in every answer."""
    (folder / "logs").mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"task": "isles22", "agent": "bench", "runtime": "local",
                                                 "data": "synthetic", "started": "2026-01-01T00:00:00+00:00",
                                                 "usage": {"input_tokens": 0, "output_tokens": 0}}))
    target, written, n = int(gib * (1 << 30)), 0, 0
    filler = "x" * 1000
    with open(folder / "logs" / "model-calls.jsonl", "w", encoding="utf-8") as out:
        while written < target:
            n += 1
            history = [{"role": "user" if i % 2 else "assistant", "content": filler}
                       for i in range(max(1, request_kib * 1024 // 1040))]
            record = {"ts": "2026-01-01T00:00:00+00:00", "protocol": "openai", "route": "POST /v1/chat/completions",
                      "model": "gpt-4o", "status": 200, "stream": False,
                      "request": {"model": "gpt-4o", "messages": [*history, {"role": "user", "content": f"step {n}"}]},
                      "response": {"choices": [{"message": {"role": "assistant", "content": f"answer {n}", **(
                          {"tool_calls": [_tool_call(n, *hostile)]} if hostile else {})}}]},
                      "duration_s": 1.0, "usage": {"input_tokens": 1000, "output_tokens": 50, "cached_tokens": 0,
                                                   "cost_usd": 0.001}}
            line = json.dumps(record) + "\n"
            out.write(line)
            written += len(line)
    return n


def _chromium_seconds(binary: str, url: str) -> tuple[float, float]:
    """Wall seconds and CPU seconds (all of Chromium's processes) of one headless load of ``url``: on a
    shared machine the wall time mostly measures the other load, the CPU time what the page costs."""
    with tempfile.TemporaryDirectory() as profile:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([binary, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", url], check=True,
                       capture_output=True, timeout=300)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--request-kib", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-hostile", dest="hostile", action="store_false",
                        help="no flooding tool call in the answers")
    parser.add_argument("--name-kib", type=int, default=64)
    parser.add_argument("--args-kib", type=int, default=512)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        start = time.perf_counter()
        n = write_run(run, args.gib, args.request_kib, (args.name_kib, args.args_kib) if args.hostile else None)
        size = (run / "logs" / "model-calls.jsonl").stat().st_size
        flood = f"; each answer a tool call of a {args.name_kib} KiB name and {args.args_kib} KiB arguments"
        print(f"trajectory: {n} calls, {size / (1 << 30):.2f} GiB (written in {time.perf_counter() - start:.1f} s)"
              f"{flood if args.hostile else ''}")
        start = time.perf_counter()
        html = render_run_page(run)
        build = time.perf_counter() - start
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        page = run / "run.html"
        page.write_text(html, encoding="utf-8")
        mib = len(html.encode()) / (1 << 20)
        listed, previewed = html.count('class="body"'), html.count("<summary>answer</summary>")
        print(f"build: {build:.2f} s (peak RSS {rss:.0f} MiB); page: {mib:.2f} MiB, "
              f"goal <= 5 MiB: {'met' if mib <= 5 else 'NOT met'}; {listed} calls listed, "
              f"bodies previewed for {previewed}")
        binary = next((shutil.which(b) for b in ("chromium", "chromium-browser") if shutil.which(b)), None)
        if binary is None:
            print("open: skipped (no chromium)")
            return 0
        empty = Path(tmp) / "empty.html"
        empty.write_text("<!doctype html><title>x</title>")
        empties = [_chromium_seconds(binary, empty.as_uri()) for _ in range(args.repeat)]
        fulls = [_chromium_seconds(binary, page.as_uri()) for _ in range(args.repeat)]
        base, full = statistics.median(w for w, _ in empties), statistics.median(w for w, _ in fulls)
        base_cpu, full_cpu = statistics.median(c for _, c in empties), statistics.median(c for _, c in fulls)
        print(f"open: {full - base:.2f} s beyond Chromium's start ({full:.2f} s in all, empty page {base:.2f} s); "
              f"goal < 2 s: {'met' if full - base < 2 else 'NOT met'}; CPU {full_cpu - base_cpu:.2f} s beyond "
              f"Chromium's start ({full_cpu:.2f} s in all, empty page {base_cpu:.2f} s); load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
