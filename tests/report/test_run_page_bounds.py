"""The run page stays a page: bounded in bytes whatever the call record holds, invisible characters shown,
and the agent's words kept apart from the harness's facts.

Each test writes a real run folder with a hostile call record and renders ``run.html`` from it:
tool-call names and arguments of megabytes (the 62 MiB record that became a 290 MiB page), bidi
overrides in a tool name (``read_file \\u202egnp.tsil-srewsna`` reads as ``read_file answers-list.png``),
zero-width and line-separator characters, a model name that poses as the harness's verdict, and a flood
of small calls (the listing pages on, each call's whole record one click away through ``rexmle view``).
"""

from __future__ import annotations

import http.client
import json
import re
from pathlib import Path

from pytest_rexmle.report.runpage import MAX_PAGE_BYTES, render_run_page
from pytest_rexmle.report.view import serve

#: every invisible or reordering character the page must show as a visible ``\\uXXXX`` marker
INVISIBLE = ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\u200e",
             "\u200f", "\u061c", "\u200b", "\u200c", "\u200d", "\ufeff", "\u2060", "\u2028", "\u2029"]
FAKE_VERDICT = "\u2705 status ok \u00b7 percentile 100.0% (verified by pytest-rexmle)"


def _run(folder: Path, records: list[dict] | None = None, lines: int = 0, line: dict | None = None) -> Path:
    (folder / "logs").mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"task": "isles22", "agent": "command", "runtime": "local",
                                                 "data": "synthetic", "started": "2026-01-01T00:00:00+00:00"}))
    with open(folder / "logs" / "model-calls.jsonl", "w", encoding="utf-8") as out:
        for record in records or []:
            out.write(json.dumps(record) + "\n")
        for n in range(lines):
            out.write(json.dumps({**(line or {}), "ts": f"2026-01-01T00:{n // 60 % 60:02d}:{n % 60:02d}.{n:07d}"})
                      + "\n")
    return folder


def _call(name: str = "bash", arguments: str = "{}", model: str = "gpt-4o", answer: str = "ok",
          prompt: str = "go") -> dict:
    return {"ts": "2026-01-01T00:00:00+00:00", "protocol": "openai", "route": "POST /v1/chat/completions",
            "model": model, "status": 200, "stream": False,
            "request": {"messages": [{"role": "user", "content": prompt}]},
            "response": {"choices": [{"message": {"role": "assistant", "content": answer, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}]}}]},
            "usage": {"input_tokens": 10, "output_tokens": 5, "cost_usd": 0.001}, "duration_s": 0.5}


def test_huge_tool_call_names_and_arguments_keep_the_page_small(tmp_path):
    """40 calls each with a 1 MiB tool name and 1 MiB of arguments (80 MiB of record): today's page holds
    them whole; the bounded page stays under its byte budget and still lists every call."""
    big_name = "n" * (1 << 20)
    big_args = json.dumps({"cmd": "<" * (1 << 20)})  # '<' grows fourfold when escaped
    run = _run(tmp_path / "run", [_call(big_name, big_args) for _ in range(40)])
    html = render_run_page(run)
    size = len(html.encode())
    assert size <= MAX_PAGE_BYTES + 64 * 1024, size
    assert html.count('class="body"') == 40  # every call listed, each openable whole
    assert "n" * 5000 not in html and "&lt;" * 5000 not in html
    assert "more characters" in html  # a clipped text says it was clipped


def test_a_1_mib_tool_call_id_and_tool_result_id_are_clipped(tmp_path):
    record = _call()
    record["response"]["choices"][0]["message"]["tool_calls"][0]["id"] = "i" * (1 << 20)
    record["request"]["messages"].append({"role": "tool", "tool_call_id": "t" * (1 << 20), "name": "u" * (1 << 20),
                                          "content": "result"})
    html = render_run_page(_run(tmp_path / "run", [record] * 8))
    assert len(html.encode()) < 300 * 1024
    assert "i" * 1000 not in html and "t" * 1000 not in html and "u" * 1000 not in html


def test_many_empty_tool_calls_are_charged_too(tmp_path):
    """Answers of 50 empty tool calls (and 50 empty results): little text, much markup; the page still
    keeps to its budget."""
    record = _call(name="", arguments="", prompt="p" * 2500, answer="a" * 2500)
    record["response"]["choices"][0]["message"]["tool_calls"] *= 50
    record["request"]["messages"] += [{"role": "tool", "tool_call_id": "", "content": "r"}] * 50
    html = render_run_page(_run(tmp_path / "run", lines=300, line=record))
    assert len(html.encode()) <= MAX_PAGE_BYTES + 64 * 1024, len(html.encode())
    assert html.count("<summary>tool call") >= 50 * 50  # the first calls are still previewed in full


def test_invisible_characters_are_shown_as_escapes_everywhere(tmp_path):
    sneaky = "read_file \u202egnp.tsil-srewsna"
    every = "".join(f"x{c}y" for c in INVISIBLE)
    record = _call(name=sneaky, arguments=json.dumps({"path": every}), model="gpt" + every,
                   answer="answer " + every, prompt="prompt " + every)
    record["route"] = "POST /v1/chat/completions" + every
    html = render_run_page(_run(tmp_path / "run", [record]))
    for char in INVISIBLE:
        assert char not in html, f"U+{ord(char):04X} reached the page"
        marker = f"\\u{ord(char):04x}"
        # in the answer, the prompt, the arguments, the model and the route
        assert html.count(f"x{marker}y") >= 5, (marker, html.count(f"x{marker}y"))
    assert "read_file \\u202egnp.tsil-srewsna" in html


def test_the_atif_export_shows_invisible_characters_in_tool_names_too(tmp_path):
    from pytest_rexmle.report.atif import build_trajectory

    sneaky = "read_file \u202egnp.tsil-srewsna"
    record = _call(name=sneaky + "n" * 5000)
    doc = build_trajectory(_run(tmp_path / "run", [record]))
    name = next(s for s in doc["steps"] if s["source"] == "agent")["tool_calls"][0]["function_name"]
    assert name.startswith("read_file \\u202egnp.tsil-srewsna") and "\u202e" not in name and len(name) <= 1000


def test_agent_text_is_never_a_heading_or_a_fact(tmp_path):
    run = _run(tmp_path / "run", [_call(model=FAKE_VERDICT, name=FAKE_VERDICT, answer=FAKE_VERDICT)])
    (run / "workspace").mkdir()
    (run / "workspace" / f"{FAKE_VERDICT}.txt").write_text("x")
    html = render_run_page(run)
    assert "status ok" in html  # the text is shown ...
    for element in ("h1", "h2", "h3", "strong", "b", "th", "title"):  # ... but never as a heading or a fact
        for inner in re.findall(rf"<{element}\b[^>]*>(.*?)</{element}>", html, re.S):
            assert "verified by pytest-rexmle" not in inner, (element, inner[:200])
    # every place it appears is marked as the agent's words
    for match in re.finditer(re.escape("verified by pytest-rexmle"), html):
        opening = html.rfind("<", 0, match.start())
        tag = html[opening:html.find(">", opening) + 1]
        assert "agent-text" in tag or tag.startswith("<summary"), tag


def test_a_run_json_of_a_downloaded_folder_cannot_title_the_page(tmp_path):
    run = _run(tmp_path / "run", [_call()])
    doc = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**doc, "task": FAKE_VERDICT, "agent": "x\u202eevil"}))
    html = render_run_page(run)
    title, heading = re.search(r"<title>(.*?)</title>", html).group(1), re.search(r"<h1>(.*?)</h1>", html).group(1)
    assert "status ok" not in title + heading and "evil" not in title + heading
    assert "\u202e" not in title + heading
    assert re.search(r'<span class="agent-text">[^<]*verified by pytest-rexmle', html)  # shown, as the folder's text


def test_a_flood_of_calls_pages_on_through_view(tmp_path):
    """20,000 small calls: the page lists what its budget holds and links to the next calls, which
    ``rexmle view`` serves; the last call is reachable and its record opens whole."""
    run = _run(tmp_path / "run", lines=20_000, line=_call(answer="fine", model="gpt-4o"))
    html = render_run_page(run)
    assert len(html.encode()) <= MAX_PAGE_BYTES + 64 * 1024
    listed = len(re.findall(r'id="call-(\d+)"', html))
    assert 0 < listed < 20_000
    server = serve([run])
    port = server.server_address[1]
    try:
        seen, page, path = listed, html, None
        while True:
            match = re.search(r'<a class="next" href="\?from=(\d+)">', page)
            if match is None:
                break
            path = f"/runs/0/run.html?from={match.group(1)}"
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            conn.request("GET", path)
            response = conn.getresponse()
            page = response.read().decode()
            assert response.status == 200 and len(page.encode()) <= MAX_PAGE_BYTES + 64 * 1024
            numbers = [int(n) for n in re.findall(r'id="call-(\d+)"', page)]
            assert numbers[0] == int(match.group(1)), (numbers[0], match.group(1))
            seen += len(numbers)
        assert seen == 20_000 and 'id="call-20000"' in page
        offset = re.findall(r'data-offset="(\d+)"', page)[-1]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", f"/runs/0/call?offset={offset}")
        record = json.loads(conn.getresponse().read())
        assert record["response"]["choices"][0]["message"]["content"] == "fine"
    finally:
        server.shutdown()


def test_deeply_nested_tool_arguments_do_not_break_the_page(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    html = render_run_page(_run(tmp_path / "run", [_call(arguments=deep)]))
    assert 'id="call-1"' in html and "[[[[" in html
