"""Seeing what an agent did: the run page, the ATIF trajectory, the compute record and the disclosure.

One real session: a command agent (the system's Python, stdlib only) talks to a loopback stand-in of
an OpenAI-compatible provider through the session's gateway — a tool call, the tool's result carried
back, a final answer — and every text it sends or receives carries the red-team injection strings. The
provider's answers are hostile too. Then: headless Chromium opens ``run.html`` (no script of the
agent's runs; the steps, tokens, cost and grade are shown; a screenshot is kept to look at),
``trajectory.atif.json`` validates against ATIF v1.7's rules and its totals equal the gateway's meter,
``rexmle view`` serves the page and one call's whole record, ``rexmle export atif`` writes Harbor's
layout, and the compute record and disclosure are in the JSON, Markdown and HTML reports and in JUnit.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pytest_rexmle.report.atif import AtifTrajectory, build_trajectory, load
from pytest_rexmle.report.calls import read_calls
from pytest_rexmle.report.junit import read_cases
from pytest_rexmle.report.runpage import SCRIPT_HASH, render_run_page

from ..conftest import report_dir, report_json, require_service, run_folders
from ..schedule.conftest import baseline_agent

#: what an agent (or a provider) that wants to run code in the reader's browser writes
INJECTIONS = ["<script>document.title='PWNED'</script>", '<img src=x onerror="document.body.dataset.pwned=1">',
              "</pre></details><script>document.title='PWNED2'</script>", "{{ 7*7 }} {% raw %}",
              '<a href="javascript:document.title=1">x</a>', "\x1b[31mred\x1b[0m"]
HOSTILE = " ".join(INJECTIONS)
REAL_KEY = "sk-rexmle-REAL-" + "a1b2" * 8
USAGE = [{"prompt_tokens": 120, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 20}},
         {"prompt_tokens": 210, "completion_tokens": 45, "prompt_tokens_details": {"cached_tokens": 100}}]

AGENT = r'''
import json, os, shutil, urllib.error, urllib.request
base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
HOSTILE = %r
def chat(messages):
    body = json.dumps({"model": "gpt-4o-mini", "messages": messages}).encode()
    req = urllib.request.Request(base + "/chat/completions", data=body,
                                 headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=60))
messages = [{"role": "system", "content": "You are a careful ML engineer."},
            {"role": "user", "content": "Task: predict the image quality scores. " + HOSTILE}]
first = chat(messages)["choices"][0]["message"]
messages.append(first)
for call in first.get("tool_calls") or []:
    messages.append({"role": "tool", "tool_call_id": call["id"], "content": "train.csv test/ " + HOSTILE})
chat(messages)
def validate():
    req = urllib.request.Request(os.environ["REXMLE_VALIDATE_URL"], data=b"{}", method="POST",
                                 headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    try:
        return json.load(urllib.request.urlopen(req, timeout=60))
    except urllib.error.HTTPError as exc:
        return json.load(exc)
validate()  # before the submission is there: not valid
shutil.copytree(os.environ["REXMLE_TASK"], os.environ["REXMLE_SUBMISSION_DIR"], dirs_exist_ok=True)
validate()
'''


class _Provider(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint: first a tool call, then a final answer, both hostile."""

    protocol_version = "HTTP/1.1"
    calls = 0

    def log_message(self, *args) -> None:
        return

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        first = not any(m.get("role") == "tool" for m in body.get("messages", []))
        message = {"role": "assistant", "content": "Let me look at the data. " + HOSTILE}
        if first:
            message["tool_calls"] = [{"id": "call_ls", "type": "function",
                                      "function": {"name": "bash", "arguments": json.dumps({"cmd": "ls " + HOSTILE})}}]
        else:
            message["content"] = "Final: I trained a ridge regressor. " + HOSTILE
        doc = {"id": "chatcmpl-x", "object": "chat.completion", "model": "gpt-4o-mini-2024-07-18",
               "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
               "usage": USAGE[0 if first else 1]}
        data = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _chromium() -> str:
    binary = next((shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None)
    require_service(binary is not None, "REXMLE_REQUIRE_CHROMIUM", "chromium (Debian package 'chromium')")
    return binary


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _browse(url: str, *extra: str) -> str:
    binary = _chromium()
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, url],
                              check=True, capture_output=True, timeout=120, text=True).stdout


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory, request):
    """One graded session of the hostile agent (shared by the checks below)."""
    from _pytest.monkeypatch import MonkeyPatch

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Provider)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    folder = tmp_path_factory.mktemp("run-page")
    agent = baseline_agent(folder, ["ldct-iqa"])
    (agent / "agent.py").write_text(AGENT % HOSTILE)
    cache = tmp_path_factory.getbasetemp() / "rexmle-cache-run-page"
    env = {"OPENAI_BASE_URL": f"http://127.0.0.1:{server.server_address[1]}/v1", "OPENAI_API_KEY": REAL_KEY,
           "REXMLE_CACHE_DIR": str(cache)}
    with MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                               "--rexmle-data=synthetic", "--agent=command", "--agent-option=cmd=python3 agent.py",
                               f"--agent-option=dir={agent}", "--junitxml=junit.xml", "-k", "ldct-iqa",
                               "--rexmle-budget=tokens=100000"],
                              cwd=folder, capture_output=True, text=True, timeout=600)
    server.shutdown()
    if proc.returncode != 0 and "bubblewrap" in proc.stdout + proc.stderr and "Landlock" in proc.stdout + proc.stderr:
        pytest.skip("no agent sandbox here")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = run_folders(folder, "ldct-iqa")[-1]
    return folder, run_dir


@pytest.mark.slow
def test_the_run_page_shows_the_steps_and_runs_no_agent_script(hostile_run, tmp_path):
    folder, run_dir = hostile_run
    page = run_dir / "run.html"
    html = page.read_text()
    assert "<script>document.title" not in html and "onerror=\"document" not in html
    assert f"script-src '{SCRIPT_HASH}'" in html
    dom = _browse(page.as_uri(), "--dump-dom")
    title = re.search(r"<title>(.*?)</title>", dom, re.S).group(1)
    assert "PWNED" not in title and "ldct-iqa" in title
    assert "data-pwned" not in dom
    # the steps: two calls, their model, tokens, cost; the tool call and the tool result; the grade
    assert 'id="call-1"' in dom and 'id="call-2"' in dom and 'id="call-3"' not in dom
    assert dom.count("gpt-4o-mini-2024-07-18") >= 2
    assert "120 in / 30 out" in dom and "210 in / 45 out" in dom
    assert re.search(r"\$0\.0000\d\d", dom), "a priced model's cost per call"
    assert "tool call bash (call_ls)" in dom and "tool result call_ls" in dom
    assert "Final: I trained a ridge regressor." in dom
    assert "&lt;script&gt;document.title='PWNED'&lt;/script&gt;" in dom  # shown as text, where it was written
    assert re.search(r'<td class="ok">ok</td>', dom) and "submission.csv" in dom
    # the validation calls, in order: not valid before the submission was written, valid after
    verdicts = re.findall(r'<span class="tag">validate</span>\S+ — (valid|not valid)', dom)
    assert verdicts == ["not valid", "valid"] and "2 validation call(s)" in dom
    assert "<th>GPUs</th><td>0</td>" in dom and "<th>wall time (s)</th>" in dom and "<th>tokens</th><td>405</td>" in dom
    shot = tmp_path / "run-page.png"
    _browse(page.as_uri(), f"--screenshot={shot}", "--window-size=1300,1800")
    assert shot.stat().st_size > 30_000
    Path(tempfile.gettempdir(), "rexmle-run-page.png").write_bytes(shot.read_bytes())  # kept for a human look


@pytest.mark.slow
def test_atif_validates_and_adds_up_to_the_gateway_meter(hostile_run, tmp_path):
    folder, run_dir = hostile_run
    trajectory = load(run_dir / "trajectory.atif.json")
    usage = json.loads((run_dir / "run.json").read_text())["usage"]
    final = trajectory.final_metrics
    assert (final.total_prompt_tokens, final.total_completion_tokens, final.total_cached_tokens) == \
        (usage["input_tokens"], usage["output_tokens"], usage["cached_tokens"]) == (330, 75, 120)
    assert final.total_cost_usd == pytest.approx(usage["cost_usd"]) and usage["cost_usd"] > 0
    agent_steps = [s for s in trajectory.steps if s.source == "agent"]
    assert [s.metrics.prompt_tokens for s in agent_steps] == [120, 210]
    assert sum(s.metrics.cost_usd for s in agent_steps) == pytest.approx(usage["cost_usd"])
    first = agent_steps[0]
    assert first.tool_calls[0].function_name == "bash" and first.tool_calls[0].tool_call_id == "call_ls"
    assert first.observation.results[0].source_call_id == "call_ls"
    assert first.observation.results[0].content.startswith("train.csv test/")
    assert [s.source for s in trajectory.steps] == ["system", "user", "agent", "agent"]
    assert trajectory.agent.name == "command" and trajectory.agent.model_name == "gpt-4o-mini-2024-07-18"
    # rexmle export atif: Harbor's layout, one trial folder per run
    out = tmp_path / "atif"
    subprocess.run([sys.executable, "-m", "pytest_rexmle", "export", "atif", str(report_dir(folder)), "--out",
                    str(out)], check=True, capture_output=True, timeout=120)
    exported = list(out.glob("*/agent/trajectory.json"))
    assert len(exported) == 1 and exported[0].parent.parent.name == f"ldct-iqa__{run_dir.name}"
    assert load(exported[0]) == trajectory
    assert json.loads((exported[0].parent.parent / "result.json").read_text())["status"] == "ok"


@pytest.mark.slow
def test_view_serves_the_page_and_one_call_record(hostile_run):
    folder, run_dir = hostile_run
    proc = subprocess.Popen([sys.executable, "-m", "pytest_rexmle", "view", str(run_dir)], stdout=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline()
        url = re.search(r"(http://127\.0\.0\.1:\d+/\S+)", line).group(1)
        page = urllib.request.urlopen(url, timeout=30).read().decode()
        offset = re.search(r'data-offset="(\d+)"', page).group(1)
        record = urllib.request.urlopen(url.rsplit("/", 1)[0] + f"/call?offset={offset}", timeout=30)
        assert record.headers["Content-Type"].startswith("text/plain")
        doc = json.loads(record.read())
        assert doc["request"]["messages"][1]["content"].endswith(HOSTILE.replace("\x1b", "\x1b"))
        assert REAL_KEY not in page
        with pytest.raises(urllib.error.HTTPError):  # nothing of the run folder is reachable by path
            urllib.request.urlopen(url.rsplit("/", 1)[0] + "/../../../run.json", timeout=30)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow
def test_compute_and_disclosure_reach_every_report_and_junit(hostile_run):
    folder, run_dir = hostile_run
    doc = report_json(folder)
    compute = doc["compute"]["runs"]["ldct-iqa"]
    meta = json.loads((run_dir / "run.json").read_text())
    assert compute == meta["compute"]
    assert compute["tokens"] == 405 and compute["runtime"] == "local" and compute["gpu_count"] == 0
    disclosure = doc["disclosure"]
    assert disclosure["network"] == "gateway" and disclosure["answers_in_sandbox"] is False
    assert "pypi.org" in disclosure["egress_allow"] and disclosure["budget"] == "tokens=100000"
    assert disclosure["unsafe"] == [] and disclosure["data"] == "synthetic"
    md = (report_dir(folder) / "rexmle-report.md").read_text()
    assert "## Compute" in md and "## Disclosure" in md and "Budget per run: tokens=100000" in md
    assert not md.startswith("**UNSAFE")
    html = (report_dir(folder) / "rexmle-report.html").read_text()
    assert "<h2>Compute</h2>" in html and "<h2>Disclosure</h2>" in html and "run.html" in html
    junit = (folder / "junit.xml").read_text()
    case = read_cases(folder / "junit.xml")["test_task[ldct-iqa]"]
    assert (case["compute.tokens"], case["compute.runtime"]) == ("405", "local")
    # the disclosure, as the testsuite's properties
    assert '<property name="disclosure.network" value="gateway" />' in junit
    assert '<property name="disclosure.budget" value="tokens=100000" />' in junit
    assert '<property name="disclosure.answers_in_sandbox" value="false" />' in junit
    assert '<property name="disclosure.unsafe" value="none" />' in junit


def test_an_unsafe_option_is_the_reports_first_line():
    from pytest_rexmle.report.disclosure import build_disclosure, unsafe_line

    safe = build_disclosure({"network": "gateway", "sandbox": "bwrap"}, [], [], "synthetic")
    assert unsafe_line(safe) is None
    for settings, word in (({"network": "bridge"}, "--rexmle-network=bridge"),
                           ({"sandbox": "none"}, "--rexmle-unsafe-local"),
                           ({"agent_as_root": True}, "--rexmle-agent-as-root"),
                           ({"allow_provider_tools": True}, "--rexmle-allow-provider-tools")):
        line = unsafe_line(build_disclosure(settings, [], [], "real"))
        assert line.startswith("UNSAFE:") and word in line, (settings, line)
    from pytest_rexmle.report.render import markdown

    from .helpers import session

    doc = session("a", "r1", seed=1)
    doc["disclosure"] = build_disclosure({"network": "host"}, [], [], "real")
    assert markdown(doc).splitlines()[0].startswith("**UNSAFE: this session weakened the sandbox (--rexmle-network=host)")


def test_the_page_escapes_hostile_calls_and_lists_a_flood_without_bodies(tmp_path):
    """No session: a run folder with a recorded call file of 1,000 calls, hostile text in every field."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (tmp_path / "run.json").write_text(json.dumps({"task": "<b>t</b>", "agent": HOSTILE, "runtime": "local",
                                                   "data": "synthetic", "started": "2026-01-01T00:00:00+00:00"}))
    lines = []
    for n in range(1000):
        lines.append(json.dumps({"ts": "2026-01-01T00:00:00+00:00", "protocol": "anthropic", "route": HOSTILE,
                                 "model": HOSTILE, "status": 200, "stream": False,
                                 "request": {"messages": [{"role": "user", "content": HOSTILE}]},
                                 "response": {"type": "message", "role": "assistant", "content": [
                                     {"type": "text", "text": HOSTILE},
                                     {"type": "tool_use", "id": f"tu_{n}", "name": HOSTILE, "input": {"x": HOSTILE}}]},
                                 "usage": {"input_tokens": 1, "output_tokens": 2, "cached_tokens": 0, "cost_usd": None},
                                 "duration_s": 0.1}))
    (logs / "model-calls.jsonl").write_text("\n".join(lines) + "\nnot json\n")
    html = render_run_page(tmp_path)
    for attack in INJECTIONS[:3]:
        assert attack not in html
    assert "<b>t</b>" not in html and "&lt;b&gt;t&lt;/b&gt;" in html
    assert html.count('class="body"') == 1000  # every call listed, each openable
    assert html.count("<summary>answer</summary>") == 300  # previews for the first 300 only
    calls = read_calls(tmp_path, bodies=10)
    assert len(calls) == 1000 and sum(c.bodies for c in calls) == 10 and calls[-1].tokens() == (1, 2, 0)
    trajectory = AtifTrajectory.model_validate(build_trajectory(tmp_path))
    assert trajectory.final_metrics.total_cost_usd is None  # an unpriced call: the total is unknown, never 0
    assert trajectory.final_metrics.total_prompt_tokens == 1000


def test_atif_rules_reject_what_consumers_reject():
    base = {"schema_version": "ATIF-v1.7", "agent": {"name": "a", "version": "1"},
            "steps": [{"step_id": 1, "source": "user", "message": "hi"}]}
    AtifTrajectory.model_validate(base)
    bad = [
        {**base, "steps": [{"step_id": 2, "source": "user", "message": "hi"}]},                   # not from 1
        {**base, "steps": [{"step_id": 1, "source": "user", "message": "hi", "metrics": {}}]},    # agent-only field
        {**base, "steps": [{"step_id": 1, "source": "agent", "message": "", "observation": {
            "results": [{"source_call_id": "nope", "content": "x"}]}}]},                          # unknown tool call
        {**base, "unknown": 1},                                                                   # extra field
        {**base, "schema_version": "ATIF-v1.9"},
        {**base, "steps": []},
    ]
    for doc in bad:
        with pytest.raises(ValueError):
            AtifTrajectory.model_validate(doc)


def test_a_merged_report_warns_when_runs_ran_on_different_hardware(tmp_path):
    from pytest_rexmle.report.html import render_html
    from pytest_rexmle.report.merge import markdown as merged_markdown
    from pytest_rexmle.report.merge import merge_reports
    from pytest_rexmle.report.model import compute_summary

    from .helpers import session

    h100 = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 1, "cpu_model": "AMD EPYC", "wall_seconds": 10.0,
            "gpu_hours": 0.5, "tokens": 100, "cost_usd": 0.25}
    a100 = {**h100, "gpu_model": "NVIDIA A100-SXM4-40GB"}
    one, two = session("a", "r1", seed=1), session("b", "r2", seed=2)
    one["compute"], two["compute"] = compute_summary({"isles22": h100}), compute_summary({"isles22": a100})
    assert one["compute"]["total"] == {"wall_seconds": 10.0, "gpu_hours": 0.5, "tokens": 100, "cost_usd": 0.25}
    merged = merge_reports([one, two])
    assert merged["warnings"] == ["the merged runs ran on different hardware (1× NVIDIA A100-SXM4-40GB, CPU AMD "
                                  "EPYC; 1× NVIDIA H100 80GB HBM3, CPU AMD EPYC): compare their scores with that in mind"]
    assert "**Warning: the merged runs ran on different hardware" in merged_markdown(merged)
    assert "Warning: the merged runs ran on different hardware" in render_html([merged])
    assert "warnings" not in merge_reports([one, session("c", "r3", seed=3) | {"compute": one["compute"]}])


@pytest.mark.parametrize("repeat, repeats, shown", [(2, 3, "repeat 2 of 3"), (1, 1, None), ("<b>2</b>", 3, None)])
def test_the_page_names_the_runs_repeat(tmp_path, repeat, repeats, shown):
    (tmp_path / "run.json").write_text(json.dumps({"task": "isles22", "agent": "sample", "runtime": "local",
                                                   "data": "synthetic", "started": "2026-01-01T00:00:00+00:00",
                                                   "repeat": repeat, "repeats": repeats}))
    html = render_run_page(tmp_path)
    if shown:
        assert f"<h1>isles22 — agent sample — {shown}</h1>" in html and f"<title>isles22 ({shown}) ·" in html
    else:
        assert "repeat" not in html.split("<h1>", 1)[1].split("</h1>", 1)[0] and "<b>2</b>" not in html
