"""What the ``gateway`` network costs a run of the local runtime, compared with ``none``.

``gateway`` adds, per run: opening the run on the gateway, the launcher making one listening socket in the
sandbox's namespace (Landlock: first entering a namespace of its own) and handing it out over a unix
socketpair, and closing the run (its listener shut down first). ``none`` has the namespace but nothing in
it. The agent is ``/bin/true``, so the number is the whole run's overhead, not the agent's work. The
gateway's own per-call latency is ``bench_gateway.py``'s.

    python benchmarks/bench_gateway_network.py [--repeat 8] [--sandbox bwrap landlock]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_rexmle.gateway import Gateway  # noqa: E402
from pytest_rexmle.runtime.base import RunSpec  # noqa: E402
from pytest_rexmle.runtime.local import LocalRuntime  # noqa: E402


def one_run(runtime: LocalRuntime, network: str) -> float:
    root = Path(tempfile.mkdtemp(prefix="rexmle-bench-net-"))
    for folder in ("public", "run/workspace", "run/submission", "run/logs"):
        (root / folder).mkdir(parents=True)
    (root / "run" / "instructions.md").write_text("x")
    run = root / "run"
    spec = RunSpec("bench", ["/bin/true"], {}, root / "public", run / "workspace", run / "submission", run / "logs",
                   run / "instructions.md", 60, network=network)
    start = time.perf_counter()
    outcome = runtime.run(runtime.stage(spec))
    seconds = time.perf_counter() - start
    if outcome.exit_code != 0:
        raise SystemExit(f"the run failed: {outcome.stderr.read_text()[-500:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=8)
    parser.add_argument("--sandbox", nargs="+", default=["bwrap", "landlock"])
    args = parser.parse_args()
    gateway = Gateway(environ={})
    for sandbox in args.sandbox:
        runtime = LocalRuntime(sandbox=sandbox, gateway=lambda: gateway)
        times: dict[str, list[float]] = {"none": [], "gateway": []}
        for _ in range(args.repeat):  # interleaved, so a busy moment of the machine hits both alike
            for network in times:
                times[network].append(one_run(runtime, network))
        for network, values in times.items():
            print(f"{sandbox:9s} {network:8s} median {statistics.median(values):.3f} s  best {min(values):.3f} s  "
                  f"({len(values)} runs)")
    gateway.close()


if __name__ == "__main__":
    main()
