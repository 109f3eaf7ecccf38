"""The commands the documentation shows — README.md, then the pages of ``docs/`` in the order of
mkdocs.yml's ``nav`` — read from their ``bash`` code blocks, so that a documentation change is what the
journeys test: a line joined with its ``\\`` continuations, a ``for … done`` loop as one command, the
trailing ``# comment`` dropped and blanks collapsed, each with its page and the section it stands under."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml


@dataclass(frozen=True)
class ReadmeCommand:
    line: int      # line of its first line in its page (1-based)
    section: str   # the heading it stands under
    text: str      # the command as one line, comment dropped, blanks collapsed
    page: str = "README.md"  # the file it is shown in, relative to the repository


def strip_comment(line: str) -> str:
    """``line`` without a shell comment: a ``#`` at the start or after a blank, outside quotes."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
        elif char == "\\" and i + 1 < len(line):
            continue
    return line


def _normal(parts: list[str]) -> str:
    return " ".join(" ".join(parts).split())


def readme_commands(readme: str, page: str = "README.md") -> list[ReadmeCommand]:
    """Every command of the ``bash`` blocks of one page, in its order."""
    commands: list[ReadmeCommand] = []
    section, fence, pending, start, depth = "", None, [], 0, 0
    for number, raw in enumerate(readme.splitlines(), 1):
        if raw.startswith("```"):
            fence = raw[3:].strip() if fence is None else None
            continue
        if fence is None:
            if raw.startswith("#"):
                section = raw.lstrip("#").strip()
            continue
        if fence != "bash":
            continue
        line = strip_comment(raw).rstrip()
        if not line.strip() and not pending:
            continue
        if not pending:
            start = number
        words = line.split()
        depth += sum(w in ("for", "while", "until") for w in words[:1]) - sum(w == "done" for w in words[:1])
        continued = line.endswith("\\")
        pending.append(line[:-1] if continued else line)
        if not continued and depth <= 0:
            commands.append(ReadmeCommand(start, section, _normal(pending), page))
            pending, depth = [], 0
    return commands


def _nav_files(entries: list) -> list[str]:
    """The page files of a mkdocs ``nav`` (``- Title: file.md`` or ``- Section: [...]``), depth first."""
    files: list[str] = []
    for entry in entries:
        for value in (entry.values() if isinstance(entry, dict) else [entry]):
            files.extend(_nav_files(value) if isinstance(value, list) else [value])
    return files


def guide_pages(repo: Path) -> list[Path]:
    """README.md, then every page of mkdocs.yml's ``nav`` in its order (the order a reader follows)."""
    config = yaml.safe_load((repo / "mkdocs.yml").read_text(encoding="utf-8"))
    docs = repo / config.get("docs_dir", "docs")
    return [repo / "README.md", *(docs / name for name in _nav_files(config["nav"]))]


def guide_commands(repo: Path) -> list[ReadmeCommand]:
    """Every command the README and the guide's pages show, in the reader's order."""
    return [command for page in guide_pages(repo)
            for command in readme_commands(page.read_text(encoding="utf-8"), str(page.relative_to(repo)))]
