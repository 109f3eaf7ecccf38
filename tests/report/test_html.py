"""The HTML report: self-contained, escaped, with the paper's figures, and rendered by a real headless
Chromium (screenshot + DOM dump). Missing Chromium skips, or fails when REXMLE_REQUIRE_CHROMIUM=1."""

from __future__ import annotations

import random
import re
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

from pytest_rexmle.capability.schema import SessionCapability, run_document, session_document
from pytest_rexmle.capability.strategies import load_strategies
from pytest_rexmle.report.html import render_html
from pytest_rexmle.report.merge import merge_reports
from pytest_rexmle.task import registry

from ..conftest import require_service
from .helpers import session

JUDGE = {"name": "rules", "model": "rules", "params": {}, "prompt_version": "rules-1"}
STAGE_NAMES = (("plan", 0.25), ("setup", 0.15), ("validate", 0.35), ("inference", 0.15), ("submit", 0.10))


def _capability(agent: str, probabilities: list[float], seeds: tuple[int, ...]) -> tuple[list[dict], list[dict]]:
    runs, stages = [], []
    for cid in registry().ids:
        for seed in seeds:
            rng = random.Random(f"{agent}-{cid}-{seed}")
            results = [{"id": s.id, "strategy": s.name, "score": int(rng.random() < probabilities[s.id - 1]),
                        "evidence": f"logs/agent.stdout.log:{s.id}: x"} for s in load_strategies()]
            runs.append(run_document(agent=agent, task_id=cid, seed=seed, run_dir=f"/r/{agent}/{cid}/{seed}",
                                     judge=JUDGE, sections=[{"label": f"{cid}-rules", "flagged": False,
                                                             "results": results}], flags=[]))
            rows = [{"id": f"S{i}", "name": n, "weight": w, "score": round(rng.random(), 2), "method": "rules",
                     "evidence": ""} for i, (n, w) in enumerate(STAGE_NAMES, start=1)]
            stages.append({"schema": "rexmle-stages/2", "agent": agent, "task_id": cid, "run_dir": "/r",
                           "judge": JUDGE, "stages": rows, "total": sum(r["weight"] * r["score"] for r in rows),
                           "usage": {"turns": 30, "input_tokens": 9000, "output_tokens": 1000, "total_tokens": 10000,
                                     "cost_usd": 0.25, "model": "m", "wall_seconds": 1800.0, "source": "logs/usage.json"}})
    return runs, stages


@pytest.fixture(scope="module")
def inputs():
    reports = [session("aide", "r1", seed=1), session("ml-master", "r2", seed=2), session("ml-master", "r3", seed=3),
               session("ml-master", "r4", seed=4)]
    runs_a, stages_a = _capability("aide", [0.9, 0.3, 0.6, 0.4, 0.8, 0.2, 0.1, 0.3, 0.5, 0.1, 0.2, 0.1, 0.2], (0,))
    runs_b, stages_b = _capability("ml-master", [0.7, 0.8, 0.7, 0.6, 0.9, 0.5, 0.3, 0.4, 0.7, 0.3, 0.4, 0.3, 0.5],
                                   (0, 1, 2))
    cap = session_document(runs_a + runs_b, stages_a + stages_b)
    SessionCapability.check(cap)
    return reports, [cap]


def write_html(reports: list[dict], capability: list[dict] | None, path: Path) -> Path:
    path.write_text(render_html(reports, capability))
    return path


def test_html_is_self_contained_and_has_every_view(inputs, tmp_path):
    reports, cap = inputs
    page = write_html(reports, cap, tmp_path / "r.html").read_text()
    for needle in ("http:", "https:", "<script", "<link", "url(", "@import", "<img", "<iframe"):
        assert needle not in page.lower(), needle
    assert page.count('<svg class="fig1"') == 1 and page.count('<svg class="radar"') == 1
    assert page.count('<polygon class="agent"') == 2  # one radar polygon per agent
    # Figure 1: 20 challenges + the overall group, 2 agents each = 42 bars, plus the 3 published agents'
    # (AIDE FAILed on 2 challenges and R&D-Agent on 1: a FAIL is a 0 bar, still drawn)
    fig1 = page.split('<svg class="fig1"', 1)[1].split("</svg>", 1)[0]
    assert fig1.count("<rect") - fig1.count('class="published"') == 42
    assert fig1.count('class="published"') == 21 * 3
    # Table 3: every ranking metric of every challenge has a row, with the human best from the leaderboard
    assert page.count("<i>percentile</i>") == 20
    assert sum(len(t.ranking_metrics) for t in registry()) == len(re.findall(r"<td>[\w.]+ [↑↓]</td>", page))
    assert "<td>lesion_count_diff ↓</td>" in page
    for text in ("Summary", "Figure 1 style", "Table 3 style", "Figure 4 style", "per-task table",
                 "Workflow stages and cost", "Analyzing and handling failure cases"):
        assert text in page, text


def test_every_text_a_session_chose_is_escaped():
    """The template escapes every value a session report carries (agent, run id, reasons, disclosure,
    compute, leaks), in html.escape's form, and prints nothing of it raw."""
    hostile = "<script>alert('x')</script>\"&"
    doc = session(hostile, hostile, seed=1, ids=["isles22", "seg-a"], fail_every=1)
    doc["tasks"][0]["suspected_leak"] = {"host": hostile, "rule": hostile}
    doc["disclosure"] = {key: hostile for key in ("network", "answers", "validation", "data", "budget")}
    doc["disclosure"]["hosts_asked"] = [{"host": hostile, "port": 443, "allowed": False, "count": 2}]
    doc["compute"] = {"hardware": [hostile], "runs": {hostile: {"gpu_model": hostile, "gpu_count": 1,
                                                                "runtime": hostile, "mechanism": hostile}}}
    page = render_html([doc])
    assert "<script" not in page and "alert('x')" not in page and "&#39;" not in page
    escaped = "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;&quot;&amp;"
    assert page.count(escaped) >= 12  # agent, run id, leak, disclosure, hosts, compute row, hardware, ...


def test_text_is_escaped(tmp_path):
    doc = session("<script>alert(1)</script>", "r1", seed=1, ids=["isles22"])
    page = render_html([doc])
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_merged_document_is_accepted(inputs, tmp_path):
    reports, _ = inputs
    page = render_html([merge_reports(reports)])
    assert '<svg class="radar"' not in page  # no capability data: no radar
    with pytest.raises(ValueError):
        render_html([merge_reports(reports), reports[0]])


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def test_report_renders_in_headless_chromium(inputs, tmp_path):
    binary = next((shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None)
    require_service(binary is not None, "REXMLE_REQUIRE_CHROMIUM", "chromium (Debian package 'chromium')")
    reports, cap = inputs
    page = write_html(reports, cap, tmp_path / "report.html")
    shot = tmp_path / "shot.png"
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={shot}",
                        "--window-size=1400,2000", page.as_uri()], check=True, capture_output=True, timeout=120)
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
                             check=True, capture_output=True, timeout=120, text=True).stdout
    data = shot.read_bytes()
    assert _png_size(data) == (1400, 2000)
    assert len(data) > 50_000  # a blank 1400x2000 page compresses to a few kB
    # the DOM Chromium built: both figures are SVG elements with their bars and polygons
    assert len(re.findall(r"<svg\b", dom)) == 2
    assert 'class="fig1"' in dom and 'class="radar"' in dom
    assert len(re.findall(r"<rect\b", dom)) >= 42 and len(re.findall(r'<polygon class="agent"', dom)) == 2
    assert "ReX-MLE report" in dom
    Path(tempfile.gettempdir(), "rexmle-report-screenshot.png").write_bytes(data)  # kept for a human look


def _chromium() -> str:
    binary = next((shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None)
    require_service(binary is not None, "REXMLE_REQUIRE_CHROMIUM", "chromium (Debian package 'chromium')")
    return binary


def _rightmost_ink(png: Path, rows: range) -> int:
    """The rightmost x of a non-white pixel within ``rows`` (where the summary table is drawn)."""
    from PIL import Image

    with Image.open(png) as img:
        grey = img.convert("L")
        width = grey.width
        pixels = grey.load()
        for x in range(width - 1, -1, -1):
            if any(pixels[x, y] < 200 for y in rows):
                return x
    return -1


def test_page_uses_the_width_and_explains_an_agent_without_capability(inputs, tmp_path):
    """Before: a narrow left column, a raw ISO timestamp, ``1.665e+04`` beside ``3175``, and an empty
    radar with no word for an agent that showed no capability. Rendered at 1400 and 800 px."""
    binary = _chromium()
    reports, cap = inputs
    runs_zero, stages_zero = _capability("sample", [0.0] * 13, (0,))
    zero = session_document(runs_zero, stages_zero)
    page = write_html([*reports, session("sample", "r9", seed=9)], [*cap, zero], tmp_path / "report.html")
    for width in (1400, 800):
        shot = tmp_path / f"shot-{width}.png"
        with tempfile.TemporaryDirectory() as profile:
            subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={shot}",
                            f"--window-size={width},2000", page.as_uri()], check=True, capture_output=True, timeout=120)
        assert _png_size(shot.read_bytes()) == (width, 2000)
        # the summary table spans the page: ink within 60 px of the right edge (32 px padding + scrollbar)
        assert _rightmost_ink(shot, range(60, 260)) > width - 60, width
        Path(tempfile.gettempdir(), f"rexmle-report-{width}.png").write_bytes(shot.read_bytes())
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
                             check=True, capture_output=True, timeout=120, text=True).stdout
    assert re.search(r"Generated \d{4}-\d\d-\d\d \d\d:\d\d", dom)
    assert not re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d", dom), "raw ISO time on the page"
    assert not re.search(r"\d\.\d+e[+-]\d\d", dom), "exponent notation for an ordinary number"
    assert re.search(r"<b>sample</b> showed no capability: in its 20 judged run\(s\)", dom)
    assert len(re.findall(r'<polygon class="agent"', dom)) == 2  # aide and ml-master only: no empty polygon
    assert 'class="summary wide"' in dom


def test_no_capability_data_is_said_in_words(inputs):
    reports, _ = inputs
    page = render_html(reports)
    assert '<svg class="radar"' not in page and "No capability data" in page
