"""The egress proxy through real clients (urllib, http.client tunnels): allowed hosts reached, refused
ones never contacted, every host asked for recorded."""

from __future__ import annotations

import http.client
import re
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pytest_rexmle.gateway.egress import Decision, EgressPolicy, resolve, task_source_hosts

from .conftest import open_served


class _Site(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hits: list[str] = []

    def log_message(self, *args) -> None:
        return

    def do_GET(self) -> None:
        type(self).hits.append(self.path)
        type(self).headers_seen.append({k.lower(): v for k, v in self.headers.items()})
        body = f"site says {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def site():
    """A loopback HTTP server standing in for an internet host; counts every request it gets."""
    handler = type("Site", (_Site,), {"hits": [], "headers_seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, handler
    server.shutdown()
    server.server_close()


def _opener(proxy: str):
    return urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy, "https": proxy}))


def test_allowed_host_through_urllib_and_recorded(gateway, tmp_path, site):
    server, handler = site
    port = server.server_address[1]
    s = open_served(gateway, tmp_path, egress_allow=[f"127.0.0.1:{port}"])
    with _opener(s.base).open(f"http://127.0.0.1:{port}/simple/numpy/?x=1", timeout=10) as resp:
        assert resp.read() == b"site says /simple/numpy/?x=1"
    assert handler.hits == ["/simple/numpy/?x=1"]
    (entry,) = s.run.close()["egress"]
    first, last = entry.pop("first"), entry.pop("last")
    assert entry == {"host": "127.0.0.1", "port": port, "allowed": True, "reason": f"allow-list: 127.0.0.1:{port}",
                     "count": 1, "paths": ["/simple/numpy/"]}
    assert first == last and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", first)


def test_deny_list_wins_and_nothing_is_contacted(gateway, tmp_path, site):
    server, handler = site
    port = server.server_address[1]
    s = open_served(gateway, tmp_path, egress_allow=[f"127.0.0.1:{port}"], egress_deny=["127.0.0.1"])
    with pytest.raises(urllib.error.HTTPError) as err:
        _opener(s.base).open(f"http://127.0.0.1:{port}/data.zip", timeout=10)
    assert err.value.code == 403 and b"deny-list" in err.value.read()
    assert handler.hits == []
    (entry,) = s.run.close()["egress"]
    assert entry["allowed"] is False and entry["paths"] == ["/data.zip"]


@pytest.mark.parametrize("url,reason", [
    ("http://zenodo.org/records/15692630/files/TopCoW2024_Data_Release.zip", "deny-list: zenodo.org"),
    ("http://isles22.grand-challenge.org/data/", "deny-list"),
    ("http://drive.google.com/uc?id=1", "deny-list: drive.google.com"),
    ("http://example.com/", "not on the allow-list"),
    ("http://pypi.org:8080/simple/", "plain HTTP only to port 80"),
    ("http://huggingface.co/datasets/someone/topcow/resolve/main/labels.zip", "dataset downloads"),
])
def test_refusals(served, url, reason):
    with pytest.raises(urllib.error.HTTPError) as err:
        _opener(served.base).open(url, timeout=10)
    assert err.value.code == 403
    assert reason in err.value.read().decode()
    assert any(not e["allowed"] and reason in e["reason"] for e in served.run.close()["egress"])


def test_connect_tunnel_allowed_and_refused(gateway, tmp_path, site):
    server, handler = site
    port = server.server_address[1]
    s = open_served(gateway, tmp_path, egress_allow=[f"127.0.0.1:{port}"])
    conn = http.client.HTTPConnection(s.host, s.port, timeout=10)
    conn.set_tunnel("127.0.0.1", port)
    conn.request("GET", "/through-tunnel")
    assert conn.getresponse().read() == b"site says /through-tunnel"
    conn.close()
    refused = http.client.HTTPConnection(s.host, s.port, timeout=10)
    refused.set_tunnel("pypi.org", 22)
    with pytest.raises(OSError, match="403"):
        refused.request("GET", "/")
    egress = {(e["host"], e["port"]): e for e in s.run.close()["egress"]}
    assert egress[("127.0.0.1", port)]["allowed"] and egress[("127.0.0.1", port)]["reason"].endswith("not visible)")
    assert not egress[("pypi.org", 22)]["allowed"] and "CONNECT only to port 443" in egress[("pypi.org", 22)]["reason"]


def test_host_listener_needs_the_token_for_the_proxy(gateway, tmp_path, site):
    server, handler = site
    port = server.server_address[1]
    s = open_served(gateway, tmp_path, egress_allow=[f"127.0.0.1:{port}"])
    host, hport = s.run.host_address()
    with pytest.raises(urllib.error.HTTPError) as err:
        _opener(f"http://{host}:{hport}").open(f"http://127.0.0.1:{port}/x", timeout=10)
    assert err.value.code == 407
    proxy = s.run.environment(f"http://{host}:{hport}")["HTTP_PROXY"]
    with _opener(proxy).open(f"http://127.0.0.1:{port}/y", timeout=10) as resp:
        assert resp.read() == b"site says /y"
    assert handler.hits == ["/y"]
    assert "proxy-authorization" not in handler.headers_seen[-1]  # the token stays with the gateway
    s.run.close()


def test_host_header_is_the_urls(gateway, tmp_path, site):
    """An allowed host must not front for a refused one through its Host header."""
    server, handler = site
    port = server.server_address[1]
    s = open_served(gateway, tmp_path, egress_allow=[f"127.0.0.1:{port}"])
    request = urllib.request.Request(f"http://127.0.0.1:{port}/z", headers={"Host": "zenodo.org"})
    with _opener(s.base).open(request, timeout=10) as resp:
        resp.read()
    assert handler.headers_seen[-1]["host"] == f"127.0.0.1:{port}"
    s.run.close()


def test_policy_units():
    policy = EgressPolicy(allow=["lab-mirror.example:8443"], task_hosts=("zenodo.org",))
    assert policy.decide("files.pythonhosted.org", 443, None, tunnel=True).allowed
    assert policy.decide("cdn-lfs.hf.co", 443, None, tunnel=True).allowed
    assert policy.decide("huggingface.co", 80, "/bert-base/resolve/main/model.safetensors", tunnel=False).allowed
    assert not policy.decide("sandbox.zenodo.org", 443, None, tunnel=True).allowed
    assert policy.decide("lab-mirror.example", 8443, None, tunnel=True).allowed
    assert not policy.decide("lab-mirror.example", 443, None, tunnel=True).allowed
    with pytest.raises(PermissionError):  # a default-allowed name must not lead to the host's own services
        resolve("localhost", 443, Decision(True, "allow-list: localhost"))


def test_task_source_hosts_from_task_yaml():
    hosts = task_source_hosts()
    for host in ("zenodo.org", "figshare.com", "drive.google.com", "grand-challenge.org"):
        assert host in hosts


def test_egress_log_cleans_agent_text_and_is_bounded():
    from pytest_rexmle.gateway.egress import MAX_HOSTS, OTHER_HOSTS, Decision, EgressLog

    log = EgressLog()
    log.record("evil\x1b[31m.example", 80, Decision(False, "not on the allow-list"), "/a\x1b[2Jb\u202e")
    (entry,) = log.to_json()
    assert "\x1b" not in entry["host"] and "\x1b" not in entry["paths"][0] and "\u202e" not in entry["paths"][0]
    for i in range(MAX_HOSTS + 5):
        log.record(f"h{i}.example", 443, Decision(False, "x"), None)
    *listed, other = log.to_json()
    assert len(listed) == MAX_HOSTS and not any(e.get("flooded") for e in listed)
    assert other["host"] == OTHER_HOSTS and other["flooded"] is True and other["allowed"] is False
    assert other["count"] == 6 and other["distinct_hosts"] == 6 and other["latest_hosts"][-1] == "h1004.example:443"
    log.record("h1004.example", 443, Decision(False, "x"), None)  # the same host again: counted, not distinct
    assert log.to_json()[-1]["count"] == 7 and log.to_json()[-1]["distinct_hosts"] == 6


def test_internal_addresses():
    from pytest_rexmle.gateway.egress import internal_address

    for address in ("127.0.0.1", "10.1.2.3", "172.20.0.1", "192.168.1.1", "169.254.169.254", "::1", "fe80::1%eth0",
                    "fd00::5", "::ffff:127.0.0.1", "0.0.0.0", "100.64.0.1", "224.0.0.1"):
        assert internal_address(address), address
    for address in ("151.101.0.223", "2a04:4e42::223", "203.0.113.80", "8.8.8.8"):
        assert not internal_address(address), address


@pytest.mark.parametrize("host,path", [
    ("huggingface.co", "//datasets/someone/topcow/resolve/main/labels.zip"),
    ("huggingface.co", "/%64atasets/someone/topcow/resolve/main/labels.zip"),
    ("huggingface.co", "/%2564atasets/someone/topcow/resolve/main/labels.zip"),
    ("huggingface.co", "/Datasets/someone/topcow/resolve/main/labels.zip"),
    ("huggingface.co", "/DATASETS/someone/topcow/resolve/main/labels.zip"),
    ("huggingface.co", "/api//datasets/someone/topcow/tree/main"),
    ("huggingface.co", "/api/resolve-cache/datasets/someone/topcow/abc/labels.zip"),
    ("huggingface.co", "/bert/../datasets/someone/topcow/resolve/main/labels.zip"),
    ("hf.co", "/%44atasets/someone/topcow/resolve/main/labels.zip"),
    ("cdn-lfs.huggingface.co", "/repos/ab/cd/abcd/0123456789abcdef"),    # content hashes: model or dataset?
    ("cdn-lfs-us-1.hf.co", "/repos/ab/cd/abcd/0123456789abcdef"),
    ("cas-bridge.xethub.hf.co", "/xet-bridge-us/0123/0123456789abcdef"),
])
def test_hub_dataset_path_variants_refused(served, host, path):
    """Plain HTTP through the proxy: the hub's server reads these as its dataset routes (or, on its file CDN,
    cannot be told from a model's), so the proxy must too; nothing is resolved or contacted."""
    conn = http.client.HTTPConnection(served.host, served.port, timeout=10)
    conn.request("GET", f"http://{host}{path}")
    resp = conn.getresponse()
    body = resp.read().decode()
    conn.close()
    assert resp.status == 403 and "dataset downloads from model hubs are off" in body, body
    (entry,) = served.run.close()["egress"]
    assert entry["host"] == host and not entry["allowed"] and entry["paths"] == [path]


def test_hub_model_paths_still_allowed():
    policy = EgressPolicy(task_hosts=())
    for path in ("/bert-base/resolve/main/model.safetensors", "/api/models/bert-base",
                 "/someone/datasets-paper-model/resolve/main/x.bin", "/api/models/someone/datasets"):
        assert policy.decide("huggingface.co", 80, path, tunnel=False).allowed, path
    assert policy.decide("cdn-lfs.huggingface.co", 443, None, tunnel=True).allowed  # through TLS: path unseen
