"""Agent-controlled text in every Markdown output renders as inert text (issue 23.5).

Rendered with a real CommonMark renderer (markdown-it-py) configured as permissively as the viewers people
use (raw HTML on, linkify on, as GitHub and MkDocs do), then the HTML is checked: no tag, link, image or
emphasis the agent wrote survives, and the agent's text is still there, readable, in its table cell.
"""

from __future__ import annotations

import re

import pytest

from pytest_rexmle.report import archive
from pytest_rexmle.report.mdtext import md_code, md_text
from pytest_rexmle.report.merge import markdown as merged_markdown
from pytest_rexmle.report.merge import merge_reports
from pytest_rexmle.report.reference import with_reference
from pytest_rexmle.report.render import markdown as session_markdown

from .helpers import session

markdown_it = pytest.importorskip("markdown_it", reason="markdown-it-py (the dev extra) renders the Markdown")
pytest.importorskip("linkify_it", reason="linkify-it-py (markdown-it-py[linkify], the dev extra) finds bare URLs")

ATTACKS = {
    "script": "<script>alert(1)</script>",
    "img": '<img src=x onerror="alert(1)">',
    "js_link": "[details](javascript:alert(1))",
    "image": "![x](http://evil.example/pixel.png)",
    "fake_score": "**ReX-MLE score: 100.0%**",
    "emphasis": "_underscored_ and *starred*",
    "autolink": "<http://evil.example/a>",
    "bare_url": "see http://evil.example/b and www.evil.example and me@evil.example",
    "entity": "&lt;b&gt;bold&lt;/b&gt; &#60;i&#62;",
    "breakout": "end of cell | forged | cells\n\n# Forged heading\n\n<div>block</div>",
    "reference_link": "[x][1]\n\n[1]: http://evil.example/c",
    "code": "`rm -rf` ~~strike~~",
}
ALL = " ".join(ATTACKS.values())


def render(text: str) -> str:
    md = markdown_it.MarkdownIt("commonmark", {"html": True, "linkify": True}).enable(["table", "strikethrough"])
    md.enable("linkify")
    return md.render(text)


def _plain(html_text: str) -> str:
    """The text a reader sees in the rendered HTML (tags dropped, the escapes the renderer wrote decoded)."""
    import html

    return html.unescape(re.sub(r"<[^>]+>", "", html_text))


def assert_inert(rendered: str) -> None:
    lowered = rendered.lower()
    for needle in ("<script", "<img", "<a ", "href=", "<strong>rex-mle score: 100", "<em>underscored",
                   "<em>starred", "<div>", "<del>", "<h1>forged", "onerror=\""):
        assert needle not in lowered, (needle, rendered)


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_each_attack_renders_as_its_own_text(name):
    text = ATTACKS[name]
    rendered = render(f"| reason |\n|---|\n| {md_text(text)} |\n")
    assert_inert(rendered)
    assert rendered.count("<tr>") == 2, "the agent's text stays in its one cell"
    assert _plain(rendered).split("reason", 1)[1].strip() == " ".join(text.split())


def test_session_markdown_is_inert(tmp_path):
    doc = session("<img src=x onerror=alert(1)>", "r1", seed=3, ids=["isles22", "ldct-iqa", "seg-a"], fail_every=1)
    for rec in doc["tasks"]:
        rec["reason"] = f"INVALID: predictions/{ATTACKS['image']}.nii.gz; stderr ends with: {ALL}"
    text = session_markdown(doc)
    rendered = render(text)
    assert_inert(rendered)
    seen = _plain(rendered)
    assert "**ReX-MLE score: 100.0%**" in seen and "<script>alert(1)</script>" in seen
    assert "![x](http://evil.example/pixel.png)" in seen
    # our own table keeps its shape: header + one row per challenge, and only our own heading
    assert rendered.count("<tr>") == 1 + 3 and rendered.count("<h1>") == 1
    # the report's own bold (the data kind, the score), nothing the agent wrote
    assert re.findall(r"<strong>(.*?)</strong>", rendered) == ["synthetic twins", "0.0%"]


def test_merged_and_index_markdown_are_inert(tmp_path):
    hostile = "**ReX-MLE score: 100.0%** <script>x</script> [a](javascript:alert(1))"
    docs = [session(hostile, "r1", seed=1, ids=["isles22"]), session("sample", "r2", seed=2, ids=["isles22"])]
    rendered = render(merged_markdown(with_reference(merge_reports(docs), "none")))
    assert_inert(rendered)
    assert hostile in _plain(rendered)
    for doc in docs:
        folder = archive.session_folder(tmp_path, doc["run_id"])
        archive.write_json(folder / archive.REPORT_JSON, doc)
    index = render(archive.index_markdown(archive.sessions(tmp_path), "r2"))
    assert "<script" not in index and "<img" not in index
    # the two session links the index itself writes, no more
    assert sorted(re.findall(r'href="([^"]*)"', index)) == ["r1/rexmle-report.md", "r2/rexmle-report.md"]
    assert hostile in _plain(index)


def test_code_span_names_cannot_close_themselves():
    rendered = render(f"agent {md_code('x` <script>alert(1)</script> `y')}")
    assert "<script" not in rendered and rendered.count("<code>") == 1
