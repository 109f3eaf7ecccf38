"""The commands README.md shows, read from its ``bash`` code blocks, so that a README change is what the
journeys test: a line joined with its ``\\`` continuations, a ``for … done`` loop as one command, the
trailing ``# comment`` dropped and blanks collapsed, each with the section it stands under."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReadmeCommand:
    line: int      # README.md line of its first line (1-based)
    section: str   # the heading it stands under
    text: str      # the command as one line, comment dropped, blanks collapsed


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


def readme_commands(readme: str) -> list[ReadmeCommand]:
    """Every command of the ``bash`` blocks, in the README's order."""
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
            commands.append(ReadmeCommand(start, section, _normal(pending)))
            pending, depth = [], 0
    return commands
