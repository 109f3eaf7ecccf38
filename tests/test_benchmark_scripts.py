"""The benchmarks are run by hand, seldom, and import the package inside functions (to time its import or to
run without pytest): an import that a refactoring broke would surface only when somebody measures. Every
``from pytest_rexmle… import name`` in benchmarks/ (function-level ones too) must resolve, and every script
must answer ``--help``."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.glob("bench_*.py"))


def _package_imports(path: Path) -> list[tuple[str, str, int]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pytest_rexmle"):
            found += [(node.module, alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, "", node.lineno) for alias in node.names if alias.name.startswith("pytest_rexmle")]
    return found


def test_the_benchmarks_are_found() -> None:
    assert len(SCRIPTS) >= 10, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_package_import_of_a_benchmark_resolves(script: Path) -> None:
    broken = []
    for module, name, line in _package_imports(script):
        try:
            imported = importlib.import_module(module)
        except ImportError as error:
            broken.append(f"{script.name}:{line}: {module}: {error}")
            continue
        if name and not hasattr(imported, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                broken.append(f"{script.name}:{line}: {module} has no {name}")
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_benchmark_answers_help(script: Path) -> None:
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
