"""What the gateway adds to a model call, and how it holds up with several runs streaming at once.

The stand-in provider of the tests (``tests/gateway/standin.py``) runs in a child process on loopback, so
it does not share this process's interpreter lock with the gateway. Measured here:

* **added latency**: the median of ``--calls`` sequential non-streamed chat completions sent through the
  gateway, minus the median of the same calls sent straight to the stand-in (goal: at most 5 ms);
* **throughput**: ``--runs`` runs (default 8), each with its own token and listener, each streaming
  ``--streams`` completions of 100 SSE events, all at once; completions and events per second through the
  gateway, against the same load sent straight to the stand-in.

    python benchmarks/bench_gateway.py [--calls 300] [--runs 8] [--streams 20] [--budget usd=1e6,tokens=1e12]

``--budget`` gives every run that budget, so the added latency includes reserving (and, with ``usd``,
pricing) each call; with ``usd`` the throughput part is skipped (its stand-in model has no price).
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_rexmle.gateway import Budget, Gateway, Limits  # noqa: E402

STANDIN = ("import sys, time; sys.path.insert(0, %r); from tests.gateway.standin import start_standin; "
           "state, _ = start_standin(); print(state.url, flush=True); time.sleep(3600)")


def _call(host: str, port: int, path: str, body: bytes, token: str, conn=None) -> tuple[bytes, object]:
    conn = conn or http.client.HTTPConnection(host, port, timeout=30)
    conn.request("POST", path, body=body, headers={"Authorization": f"Bearer {token}",
                                                   "Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {data[:200]!r}")
    return data, conn


def latency(host: str, port: int, prefix: str, token: str, n: int) -> list[float]:
    body = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}).encode()
    conn, times = None, []
    for _ in range(n):
        start = time.perf_counter()
        _, conn = _call(host, port, prefix + "/chat/completions", body, token, conn)
        times.append(time.perf_counter() - start)
    conn.close()
    return times


def throughput(targets: list[tuple[str, int, str, str]], streams: int) -> tuple[float, int, int]:
    """(seconds, completions, events) for every target streaming ``streams`` completions at once."""
    body = json.dumps({"model": "long", "messages": [], "stream": True}).encode()
    counts = [0] * len(targets)
    errors: list[str] = []

    def worker(i: int, host: str, port: int, prefix: str, token: str) -> None:
        conn = None
        try:
            for _ in range(streams):
                data, conn = _call(host, port, prefix + "/chat/completions", body, token, conn)
                counts[i] += data.count(b"data: ")
        except Exception as exc:  # reported, not hidden
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=worker, args=(i, *t)) for i, t in enumerate(targets)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(errors[0])
    return time.perf_counter() - start, streams * len(targets), sum(counts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--streams", type=int, default=20)
    parser.add_argument("--budget", default=None, help="a --rexmle-budget value for every run")
    args = parser.parse_args()
    budget = Budget.parse(args.budget)
    child = subprocess.Popen([sys.executable, "-c", STANDIN % str(ROOT)], stdout=subprocess.PIPE, text=True)
    try:
        url = child.stdout.readline().strip()
        up_host, up_port = url.removeprefix("http://").split(":")
        environ = {"OPENAI_BASE_URL": url + "/v1", "OPENAI_API_KEY": "sk-bench"}
        gateway = Gateway(None, environ=environ, limits=Limits(), task_hosts=())
        with tempfile.TemporaryDirectory() as tmp:
            runs = []
            for i in range(args.runs):
                run = gateway.open_run(f"bench{i}", logs_dir=Path(tmp) / f"r{i}" / "logs",
                                       submission_dir=Path(tmp) / f"r{i}" / "submission", task_id="ldct-iqa",
                                       budget=budget)
                listener = socket.create_server(("127.0.0.1", 0))
                run.serve(listener)
                runs.append((run, listener.getsockname()[1]))
            run0, port0 = runs[0]
            latency("127.0.0.1", port0, "/openai/v1", run0.token, 20)  # warm-up (imports, price table)
            latency(up_host, int(up_port), "/v1", "sk-bench", 20)
            direct = latency(up_host, int(up_port), "/v1", "sk-bench", args.calls)
            through = latency("127.0.0.1", port0, "/openai/v1", run0.token, args.calls)
            d_med, g_med = statistics.median(direct), statistics.median(through)
            print(f"latency, {args.calls} sequential non-streamed calls on loopback (keep-alive):")
            print(f"  direct   median {d_med * 1e3:.2f} ms  p90 {statistics.quantiles(direct, n=10)[-1] * 1e3:.2f} ms")
            print(f"  gateway  median {g_med * 1e3:.2f} ms  p90 {statistics.quantiles(through, n=10)[-1] * 1e3:.2f} ms")
            print(f"  added    median {(g_med - d_med) * 1e3:.2f} ms (goal <= 5 ms)")
            if budget is not None and budget.usd is not None:  # the streams' model "long" has no price
                print("throughput: skipped (a usd budget refuses the stand-in's unpriced streaming model)")
            else:
                d_sec, d_done, d_events = throughput([(up_host, int(up_port), "/v1", "sk-bench")] * args.runs,
                                                     args.streams)
                targets = [("127.0.0.1", port, "/openai/v1", run.token) for run, port in runs]
                g_sec, g_done, g_events = throughput(targets, args.streams)
                print(f"throughput, {args.runs} runs streaming at once, {args.streams} completions of 100 events "
                      "each:")
                print(f"  direct   {d_done / d_sec:.1f} completions/s, {d_events / d_sec:.0f} events/s")
                print(f"  gateway  {g_done / g_sec:.1f} completions/s, {g_events / g_sec:.0f} events/s "
                      f"({g_sec / d_sec:.2f}x the direct time)")
                metered = sum(run.close()["usage"]["requests"] for run, _ in runs)
                print(f"  metered requests: {metered} (expected {args.calls + 20 + g_done})")
        gateway.close()
    finally:
        child.kill()
        child.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
