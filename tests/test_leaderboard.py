"""Leaderboard self-check for all 20 files, and N per task (docs/reference/grading.md: leaderboards, the tasks)."""

from __future__ import annotations

import csv

import pytest

from pytest_rexmle.leaderboard import Leaderboard, metric_columns
from pytest_rexmle.task import registry

from .reference import reference_sha256, sha256

# the benchmark's task list, column N (the leaderboard's rows)
EXPECTED_N = {
    "usenhance": 10, "ldct-iqa": 6, "panther-t1": 10, "panther-t2": 10, "seg-a": 10, "dentex": 10,
    "topcow-cta-seg": 10, "topcow-cta-det": 8, "topcow-cta-cls": 6, "topcow-mra-seg": 10, "topcow-mra-det": 7,
    "topcow-mra-cls": 6, "puma-t1-tissue-seg": 10, "puma-t1-nuclei-det": 10, "puma-t2-tissue-seg": 10,
    "puma-t2-nuclei-det": 10, "isles22": 10, "cellseg": 10, "topbrain-cta-seg": 10, "topbrain-mra-seg": 10,
}


def test_table_covers_every_task():
    assert sorted(EXPECTED_N) == registry().ids
    # 15 boards of 10 rows, + ldct-iqa 6 + topcow-cta-det 8 + topcow-cta-cls 6 + topcow-mra-det 7
    # + topcow-mra-cls 6 = 150 + 33 = 183 human rows in all
    assert sum(Leaderboard.read(t.leaderboard_path).n for t in registry()) == 183


@pytest.fixture(params=sorted(EXPECTED_N))
def task_board(request):
    task = registry().get(request.param)
    return task, Leaderboard.read(task.leaderboard_path)


def test_n_matches_table(task_board):
    task, board = task_board
    assert board.n == EXPECTED_N[task.id]
    # N is the number of data rows of the CSV file itself
    with task.leaderboard_path.open(newline="", encoding="utf-8") as fh:
        assert sum(1 for _ in csv.reader(fh)) - 1 == EXPECTED_N[task.id]


def test_header_layout(task_board):
    task, _ = task_board
    with task.leaderboard_path.open(newline="", encoding="utf-8") as fh:
        header = next(csv.reader(fh))
    assert header[:3] == ["rank", "team", "mean_position"]
    rest = header[3:]
    assert len(rest) % 2 == 0
    pairs = [(rest[i], rest[i + 1]) for i in range(0, len(rest), 2)]
    assert all(pos == f"{m}_position" for m, pos in pairs)
    assert [m for m, _ in pairs] == metric_columns(task.leaderboard_path)


def test_stored_positions_recompute(task_board):
    """pos = 1 + #{other rows strictly better on m}, in the metric's direction."""
    task, board = task_board
    for metric in task.ranking_metrics:
        values = board.values[metric.key]
        for i, v in enumerate(values):
            if metric.higher_is_better:
                better = sum(1 for j, h in enumerate(values) if j != i and h > v)
            else:
                better = sum(1 for j, h in enumerate(values) if j != i and h < v)
            assert board.stored_positions[metric.key][i] == 1 + better, (task.id, metric.key, board.teams[i])


def test_mean_position_is_rounded_mean(task_board):
    task, board = task_board
    keys = [m.key for m in task.ranking_metrics]
    for i in range(board.n):
        exact = sum(board.stored_positions[k][i] for k in keys) / len(keys)
        assert board.stored_mean_positions[i] == pytest.approx(round(exact, 2), abs=1e-9), (task.id, i, exact)
        assert abs(board.stored_mean_positions[i] - exact) <= 0.005 + 1e-9


def test_rows_sorted_by_mean_position_and_ranked(task_board):
    task, board = task_board
    means = list(board.stored_mean_positions)
    assert means == sorted(means), task.id
    assert list(board.ranks) == list(range(1, board.n + 1))


def test_task_copy_equals_shared_reference(task_board):
    task, _ = task_board
    assert sha256(task.leaderboard_path) == reference_sha256(f"{task.reference_id}/leaderboard.csv")


def test_worked_example_board_parses_exactly():
    # docs/reading-the-report.md's worked example
    board = Leaderboard.read(registry().get("topcow-cta-det").leaderboard_path)
    assert board.teams == ("Organizers UZH", "NIC-VICOROB", "ARG", "IMR", "CLAIM", "junqiangchen", "tatsatra",
                           "pamaad")
    assert board.values["boundary_iou"] == (0.69, 0.65, 0.62, 0.62, 0.60, 0.60, 0.48, 0.16)
    assert board.values["iou"] == (0.79, 0.76, 0.74, 0.74, 0.72, 0.72, 0.63, 0.34)
    assert board.stored_mean_positions == (1.0, 2.0, 3.0, 3.0, 5.0, 5.0, 7.0, 8.0)
    # best values: max for higher-better
    assert board.best("iou", True) == 0.79
    assert board.best("boundary_iou", False) == 0.16


def test_repeated_team_names_are_separate_rows():
    # team names may repeat; usenhance lists "1Bit" twice (ranks 7 and 8)
    board = Leaderboard.read(registry().get("usenhance").leaderboard_path)
    assert board.teams.count("1Bit") == 2
    assert board.n == 10
