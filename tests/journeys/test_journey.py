"""The documented commands (README.md, then docs/ in mkdocs.yml's nav order) run, in that order, on a fresh
clone: the first run, the everyday lines, the real run's data, images and AIDE run, report merging and status,
your own agent (tests/journeys/plan.py says how each is run and which are not, with the reason).

The world outside is answered at its edge only: Zenodo and figshare by the loopback server of tests/prepare
(every release's stand-in), the archives a reader downloads by hand lie in ``~/Downloads``, Docker Hub by the
registry mirror .ci/registry-mirror.sh gives the engine, and the model provider by a scripted loopback server
named as the host's ``OPENAI_BASE_URL``. ``$HOME`` and the cache are the journey's own.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

from ..conftest import REPO, require_service
from ..docker.fake_llm import ScriptedLLM
from ..prepare.conftest import build_state
from ..prepare.fake_server import FakeServer, RunningServer
from .clone import fresh_clone
from .plan import JOURNEY, NotRun, Run

#: environment a reader's shell would not have, or that points at this checkout rather than the clone
DROPPED = ("PYTHONPATH", "VIRTUAL_ENV", "REXMLE_CACHE_DIR", "REXMLE_DATA_DIR", "REXMLE_DOCKER_IMAGE",
           "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER",
           "PYTEST_XDIST_WORKER_COUNT", "PYTEST_CURRENT_TEST")
KEY = "sk-journey-0123456789"


def _engine_answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _shell(step: Run, clone: Path, env: dict[str, str], first: bool) -> subprocess.CompletedProcess:
    script = "set -e\n" + ("" if first else ". .venv/bin/activate\n") + (step.setup + "\n" if step.setup else "")
    return subprocess.run(["bash", "-c", script + step.command()], cwd=clone, env=env, capture_output=True,
                          text=True, timeout=900)


def test_the_documented_commands_in_order_on_a_fresh_clone(tmp_path):
    clone = fresh_clone(REPO, tmp_path / "pytest-rexmle")
    home = tmp_path / "home"
    state, manual = build_state()
    (home / "Downloads").mkdir(parents=True)
    for name, data in manual.items():
        (home / "Downloads" / name).write_bytes(data)
    docker = _engine_answers()
    if os.environ.get("REXMLE_REQUIRE_DOCKER") == "1":
        assert docker, "a Docker engine is required here (REXMLE_REQUIRE_DOCKER=1) but does not answer"
    server = RunningServer(FakeServer(zenodo=state.zenodo, figshare=state.figshare))
    timings, skipped = [], []
    try:
        with ScriptedLLM(host="127.0.0.1") as llm:
            env = {k: v for k, v in os.environ.items() if k not in DROPPED}
            path = [p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(str(REPO))]
            env.update(HOME=str(home), PATH=os.pathsep.join(path), JOURNEY_TMP=str(tmp_path),
                       REXMLE_ZENODO_URL=server.state.url, REXMLE_FIGSHARE_URL=server.state.url,
                       REXMLE_DOWNLOAD_BACKOFF="0", OPENAI_API_KEY=KEY,
                       OPENAI_BASE_URL=f"http://127.0.0.1:{llm.port}/v1")
            first = True
            for step in JOURNEY:
                if isinstance(step, NotRun):
                    continue
                if step.docker and not docker:
                    skipped.append(step.readme)
                    continue
                start = time.monotonic()
                proc = _shell(step, clone, env, first)
                timings.append((round(time.monotonic() - start, 1), step.command()))
                out = proc.stdout + proc.stderr
                assert proc.returncode == 0, f"`{step.command()}` exited {proc.returncode}:\n{out[-4000:]}"
                for pattern in step.expect:
                    assert re.search(pattern, out), f"`{step.command()}`: no {pattern!r} in\n{out[-4000:]}"
                first = False
            assert llm.requests if docker else True, "AIDE never asked the stand-in provider"
    finally:
        server.close()
        print("\n".join(f"{seconds:7.1f} s  {command}" for seconds, command in timings))
    # what the guide promises of the first run and the merged report, on disk
    assert (clone / ".rexmle" / "report" / "latest" / "rexmle-report.html").is_file()
    assert (clone / "merged" / "rexmle-merged.json").is_file()
    assert (clone / "out.xml").read_text().count("<testcase") == 20
    if skipped:
        require_service(False, "REXMLE_REQUIRE_DOCKER", f"a Docker engine for {len(skipped)} documented command(s)")
