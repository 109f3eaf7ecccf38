"""``--rexmle-network=bridge`` under bubblewrap: the internet answers, the host's loopback does not.

The bridge is the sandbox's own network namespace NATed by slirp4netns (``runtime/sandbox/slirp.py``).
Without slirp4netns these tests skip, unless ``REXMLE_REQUIRE_SLIRP=1`` (CI) makes that a failure.
The "internet" is the offline stand-in of ``standin.py`` (198.18.0.0/15, built as root); no test
sends anything to a real network: under the bridge the agent only contacts 127.0.0.1, slirp4netns's
own 10.0.2.x addresses and the stand-in (whose DNS server also answers slirp4netns's forwarded queries).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from pytest_rexmle.runtime import staging
from pytest_rexmle.runtime.sandbox.slirp import SLIRP_DNS, slirp4netns

from ..conftest import REPO, require_service
from .conftest import require_mechanism, run_agent
from .standin import NAME, StandInInternet, TokenServer
from .test_unprivileged import NOBODY, remove_as_nobody, run_as_nobody, unprivileged_site  # noqa: F401

#: the agent: fetch each URL (5 s timeout), resolve each name, report bodies or error names as JSON
FETCH = '''
import errno, json, socket, urllib.request
urls, names = json.loads(TARGETS)
out = {"resolv.conf": open("/etc/resolv.conf").read(), "urls": {}, "names": {}}
for url in urls:
    try:
        out["urls"][url] = urllib.request.urlopen(url, timeout=5).read().decode()
    except OSError as exc:
        reason = getattr(exc, "reason", exc)
        out["urls"][url] = errno.errorcode.get(getattr(reason, "errno", None), str(reason))
for name in names:
    try:
        out["names"][name] = socket.gethostbyname(name)
    except OSError as exc:
        out["names"][name] = type(exc).__name__
print(json.dumps(out))
'''


@pytest.fixture
def bridge() -> str:
    """bubblewrap and slirp4netns, both working here (or skipped, or failed under CI's variables)."""
    require_mechanism("bwrap")
    binary = slirp4netns()
    require_service(binary is not None, "REXMLE_REQUIRE_SLIRP", "slirp4netns (apt-get install slirp4netns)")
    return binary


@pytest.fixture
def loopback_token():
    server = TokenServer("127.0.0.1")
    yield server
    server.close()


@pytest.fixture
def internet():
    """The stand-in internet (root only: it creates a network namespace and a veth pair)."""
    require_service(os.geteuid() == 0 and shutil.which("ip") is not None, "REXMLE_REQUIRE_SLIRP",
                    "root and iproute2, to build the stand-in internet (ip netns, veth) for the bridge tests")
    net = StandInInternet.create()
    try:
        yield net
    finally:
        net.remove()


def fetch_code(urls: list[str], names: list[str] = ()) -> str:
    return f"TARGETS = {json.dumps([urls, list(names)])!r}\n{FETCH}"


def fetch(tmp_path: Path, network: str, urls: list[str], names: list[str] = ()):
    run = run_agent(tmp_path, "bwrap", fetch_code(urls, names), network=network)
    assert run.outcome.exit_code == 0, run.stderr[-2000:]
    return run, run.report()


def loopback_urls(port: int) -> list[str]:
    # 10.0.2.2 is slirp4netns's gateway, which leads to the host's loopback unless disabled; only under
    # the bridge does it exist (on the host's network it would be a real private address: not contacted)
    return [f"http://127.0.0.1:{port}/", f"http://10.0.2.2:{port}/"]


@pytest.mark.parametrize("network", ["bridge", "host"])
def test_bridge_hides_the_host_loopback_that_host_shows(tmp_path, bridge, loopback_token, network):
    urls = loopback_urls(loopback_token.port) if network == "bridge" else loopback_urls(loopback_token.port)[:1]
    run, report = fetch(tmp_path, network, urls)
    assert run.outcome.details["network"] == network
    if network == "host":
        assert report["urls"][urls[0]] == loopback_token.token
        return
    assert loopback_token.token not in run.stdout
    assert report["urls"] == {urls[0]: "ECONNREFUSED", urls[1]: "ENETUNREACH"}, report
    # the host's resolv.conf may name a loopback resolver (127.0.0.53) that does not exist inside
    assert report["resolv.conf"].split("\n")[1:] == [f"nameserver {SLIRP_DNS}", ""]


def _wrapper(tmp_path: Path, binary: str, nameserver: str, hosts_line: str) -> Path:
    """slirp4netns seeing its own /etc/resolv.conf (naming the stand-in's DNS server, so no query reaches
    this machine's real resolver) and an /etc/hosts with one more name, in a private mount namespace.
    ``unshare`` and ``sh`` exec, so the harness's pid, ready-fd and exit-fd still belong to slirp4netns."""
    resolv, hosts = tmp_path / "slirp-resolv.conf", tmp_path / "slirp-hosts"
    resolv.write_text(f"nameserver {nameserver}\n")
    hosts.write_text(Path("/etc/hosts").read_text() + hosts_line + "\n")
    script = tmp_path / "slirp4netns"
    script.write_text(textwrap.dedent(f'''\
        #!/bin/sh
        exec unshare --mount --propagation private -- sh -c \\
            'mount --bind "$0" /etc/resolv.conf && mount --bind "$1" /etc/hosts && shift && exec {binary} "$@"' \\
            {resolv} {hosts} "$@"
        '''))
    script.chmod(0o755)
    return script


def test_bridge_reaches_the_internet_by_address_and_by_name(tmp_path, bridge, internet, monkeypatch):
    hosts_only = "hosts-only.rexmle.test"
    web, dns = internet.serve({NAME: internet.address})
    monkeypatch.setattr("pytest_rexmle.runtime.local.slirp4netns",
                        lambda: str(_wrapper(tmp_path, bridge, internet.address, f"{internet.address} {hosts_only}")))
    by_address, by_name = f"http://{internet.address}:{web.port}/", f"http://{NAME}:{web.port}/"
    run, report = fetch(tmp_path, "bridge", [by_address, by_name], [NAME, hosts_only])
    assert run.outcome.details["network"] == "bridge"
    assert report["urls"] == {by_address: web.token, by_name: web.token}, report
    assert report["names"][NAME] == internet.address
    # slirp4netns forwards DNS packets to its nameserver; it is no resolver and never reads /etc/hosts
    assert report["names"][hosts_only] == "gaierror" and hosts_only in dns.queries
    assert f"nameserver {SLIRP_DNS}" in report["resolv.conf"]


def test_unprivileged_harness_gets_the_same_bridge(unprivileged_site, bridge, loopback_token, internet):  # noqa: F811
    """As uid 65534 slirp4netns joins bubblewrap's user namespace to reach the network namespace."""
    web, _ = internet.serve({})
    _, _, site = unprivileged_site
    loopback, outside = loopback_urls(loopback_token.port), f"http://{internet.address}:{web.port}/"
    reports = {}
    for network, urls in (("bridge", [*loopback, outside]), ("host", loopback[:1])):
        code = site / f"fetch_{network}.py"
        code.write_text(fetch_code(urls))
        code.chmod(0o644)
        result = run_as_nobody(unprivileged_site, "bwrap", code.name, network)
        try:
            assert result["exit_code"] == 0, result["stderr"]
            assert result["details"]["network"] == network and result["details"]["agent_uid"] == NOBODY
            reports[network] = json.loads([line for line in result["stdout"].splitlines() if line.startswith("{")][-1])
        finally:
            remove_as_nobody(unprivileged_site, result)
    assert reports["bridge"]["urls"] == {loopback[0]: "ECONNREFUSED", loopback[1]: "ENETUNREACH",
                                         outside: web.token}, reports["bridge"]
    assert reports["host"]["urls"] == {loopback[0]: loopback_token.token}


# -- slirp4netns never outlives its run ------------------------------------------------------------------

def slirp_children(parent: int) -> list[int]:
    """slirp4netns processes whose parent is ``parent``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if comm == "slirp4netns" and int(rest[1]) == parent:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"


@pytest.mark.parametrize("ending", ["exit", "timeout"])
def test_slirp4netns_ends_with_the_run(tmp_path, bridge, ending):
    seen: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.update(slirp_children(os.getpid()))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    code = f"import time; time.sleep({1.5 if ending == 'exit' else 120})"
    try:
        run = run_agent(tmp_path, "bwrap", code, network="bridge", time_limit=4)
    finally:
        done.set()
        watcher.join(2)
    assert run.outcome.details["network"] == "bridge"
    assert run.outcome.timed_out is (ending == "timeout")
    assert seen, "no slirp4netns ran during the bridged run"
    assert not slirp_children(os.getpid()) and not any(alive(pid) for pid in seen)


HARNESS = '''
import sys
from pathlib import Path
from tests.sandbox.conftest import run_agent
run_agent(Path(sys.argv[1]), "bwrap", "import time; time.sleep(120)", network="bridge", time_limit=110)
'''


def test_slirp4netns_ends_when_the_harness_is_killed(tmp_path, bridge):
    """A ``kill -9`` of the harness runs no cleanup: the kernel closing its end of slirp4netns's exit-fd
    must be enough (slirp4netns does not notice on its own that the namespace's last process is gone)."""
    harness = subprocess.Popen([sys.executable, "-c", HARNESS, str(tmp_path)], cwd=REPO, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    slirps: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while not slirps and time.monotonic() < deadline and harness.poll() is None:
            time.sleep(0.1)
            slirps = slirp_children(harness.pid)
        died = harness.stderr.read().decode()[-2000:] if harness.poll() is not None else ""
        assert slirps, f"the harness started no slirp4netns: {died}"
        time.sleep(0.5)  # the agent is running now
        harness.send_signal(signal.SIGKILL)
        harness.wait()
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in slirps) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(alive(pid) for pid in slirps), "slirp4netns outlived a kill -9 of its harness"
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.wait()
        staging.recover(tmp_path / "run")  # the stage the killed harness left goes home, as the next session does
        for pid in slirps:  # never leave one behind on the shared machine, even when the test fails
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


# -- where the bridge cannot hide the loopback, it says so and records the truth ---------------------------

@pytest.mark.parametrize("why", ["landlock", "no-slirp4netns"])
def test_bridge_falls_back_to_the_host_network_once_and_says_so(tmp_path, monkeypatch, loopback_token, why):
    from pytest_rexmle.runtime import local

    mechanism = "landlock" if why == "landlock" else "bwrap"
    require_mechanism(mechanism)
    monkeypatch.setattr(local, "_fallbacks_warned", set())  # a fresh session
    if why == "no-slirp4netns":
        monkeypatch.setattr(local, "slirp4netns", lambda: None)
    code = fetch_code(loopback_urls(loopback_token.port)[:1])
    with pytest.warns(UserWarning, match="apt-get install slirp4netns") as caught:
        first = run_agent(tmp_path / "first", mechanism, code, network="bridge")
    assert len([w for w in caught if "rexmle-network=bridge" in str(w.message)]) == 1
    assert ("Landlock" in str(caught[0].message)) is (why == "landlock")
    # the run says what it really had: the host's network, where the loopback service answers
    assert first.outcome.details["network"] == "host"
    assert first.report()["urls"] == {loopback_urls(loopback_token.port)[0]: loopback_token.token}
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per session, not once per run
        second = run_agent(tmp_path / "second", mechanism, code, network="bridge")
    assert second.outcome.details["network"] == "host"


def test_resolv_conf_is_laid_where_a_symlinked_one_points(tmp_path):
    """systemd-resolved's /etc/resolv.conf is a link into /run, which the sandbox lacks: the overlay goes
    to the link's target, with the folders bubblewrap must create first."""
    from pytest_rexmle.runtime.sandbox.slirp import resolv_conf_target

    assert resolv_conf_target(str(tmp_path / "missing")) == (str(tmp_path / "missing"), [])
    link = tmp_path / "resolv.conf"
    link.symlink_to("/run/rexmle-test-none/resolve/stub-resolv.conf")
    assert resolv_conf_target(str(link)) == ("/run/rexmle-test-none/resolve/stub-resolv.conf",
                                             ["--dir", "/run", "--dir", "/run/rexmle-test-none",
                                              "--dir", "/run/rexmle-test-none/resolve"])
