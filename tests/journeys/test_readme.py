"""The README's commands and the journey's list agree, in order: a README command that is neither run nor
listed with its reason (or a list line the README no longer shows) fails here, in the fast lane."""

from __future__ import annotations

from ..conftest import REPO
from .plan import JOURNEY, NotRun
from .readme_commands import readme_commands, strip_comment


def test_every_readme_command_is_run_or_listed_with_its_reason_in_the_readmes_order():
    shown = [c.text for c in readme_commands((REPO / "README.md").read_text(encoding="utf-8"))]
    planned = [step.readme for step in JOURNEY]
    missing = [text for text in shown if text not in planned]
    stale = [text for text in planned if text not in shown]
    assert not missing, f"README commands the journey neither runs nor lists (add them to tests/journeys/plan.py): {missing}"
    assert not stale, f"tests/journeys/plan.py names commands the README no longer shows: {stale}"
    assert planned == shown, "tests/journeys/plan.py is not in the README's order"
    assert all(step.reason.strip() for step in JOURNEY if isinstance(step, NotRun))


def test_commands_are_read_as_a_shell_reads_them():
    readme = ("# Title\n```bash\npytest --agent=a \\\n       -k x   # a comment\nrexmle rank t --metrics '{\"a#b\": 1}'\n"
              "\nfor m in a b; do\n  echo $m\ndone\n```\n```\nnot a command\n```\n")
    commands = readme_commands(readme)
    assert [(c.line, c.section, c.text) for c in commands] == [
        (3, "Title", "pytest --agent=a -k x"), (5, "Title", "rexmle rank t --metrics '{\"a#b\": 1}'"),
        (7, "Title", "for m in a b; do echo $m done")]
    assert strip_comment("echo 'a # b' # c") == "echo 'a # b' "
