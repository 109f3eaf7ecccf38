"""``rexmle selfcheck --runtime NAME``: the conformance suite against any registered runtime.

One line per check (``PASS``/``FAIL``, the check, why); exit status 0 when every check passed, 1 when one
failed, 2 on a usage error (an unknown runtime). The runtime is built the way a session builds it
(``from_settings``), from a session's default settings plus the few options given here.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from ..runtime import RUNTIMES
from ..runtime.base import RuntimeUnavailable
from ..settings import Settings
from .conformance import CHECKS, CheckResult, run_selfcheck


def add_selfcheck_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runtime", required=True, help="a registered runtime (entry point of rexmle.runtimes)")
    parser.add_argument("--sandbox", choices=("auto", "bwrap", "landlock"), default="auto",
                        help="local runtime (and Slurm's inner local runtime): the isolation to check")
    parser.add_argument("--slurm-inner", choices=("local", "docker"), default="local",
                        help="slurm runtime: what isolates the agent on the node")
    parser.add_argument("--image", help="container runtimes: the image the probe runs in (it needs python3)")
    parser.add_argument("--work-dir", help="where the planted folders and runs go (default: the temporary "
                        "folder; a Slurm runtime needs one its nodes share)")
    parser.add_argument("--json", action="store_true", help="the results as JSON")


def selfcheck_settings(args: argparse.Namespace, work: Path):
    """A session's default settings for ``args.runtime`` whose folders are ``work`` (nodes see it too)."""
    return Settings(agent=None, agent_options={}, data="prepared", data_dir=work, runtime=args.runtime,
                    time_limit=None, runs_dir=work, report_dir=work, min_percentile=0.0, resume=False,
                    unsafe_local=False, seed=None, sandbox=args.sandbox, slurm_inner=args.slurm_inner)


def run_selfcheck_command(args: argparse.Namespace) -> int:
    work = Path(args.work_dir).resolve() if args.work_dir else Path(tempfile.gettempdir())
    work.mkdir(parents=True, exist_ok=True)
    provider = RUNTIMES.load(args.runtime)  # an unknown name: a usage error listing the registered ones
    try:
        runtime = provider.from_settings(selfcheck_settings(args, work))
    except RuntimeUnavailable as exc:
        results = [CheckResult(name, False, f"the runtime could not be built here: {exc}") for name in CHECKS]
    else:
        results = run_selfcheck(runtime, work=work, image=args.image,
                                log=lambda line: print(f"selfcheck: {line}", file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps([{"check": r.name, "passed": r.passed, "why": r.why} for r in results], indent=1))
    else:
        for result in results:
            print(result.line())
        failed = [r.name for r in results if not r.passed]
        print(f"{args.runtime}: {len(results) - len(failed)}/{len(results)} checks passed"
              + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 0 if all(r.passed for r in results) else 1
