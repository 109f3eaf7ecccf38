"""R&D-Agent end to end: the real rdagent (pinned in agents/rd_agent/Dockerfile) built FROM the offline test
image, its data-science loop driven by a loopback LLM (``RDAgentLLM``) to a graded, ranked submission.

The scripted model plays every role R&D-Agent asks for in one loop — competition analysis, problem
identification, hypotheses, the task, the pipeline code (``RD_MAIN``), the coder's and runner's reviews
and the experiment feedback — in JSON mode (a model name LiteLLM does not know has no response schema).
The code runs the way R&D-Agent runs it without Docker: locally in the container, in the image's Python,
under strace and coverage (see agents/rd_agent/Dockerfile).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy  # noqa: F401  (imported before pytester snapshots sys.modules: numpy cannot be imported twice)
import pytest

from pytest_rexmle.data.synthetic import ensure_synthetic
from pytest_rexmle.task import registry

from ..agent_images import KEY
from ..conftest import run_folders
from .conftest import (
    agent_image,
    assert_atif_is_the_meters,
    assert_no_file_holds,
    description_line,
    point_openai_at,
    session_containers,
)
from .fake_llm import RD_METRIC, RDAgentLLM


@pytest.fixture(scope="session")
def rd_agent_image(docker_client, tmp_path_factory) -> str:
    """rexmle/rd-agent:latest, agents/rd_agent/Dockerfile on the real base (rdagent and its tree from PyPI;
    minutes once, then skipped by its recipe label — .ci/build-agent-images.sh builds it before the tests in CI)."""
    return agent_image("rd-agent", docker_client, tmp_path_factory)


def test_rd_agent_image_keeps_the_agent_apart_from_the_code_python(docker_client, rd_agent_image):
    script = ("rdagent --help >/dev/null && echo cli-ok; "
              "/opt/rdagent/bin/python -c 'import rdagent, importlib.metadata as m; print(m.version(\"rdagent\"))'; "
              "PATH=/bin:/usr/bin python -c 'import sys, numpy; print(sys.prefix)'; "
              "python3 -c 'import sys; print(sys.prefix)'; "
              "PATH=/bin:/usr/bin python -c 'import rdagent' 2>/dev/null || echo agent-not-in-code-python; "
              "PATH=/bin:/usr/bin python -m coverage --version | head -1; strace -V | head -1")
    out = docker_client.containers.run(rd_agent_image, ["sh", "-c", script], remove=True).decode()
    dockerfile = (Path(__file__).resolve().parents[2] / "pytest_rexmle" / "agents" / "rd_agent" / "Dockerfile").read_text()
    pinned = next(line.split("=", 1)[1] for line in dockerfile.splitlines() if line.startswith("ARG RDAGENT_VERSION="))
    lines = out.splitlines()
    assert lines[0] == "cli-ok" and lines[1] == pinned
    # R&D-Agent's runner finds the image's own Python (rexmle/base's /opt/conda), with numpy, on PATH=/bin:/usr/bin
    assert lines[2] == lines[3] and lines[2] != "/usr"
    assert "agent-not-in-code-python" in lines and "Coverage.py" in out and "strace" in lines[-1]


def test_rd_agent_runs_end_to_end_against_a_scripted_llm(docker_bench, docker_client, rd_agent_image, session_id,
                                                         shared_cache, monkeypatch):
    twin = ensure_synthetic(registry().get("ldct-iqa"), shared_cache)
    with RDAgentLLM() as llm:
        point_openai_at(llm, KEY, docker_client, monkeypatch)
        result = docker_bench("--agent=rd-agent", "--agent-option=model=openai/scripted-model",
                              "--agent-option=embedding_model=openai/scripted-embedding", "--agent-option=steps=1",
                              f"--agent-option=image={rd_agent_image}", "--rexmle-time-limit=900", "-k", "ldct-iqa",
                              timeout=1200)
        requests, kinds, errors = list(llm.requests), list(llm.kinds), list(llm.errors)
    run = run_folders(docker_bench.path, "ldct-iqa")[-1]
    stderr = (run / "logs" / "agent.stderr.log").read_text(errors="replace")
    assert not errors, errors
    result.assert_outcomes(passed=1)
    # one loop of R&D-Agent's data-science scenario, every role answered over chat completions
    assert requests and all(r["_auth"] == f"Bearer {KEY}" for r in requests)
    chats = [r for r in requests if r["_path"] == "/v1/chat/completions"]
    embeddings = [r for r in requests if r["_path"] == "/v1/embeddings"]
    assert len(chats) + len(embeddings) == len(requests) and chats and embeddings  # it asks for both
    assert {r["model"] for r in chats} == {"scripted-model"} and {r["model"] for r in embeddings} == {"scripted-embedding"}
    assert any(r.get("stream") for r in chats)  # LiteLLM streams by default: answered as server-sent events
    for kind in ("competition", "problems", "hypotheses", "task", "code", "coder_eval", "exp_feedback"):
        assert kind in kinds, (kinds, stderr[-3000:])
    analysis = next(r for r in chats if "Metric Direction" in json.dumps(r["messages"]))
    assert description_line(twin) in "\n".join(m["content"] for m in analysis["messages"])  # the organisers' description
    # the pipeline it wrote ran in the container and its submission was exported, graded and ranked
    with open(run / "submission" / "submission.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    with open(twin.public / "sample_submission.csv", newline="") as fh:
        expected_ids = [row["image_id"] for row in csv.DictReader(fh)]
    assert sorted(r["image_id"] for r in rows) == sorted(expected_ids)
    assert len({r["quality_score"] for r in rows}) > 1  # the fitted model, not a copied sample submission
    record = json.loads((run / "result.json").read_text())
    assert record["status"] == "ok" and record.get("percentile") is not None
    assert "R&D-Agent's experiment to submit:" in stderr and "[rexmle-adapter] exported" in stderr
    # R&D-Agent's own log and workspaces are kept in the run's workspace; the scores it recorded are ours
    root = run / "workspace" / "rd-agent"
    assert list((root / "log").rglob("*.pkl")), "R&D-Agent's log is missing"
    scores = list((root / "workspace").glob("*/scores.csv"))
    assert scores and RD_METRIC in scores[0].read_text()
    # the key reached the server but no file of the run folder (R&D-Agent logs its settings)
    assert_no_file_holds(run, KEY, largest=20_000_000)
    # the capability judge reads what the harness observed (the gateway's recorded model calls and the code
    # they name), never R&D-Agent's own stdout, which is a claim; its verdict is recorded per strategy
    from pytest_rexmle.capability.schema import NO_TRACE_FLAG
    from pytest_rexmle.capability.trace import collect_sources

    sources = {source.rel: source.text for source in collect_sources(run)}
    assert "logs/agent.stdout.log" not in sources
    capability = json.loads((run / "capability.json").read_text())
    if not (run / "logs" / "model-calls.jsonl").is_file():  # no gateway recorded the calls: nothing is credited
        assert capability["flags"] == [NO_TRACE_FLAG] and all(r["score"] == 0 for r in capability["results"])
    assert len(capability["results"]) == 13 and all(isinstance(r["evidence"], str) for r in capability["results"])
    for strategy in capability["results"]:
        if strategy["score"] == 1:  # a positive verdict quotes where it was seen
            assert strategy["evidence"].strip()
    meta = json.loads((run / "run.json").read_text())
    assert meta["image"] == rd_agent_image and meta["exit_code"] == 0
    assert_atif_is_the_meters(run, meta)
    assert session_containers(docker_client, session_id) == []
