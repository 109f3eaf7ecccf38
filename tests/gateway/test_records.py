"""The gateway's record where the harness shows it: run.json (``usage``, ``egress``), the S1–S5 cost block
(the gateway's numbers first, the agent's own file only as "reported by the agent"), JUnit properties,
and the options that configure it."""

from __future__ import annotations

import json
from types import SimpleNamespace

from pytest_rexmle.capability.stages import read_usage
from pytest_rexmle.gateway.record import junit_properties, run_json_fields
from pytest_rexmle.run.launch import LaunchedRun, RunFolder, finish
from pytest_rexmle.runtime.base import RunOutcome

from .conftest import open_served


class _Handle:
    def __init__(self, outcome: RunOutcome) -> None:
        self.outcome = outcome

    def wait(self) -> RunOutcome:
        return self.outcome

    def record(self) -> dict:
        return {}


class _Agent:
    name = "stand-in"

    def finish(self, ctx) -> None:
        return None


def _metered_record(gateway, tmp_path) -> dict:
    s = open_served(gateway, tmp_path)
    s.request("POST", "/openai/v1/chat/completions", {"model": "gpt-4o-mini", "messages": []})
    s.request("POST", "/anthropic/v1/messages", {"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": []})
    try:
        import urllib.request

        urllib.request.build_opener(urllib.request.ProxyHandler({"http": s.base})).open(
            "http://zenodo.org/records/1/files/answers.zip", timeout=10)
    except OSError:
        pass
    return s.run.close()


def test_run_json_gets_usage_and_egress(gateway, tmp_path):
    record = _metered_record(gateway, tmp_path / "gw")
    folder = RunFolder(tmp_path / "run")
    for sub in (folder.workspace, folder.submission, folder.logs):
        sub.mkdir(parents=True)
    outcome = RunOutcome(0, False, 1.5, folder.logs / "o", folder.logs / "e", details={"gateway": record})
    started = {"task": "ldct-iqa", "agent": "stand-in", "runtime": "local", "data": "synthetic", "time_limit": 60,
               "started": "2026-01-01T00:00:00+00:00"}  # what launch() writes; run.json is checked on every write
    finish(LaunchedRun(folder, _Agent(), None, _Handle(outcome), started))
    meta = json.loads((folder.root / "run.json").read_text())
    assert meta["usage"]["source"] == "gateway" and meta["usage"]["requests"] == 2
    assert meta["usage"]["input_tokens"] == 11 + 25 and meta["usage"]["output_tokens"] == 7 + 9
    assert set(meta["usage"]["by_model"]) == {"gpt-4o-mini", "claude-sonnet-4-5"}
    (entry,) = meta["egress"]
    assert entry.pop("first") <= entry.pop("last")
    assert meta["egress"] == [{"host": "zenodo.org", "port": 80, "allowed": False,
                               "reason": "deny-list: zenodo.org publishes challenge data", "count": 1,
                               "paths": ["/records/1/files/answers.zip"]}]
    assert meta["budget_exhausted"] is None and meta["model_calls"] == "logs/model-calls.jsonl"
    assert "gateway" not in meta


def test_cost_block_prefers_the_gateway(tmp_path, gateway):
    record = _metered_record(gateway, tmp_path / "gw")
    run = tmp_path / "run"
    (run / "workspace").mkdir(parents=True)
    (run / "workspace" / "rexmle-usage.json").write_text(json.dumps({"input_tokens": 0, "output_tokens": 0,
                                                                     "cost_usd": 0.0, "turns": 1}))
    (run / "run.json").write_text(json.dumps({"duration": 3.0, **run_json_fields(record)}))
    usage = read_usage(run)
    assert usage["source"] == "gateway" and usage["turns"] == 2
    assert usage["input_tokens"] == 36 and usage["total_tokens"] == 36 + 16
    assert usage["cost_usd"] == record["usage"]["cost_usd"] > 0
    assert usage["reported_by_agent"]["input_tokens"] == 0  # the agent's claim, kept aside
    assert usage["reported_by_agent"]["source"] == "workspace/rexmle-usage.json"
    assert usage["wall_seconds"] == 3.0


def test_cost_block_without_gateway_is_unchanged(tmp_path):
    run = tmp_path / "run"
    (run / "workspace").mkdir(parents=True)
    (run / "workspace" / "rexmle-usage.json").write_text(json.dumps({"input_tokens": 5, "output_tokens": 2}))
    (run / "run.json").write_text(json.dumps({"duration": 1.0}))
    usage = read_usage(run)
    assert usage["source"] == "workspace/rexmle-usage.json" and usage["total_tokens"] == 7
    assert "reported_by_agent" not in usage


def test_junit_properties():
    usage = {"requests": 2, "input_tokens": 36, "output_tokens": 16, "cached_tokens": 8, "model_seconds": 0.1,
             "cost_usd": None, "cost_unknown_reason": "model 'x' is not in the genai-prices table",
             "source": "gateway"}
    props = dict(junit_properties(usage))
    assert props["usage.requests"] == 2 and props["usage.cost_usd"] is None
    assert "genai-prices" in props["usage.cost_unknown_reason"]
    assert junit_properties({"requests": 1, "source": "workspace/rexmle-usage.json"}) == []
    assert junit_properties(None) == []


def test_options(pytester):
    pytester.makepyfile("def test_x(rexmle_settings):\n    print('SETTINGS', rexmle_settings.budget,"
                        " rexmle_settings.egress_allow, rexmle_settings.network)\n")
    ok = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider", "--rexmle-budget=usd=2,requests=10",
                                       "--rexmle-egress-allow=lab-mirror.example", "--rexmle-egress-allow",
                                       "10.0.0.5:3128", "--rexmle-network=gateway", timeout=120)
    assert ok.ret == 0
    ok.stdout.fnmatch_lines(["*SETTINGS usd=2,requests=10 ('lab-mirror.example', '10.0.0.5:3128') gateway*"])
    bad = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--rexmle-budget=dollars=2", timeout=120)
    assert bad.ret == 4
    bad.stderr.fnmatch_lines(["*--rexmle-budget: expected NAME=VALUE with NAME in usd, tokens, requests*"])


def test_settings_feed_open_run(standin, tmp_path):
    from .conftest import make_gateway

    gw = make_gateway(standin)
    gw.settings = SimpleNamespace(budget=None, egress_allow=("lab-mirror.example",))
    s = open_served(gw, tmp_path)
    assert s.run.policy.decide("lab-mirror.example", 443, None, tunnel=True).allowed
    assert not s.run.policy.decide("zenodo.org", 443, None, tunnel=True).allowed
    gw.close()


def test_session_gateway_is_one_per_process(monkeypatch):
    import threading

    from pytest_rexmle.gateway import server

    monkeypatch.setattr(server, "_session", None)
    got = []
    threads = [threading.Thread(target=lambda: got.append(server.session_gateway(None))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(g) for g in got}) == 1
    got[0].close()
    fresh = server.session_gateway(None)
    assert fresh is not got[0] and not fresh.closed
    fresh.close()
