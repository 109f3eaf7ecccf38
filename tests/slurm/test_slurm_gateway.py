"""``--rexmle-network=gateway`` on Slurm: the job's harness process on the node runs its own gateway for
the run it hosts (the provider key reaches it in the job's environment, never the agent's), and the
inner bubblewrap sandbox gives the agent that gateway as its only peer. A real job of the one-node
cluster runs the key-hunting agent; the stand-in provider and the host services live on this machine,
which is the node.
"""

from __future__ import annotations

import json
import shlex

from ..conftest import AGENTS, run_folders
from ..sandbox.gateway_standin import StandInProvider, require_real_gateway
from ..sandbox.test_gateway_network import REAL_KEY, check_confined, host_services  # noqa: F401 (a fixture)
from .test_slurm_runtime import _sacct_state, _wait_until_gone, slurm_env  # noqa: F401 (a fixture)


def test_slurm_job_agent_reaches_only_the_nodes_gateway(bench, slurm_env, needs_bwrap, host_services,  # noqa: F811
                                                        monkeypatch):
    require_real_gateway()
    targets, services = host_services
    provider = StandInProvider()
    monkeypatch.setenv("OPENAI_API_KEY", REAL_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", provider.base_url)
    try:
        hunt = json.dumps({**targets, "tcp": [*targets["tcp"], ["127.0.0.1", provider.port]], "chat": True})
        result = bench("--agent=command", f"--agent-option=dir={AGENTS / 'gateway_hunt'}",
                       f"--agent-option=cmd=HUNT_TARGETS={shlex.quote(hunt)} python agent.py",
                       "--rexmle-runtime=slurm", "--rexmle-sandbox=bwrap", "-k", "ldct-iqa")
    finally:
        provider.close()
    result.assert_outcomes(passed=1)  # the hunt also submits the sample: the run is graded
    run = run_folders(bench.path, "ldct-iqa")[-1]
    agent_dir = run / "workspace" / "agent"  # the command agent runs in its copy of the agent's folder
    report = json.loads((agent_dir / "hunt.json").read_text())
    record = json.loads((run / "run.json").read_text())
    assert record["runtime"] == "slurm" and record["sandbox"] == "bwrap" and record["node"]
    check_confined(report, (agent_dir / "loot.txt").read_text(), None, record, services)
    assert report["chat"] == StandInProvider.ANSWER and provider.authorizations == [f"Bearer {REAL_KEY}"]
    assert "403" in report["proxy_data_host"], report["proxy_data_host"]
    assert record["usage"]["requests"] == 1 and record["usage"]["source"] == "gateway"
    assert any(e["host"] == "zenodo.org" and e["allowed"] is False for e in record["egress"]), record["egress"]
    calls = (run / "logs" / "model-calls.jsonl").read_text()
    assert StandInProvider.ANSWER in calls and REAL_KEY not in calls
    for path in run.rglob("*"):
        if path.is_file() and path.stat().st_size < 5_000_000:
            assert REAL_KEY.encode() not in path.read_bytes(), path
    job = record["slurm"]["job_id"]
    assert _wait_until_gone([job]) == [] and _sacct_state(job) == "COMPLETED"
