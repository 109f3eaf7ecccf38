"""The suite's own scheduling: an ``xdist_group`` runs on one worker under ``--dist=loadgroup`` (pyproject's
addopts). tests/images relies on it to export and import each 8 GB agent image once per session: with the group
split, as pytest 9.2 with pytest-xdist 3.8 did, both workers imported the same images (16 GB more disk)."""

from __future__ import annotations

import os

from .conftest import REPO


def test_an_xdist_group_runs_on_one_worker(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    pytester.makeconftest("from tests.conftest import pytest_collection_modifyitems  # noqa: F401\n")
    pytester.makepyfile(test_grouped="""
        import os
        from pathlib import Path

        import pytest

        def _note(name):
            Path(name).write_text(os.environ["PYTEST_XDIST_WORKER"])

        @pytest.mark.xdist_group("images")
        @pytest.mark.parametrize("n", range(4))
        def test_grouped(n):
            _note(f"grouped-{n}")

        @pytest.mark.parametrize("n", range(4))
        def test_free(n):
            _note(f"free-{n}")
    """)
    result = pytester.runpytest_subprocess("-n", "2", "--dist=loadgroup", "-p", "no:cacheprovider", "-v",
                                           "-p", "no:hypothesispytest", "-p", "no:rexmle", timeout=120)
    result.assert_outcomes(passed=8)
    workers = {path.name: path.read_text() for path in pytester.path.glob("grouped-*")}
    assert len(workers) == 4 and len(set(workers.values())) == 1, workers
    result.stdout.fnmatch_lines(["*test_grouped.py::test_grouped[[]0[]]@images*"])
