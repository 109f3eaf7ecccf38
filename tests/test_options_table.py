"""The guide's options table (docs/reference/options.md) and the single settings table (pytest_rexmle/settings.py)
name the same options with the same ini names, so an option added to one is not missing from the other."""

from __future__ import annotations

import re

from pytest_rexmle.settings import OPTIONS

from .conftest import REPO

PAGE = REPO / "docs" / "reference" / "options.md"


def _first_cells() -> list[str]:
    """The first column of the page's options table, one cell per row (header and rule left out)."""
    text = PAGE.read_text(encoding="utf-8")
    table = text[text.index("| option (ini name) |"):]
    rows = [line for line in table.splitlines()[2:] if line.startswith("|")]
    return [row.split(" | ")[0] for row in rows[:next((i for i, r in enumerate(rows) if not r.strip()), len(rows))]]


def test_every_option_of_the_settings_table_is_documented_with_its_ini_name():
    cells = " ".join(_first_cells())
    missing = [f"{flag} ({ini})" for flag, ini, *_ in OPTIONS
               if not re.search(rf"`{re.escape(flag)}[ `=]", cells) or f"`{ini}`" not in cells]
    assert not missing, f"options without a row (and ini name) in docs/reference/options.md: {missing}"


def test_the_table_names_no_option_the_settings_table_lacks():
    flags = {flag for flag, *_ in OPTIONS}
    shown = set(re.findall(r"`(--[a-z-]+)", " ".join(_first_cells())))
    assert shown and not shown - flags, f"documented options settings.py does not have: {sorted(shown - flags)}"
