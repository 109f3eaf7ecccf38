"""The documentation's commands (README.md, then docs/ in mkdocs.yml's nav order) and the journey's list
agree, in order: a command that is neither run nor listed with its reason (or a list line no page shows any
more) fails here, in the fast lane."""

from __future__ import annotations

from ..conftest import REPO
from .plan import JOURNEY, NotRun
from .readme_commands import guide_commands, guide_pages, readme_commands, strip_comment


def test_every_documented_command_is_run_or_listed_with_its_reason_in_the_guides_order():
    shown = [c.text for c in guide_commands(REPO)]
    planned = [step.readme for step in JOURNEY]
    missing = [f"{c.page}:{c.line}: {c.text}" for c in guide_commands(REPO) if c.text not in planned]
    stale = [text for text in planned if text not in shown]
    assert not missing, f"commands the journey neither runs nor lists (add them to tests/journeys/plan.py): {missing}"
    assert not stale, f"tests/journeys/plan.py names commands no page shows any more: {stale}"
    assert planned == shown, "tests/journeys/plan.py is not in the guide's order (README.md, then mkdocs.yml's nav)"
    assert all(step.reason.strip() for step in JOURNEY if isinstance(step, NotRun))


def test_the_guide_is_read_in_the_navigation_order():
    """README.md first, then every page of the nav, each once; the nav's first pages are the user's first steps."""
    pages = [str(p.relative_to(REPO)) for p in guide_pages(REPO)]
    assert pages[:4] == ["README.md", "docs/getting-started.md", "docs/real-data.md", "docs/agents.md"]
    assert len(pages) == len(set(pages)) and all((REPO / p).is_file() for p in pages)
    on_disk = {str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.md")}
    assert on_disk == set(pages[1:]), f"pages outside the nav: {sorted(on_disk - set(pages))}"
    commands = guide_commands(REPO)
    assert commands[0].page == "README.md" and {c.page for c in commands} >= {"docs/getting-started.md", "docs/clusters.md"}


def test_commands_are_read_as_a_shell_reads_them():
    readme = ("# Title\n```bash\npytest --agent=a \\\n       -k x   # a comment\nrexmle rank t --metrics '{\"a#b\": 1}'\n"
              "\nfor m in a b; do\n  echo $m\ndone\n```\n```\nnot a command\n```\n")
    commands = readme_commands(readme)
    assert [(c.line, c.section, c.text) for c in commands] == [
        (3, "Title", "pytest --agent=a -k x"), (5, "Title", "rexmle rank t --metrics '{\"a#b\": 1}'"),
        (7, "Title", "for m in a b; do echo $m done")]
    assert strip_comment("echo 'a # b' # c") == "echo 'a # b' "
