"""``run.json`` says what the agent got: its uid, its limits and its seccomp filter are what a process inside
the sandbox observes, under bubblewrap and Landlock (issue #38: the record used to name the run's uid while
an image's interpreter ran as root). Image runs are covered by ``tests/images/test_drop_before_exec.py``."""

from __future__ import annotations

import pytest

from pytest_rexmle.limits import Limits

from .conftest import run_agent

PROBE = r"""
import errno, json, os, socket
status = {}
for line in open("/proc/self/status"):
    key, _, value = line.partition(":")
    if key in ("Uid", "Gid", "CapEff", "CapPrm", "CapAmb", "NoNewPrivs", "Seccomp"):
        status[key] = value.split()[0]
limits = {line[:26].strip(): line[26:47].strip() for line in open("/proc/self/limits").read().splitlines()[1:]}
def attempt(family):
    try:
        socket.socket(family, socket.SOCK_STREAM).close()
        return "ok"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
print(json.dumps({"status": status, "limits": limits, "unix": attempt(socket.AF_UNIX), "inet": attempt(socket.AF_INET)}))
"""
LIMITS = Limits(open_files=321, file_size=96 << 20)


@pytest.mark.sandbox
@pytest.mark.parametrize("network", ["none", "host"])
def test_run_json_is_what_the_agent_observes(tmp_path, mechanism, network):
    run = run_agent(tmp_path, mechanism, PROBE, limits=LIMITS, network=network)
    assert run.outcome.exit_code == 0, run.stderr
    seen, details = run.report(), run.outcome.details
    status = seen["status"]
    assert status["Uid"] == status["Gid"] == str(details["agent_uid"])
    assert status["CapEff"] == status["CapPrm"] == status["CapAmb"] == "0000000000000000"
    assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2"
    assert seen["limits"]["Max open files"] == str(details["limits"]["open_files"]) == "321"
    assert seen["limits"]["Max file size"] == str(details["limits"]["file_size"]) == str(96 << 20)
    assert seen["limits"]["Max core file size"] == "0"
    record = details["seccomp"]
    assert record["mode"] == "filter" and record["network"] == network
    assert (seen["unix"] == "ok") == record["unix_sockets"], (seen, record)
    # Landlock's "none" is the filter's refusal of IP sockets; bubblewrap's an empty network namespace
    if mechanism == "landlock" and network == "none":
        assert seen["inet"] != "ok"
