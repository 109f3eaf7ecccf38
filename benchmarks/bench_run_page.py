"""The run page of a big run: a 1 GiB trajectory's ``run.html`` is built, and opens, in little time.

A run folder is written with ``--gib`` GiB of recorded model calls (default 1): conversations that
resend their growing history, so each call's request is large (``--request-kib``, default 2048, the
gateway's own cap on a kept request). Measured:

* **build**: ``render_run_page`` — the previews of the first calls, the metadata of the rest;
* **page size**: what the browser has to load;
* **open**: headless Chromium loading the page and building its DOM (``--dump-dom``), minus Chromium's
  start-up on an empty page, the median of ``--repeat`` runs. Goal: under 2 s.

    python benchmarks/bench_run_page.py [--gib 1] [--request-kib 2048] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
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


def write_run(folder: Path, gib: float, request_kib: int) -> int:
    """A run folder whose call record holds ``gib`` GiB; returns the number of calls."""
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
                      "response": {"choices": [{"message": {"role": "assistant", "content": f"answer {n}"}}]},
                      "duration_s": 1.0, "usage": {"input_tokens": 1000, "output_tokens": 50, "cached_tokens": 0,
                                                   "cost_usd": 0.001}}
            line = json.dumps(record) + "\n"
            out.write(line)
            written += len(line)
    return n


def _chromium_seconds(binary: str, url: str) -> float:
    with tempfile.TemporaryDirectory() as profile:
        start = time.perf_counter()
        subprocess.run([binary, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", url], check=True,
                       capture_output=True, timeout=300)
        return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--request-kib", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        start = time.perf_counter()
        n = write_run(run, args.gib, args.request_kib)
        size = (run / "logs" / "model-calls.jsonl").stat().st_size
        print(f"trajectory: {n} calls, {size / (1 << 30):.2f} GiB (written in {time.perf_counter() - start:.1f} s)")
        start = time.perf_counter()
        html = render_run_page(run)
        build = time.perf_counter() - start
        page = run / "run.html"
        page.write_text(html, encoding="utf-8")
        print(f"build: {build:.2f} s; page: {len(html.encode()) / (1 << 20):.2f} MiB")
        binary = next((shutil.which(b) for b in ("chromium", "chromium-browser") if shutil.which(b)), None)
        if binary is None:
            print("open: skipped (no chromium)")
            return 0
        empty = Path(tmp) / "empty.html"
        empty.write_text("<!doctype html><title>x</title>")
        base = statistics.median(_chromium_seconds(binary, empty.as_uri()) for _ in range(args.repeat))
        full = statistics.median(_chromium_seconds(binary, page.as_uri()) for _ in range(args.repeat))
        print(f"open: {full - base:.2f} s beyond Chromium's start ({full:.2f} s in all, empty page {base:.2f} s); "
              f"goal < 2 s: {'met' if full - base < 2 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
