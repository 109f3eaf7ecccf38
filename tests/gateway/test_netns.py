"""A listener made inside a network namespace of its own (as a sandbox's runtime makes one) and served by
the harness's gateway: the agent there reaches the model API and the proxy through it, and nothing else —
not the provider on the host's loopback."""

from __future__ import annotations

import array
import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from tests.conftest import require_service

from .conftest import REAL_KEYS, open_served

AGENT = Path(__file__).with_name("netns_agent.py")


def _can_unshare_net() -> bool:
    if not (shutil.which("unshare") and shutil.which("ip")):
        return False
    return subprocess.run(["unshare", "-n", "ip", "link", "set", "lo", "up"], capture_output=True).returncode == 0


def test_listener_in_a_network_namespace(gateway, tmp_path, standin):
    require_service(_can_unshare_net(), "REXMLE_REQUIRE_SANDBOX",
                    "network namespaces (util-linux unshare -n and iproute2 ip, as root)")
    served = open_served(gateway, tmp_path)  # a loopback listener too; the namespace's one is served below
    ours, theirs = socket.socketpair()
    provider_port = int(standin.url.rpartition(":")[2])
    child = subprocess.Popen(["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"', sys.executable,
                              str(AGENT), str(theirs.fileno()), str(provider_port)],
                             pass_fds=(theirs.fileno(),), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    theirs.close()
    try:
        ours.settimeout(20)
        fds = array.array("i")
        _, ancillary, _, _ = ours.recvmsg(1, socket.CMSG_LEN(fds.itemsize))
        fds.frombytes(ancillary[0][2][:fds.itemsize])
        listener = socket.socket(fileno=fds[0])
        served.run.serve(listener)
        ours.sendall(json.dumps(served.run.environment("http://127.0.0.1:8484")).encode())
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        ours.close()
    assert child.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result == {"model_call": "hi", "provider_direct": "ConnectionRefusedError", "zenodo": 403}
    record = served.run.close()
    assert record["usage"]["requests"] == 1
    assert any(e["host"] == "zenodo.org" and not e["allowed"] for e in record["egress"])
    assert standin.last().headers["authorization"] == f"Bearer {REAL_KEYS['OPENAI_API_KEY']}"
