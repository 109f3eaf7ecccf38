"""The two module-scoped fixtures most grader test files start from, written once.

``twin_fixtures("cellseg")`` returns ``twin`` (the task's synthetic data, generated once per module)
and ``perfect`` (its private answers written as a submission); a test module binds them to those
names so that pytest finds them.
"""

from __future__ import annotations

import pytest

from pytest_rexmle.data.synthetic import generate
from pytest_rexmle.graders.base import load_grader
from pytest_rexmle.task import registry


def twin_fixtures(task_id: str):
    @pytest.fixture(scope="module")
    def twin(tmp_path_factory):
        return generate(registry().get(task_id), tmp_path_factory.mktemp(task_id))

    @pytest.fixture(scope="module")
    def perfect(twin, tmp_path_factory):
        out = tmp_path_factory.mktemp("perfect") / "submission"
        load_grader(registry().get(task_id)).write_perfect(twin.private, out)
        return out

    return twin, perfect
