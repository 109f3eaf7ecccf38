"""Issue 17's network attacks and issue 23's socket escape, against every mechanism, as root and unprivileged.

A real session with ``--rexmle-network=gateway`` (the default) runs the key-hunting agent
(``fixtures/agents/gateway_hunt``) while the harness holds a provider key and points the gateway at a
stand-in provider on the host's 127.0.0.1. The host also offers what an escaped agent wants: a pathname
unix socket under ``/run`` (a stand-in for munged's, mode 0777), an abstract unix socket, a UDP service
(a stand-in DNS server) and TCP services on 127.0.0.1 and on the host's own address. The attack failed
when: the key appears nowhere the agent could read, the agent's model call reached the provider only
through the gateway and with the real key swapped in, zenodo.org was refused by the proxy and that
refusal is in run.json's ``egress``, ``CONNECT zenodo.org<NUL>.pypi.org:443`` was a 400 (issue 32), and no
host service counted a connection. Where a mechanism cannot give the gateway network safely, the session
must refuse to start, with a message.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from ..conftest import AGENTS
from ..sandbox.gateway_standin import (
    StandInProvider,
    UdpResponder,
    UnixService,
    host_address,
    real_host_services,
    require_real_gateway,
)
from ..sandbox.standin import TokenServer
from ..sandbox.test_gateway_network import REAL_KEY, check_confined
from .conftest import Mechanism, session_dict, shared_once


def _gateway_session(mech: Mechanism) -> dict:
    provider, everywhere = StandInProvider(), TokenServer("0.0.0.0")
    munge, abstract, dns = UnixService(), UnixService(abstract=True), UdpResponder()
    try:
        real_tcp, real_unix = real_host_services()  # munged, MariaDB, slurmctld/slurmdbd, Docker, D-Bus here
        targets = {"tcp": [["127.0.0.1", provider.port], [host_address(), everywhere.port], *real_tcp],
                   "unix": munge.address, "abstract": abstract.address, "dns": list(dns.address), "chat": True,
                   "unix_extra": real_unix}
        folder = mech.new_folder("gateway")
        cmd = f"HUNT_TARGETS={shlex.quote(json.dumps(targets))} python agent.py"
        args = [*mech.args(network="gateway"), "--agent=command", f"--agent-option=dir={AGENTS / 'gateway_hunt'}",
                f"--agent-option=cmd={cmd}", "--rexmle-judge=none", "-k", "ldct-iqa"]
        session = mech.run(folder, args, extra_env={"OPENAI_API_KEY": REAL_KEY, "OPENAI_BASE_URL": provider.base_url},
                           timeout=300)
    finally:
        for service in (provider, everywhere, munge, abstract, dns):
            service.close()
    run = Path(session.run_dirs["ldct-iqa"]) if "ldct-iqa" in session.run_dirs else None
    hunt = loot = calls = None
    key_in = []
    if run is not None:
        for name in ("hunt.json", "loot.txt"):
            found = next(iter(sorted(run.glob(f"workspace/**/{name}"))), None)
            if found is not None and name == "hunt.json":
                hunt = json.loads(found.read_text())
            elif found is not None:
                loot = found.read_text(errors="replace")
        calls_path = run / "logs" / "model-calls.jsonl"
        calls = calls_path.read_text(errors="replace") if calls_path.exists() else None
        key_in = [str(p) for p in run.rglob("*") if p.is_file() and not p.is_symlink()
                  and p.stat().st_size < 5_000_000 and REAL_KEY.encode() in p.read_bytes()]
    return {"session": session_dict(session), "hunt": hunt, "loot": loot, "calls": calls, "key_in": key_in,
            "provider_auth": provider.authorizations,
            "accepted": {"munge": munge.accepted, "abstract": abstract.accepted, "dns": dns.received},
            "answer": StandInProvider.ANSWER}


class _Counted:
    """What check_confined reads of the host services, rebuilt from the shared record."""

    def __init__(self, accepted: int) -> None:
        self.accepted = self.received = accepted


def test_gateway_is_the_agents_only_way_out(mechanism, tmp_path_factory):
    require_real_gateway()
    result = shared_once(tmp_path_factory, f"gateway-{mechanism.id}", lambda: _gateway_session(mechanism))
    session = result["session"]
    assert not session["timed_out"], session["output"][-3000:]
    if mechanism.name == "docker" and mechanism.user == "unprivileged":
        # the listener enters the container's namespace with setns: without root the session refuses
        assert session["returncode"] != 0 and "needs a root harness" in session["output"], session["output"][-3000:]
        assert session["runs"] == {}
        return
    run = session["runs"]["ldct-iqa"]
    assert run["network"] == "gateway", run
    report = result["hunt"]
    assert report is not None and result["loot"] is not None, session["output"][-3000:]
    accepted = result["accepted"]
    services = (None, None, _Counted(accepted["munge"]), _Counted(accepted["abstract"]), _Counted(accepted["dns"]))
    check_confined(report, result["loot"], None, run, services)
    # the agent's one model call went through the gateway, which swapped in the real key
    assert report["chat"] == result["answer"] and result["provider_auth"] == [f"Bearer {REAL_KEY}"]
    assert "403" in report["proxy_data_host"], report["proxy_data_host"]
    assert any(e["host"] == "zenodo.org" and e["allowed"] is False for e in run["egress"]), run["egress"]
    # issue 32: a NUL in the CONNECT authority is a 400, never a pypi.org subdomain that resolves as zenodo.org
    assert report["proxy_nul"].startswith("HTTP/1.1 400"), report["proxy_nul"]
    assert not any("zenodo" in e["host"] and e["allowed"] for e in run["egress"]), run["egress"]
    assert run["usage"]["requests"] == 1 and run["usage"]["source"] == "gateway", run["usage"]
    assert result["calls"] and result["answer"] in result["calls"]
    assert result["key_in"] == [], "the real key was written into the run folder"
    assert REAL_KEY not in session["output"]

