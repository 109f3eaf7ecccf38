"""pytest-rerunfailures' ``--reruns`` would grade the same run again: a benchmark session refuses it by name."""

from __future__ import annotations

import pytest


def test_reruns_are_refused_with_what_repeats_a_run(bench):
    result = bench("--agent=sample", "--reruns=2", "-k", "ldct-iqa")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--reruns 2 would grade the same agent run again*--rexmle-repeat N*"])
    assert not (bench.path / ".rexmle" / "runs" / "ldct-iqa").exists()  # refused before anything ran


def test_reruns_of_zero_change_nothing(bench):
    result = bench("--agent=sample", "--reruns=0", "-k", "ldct-iqa", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK
