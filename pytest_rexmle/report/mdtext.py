"""Agent-controlled text made inert for Markdown.

INVALID reasons, submitted file names and stderr tails are written by the agent. Escaping only ``|``
(the table separator) lets any Markdown viewer (GitHub, MkDocs, an IDE preview) run what the agent wrote:
raw HTML (``<script>``, ``<img onerror=...>``), links and images (``[x](javascript:...)``,
``![x](http://tracker)``), bare URLs that GitHub turns into links, and emphasis that fakes a headline
(``**ReX-MLE score: 100.0%**``). CommonMark lets a backslash escape every ASCII punctuation character,
so escaping all the characters that start a construct makes the text render exactly as written: no tag,
no entity, no link, image, autolink or emphasis can open. ``:`` and ``.`` are escaped too, which splits
``http://`` and ``www.x.org`` (and ``a@b.org``) so that no autolinker recognises them.
"""

from __future__ import annotations

import re

from ..agent_output import clean_text

#: ASCII punctuation that opens a Markdown or HTML construct (or an autolink); each gets a backslash
SPECIAL = frozenset("\\`*_{}[]()<>#+-.!|~&:@=\"'")
_SPACES = re.compile(r"\s+")


def md_text(value: object, limit: int | None = None) -> str:
    """``value`` as inline Markdown that renders as the same plain text, on one line.

    Control characters and ANSI sequences go first (:func:`agent_output.clean_text`), runs of whitespace
    become one space (a newline would end a table row), then every special character is escaped.
    """
    text = _SPACES.sub(" ", clean_text(str(value), limit=limit)).strip()
    return "".join(f"\\{ch}" if ch in SPECIAL else ch for ch in text)


def md_code(value: object) -> str:
    """``value`` as an inline code span: backticks inside would close it, so they become ``'``.

    Used for names the harness shows as identifiers (agent, run id); a code span renders neither HTML
    nor links, whatever it holds.
    """
    text = _SPACES.sub(" ", clean_text(str(value))).strip().replace("`", "'")
    return f"`{text}`" if text else "` `"


def md_row(*cells: object) -> str:
    """One Markdown table row, ``| a | b |``, of cells already made inert (:func:`md_text`, :func:`md_code`)."""
    return "|" + "".join(f" {cell} |" for cell in cells)


def md_table(*headers: str) -> list[str]:
    """A Markdown table's header row and the separator under it."""
    return [md_row(*headers), "|" + "---|" * len(headers)]
