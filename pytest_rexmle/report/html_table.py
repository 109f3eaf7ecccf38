"""Percentile, status and key metrics as columns of pytest-html's results table (``--html=report.html``).

pytest-html shows each item's outcome only, which for a benchmark item says whether it reached
``--rexmle-min-percentile`` and nothing of how far it got. Its hooks are optional here
(``optionalhook``): without pytest-html nothing calls them and nothing breaks. The values come from the
item's own result (the ``rexmle_result`` user property, the same record the session report reads), so they
agree with the session report under xdist too; an item without one (skipped, harness error, another
test of the session) gets empty cells, keeping every row as wide as the header.
"""

from __future__ import annotations

import html
import json
from typing import Any

import pytest

from .properties import RESULT_PROPERTY
from .render import fmt_number

#: where the columns go: after pytest-html's Result and Test columns
POSITION = 2
#: the key metrics shown, as in the terminal table: the first ranking metrics
SHOWN_METRICS = 3


def record_of(report: Any) -> dict[str, Any] | None:
    """The item's result record from its report's user properties, or None (a collect report has none)."""
    for name, value in getattr(report, "user_properties", ()) or ():
        if name == RESULT_PROPERTY:
            try:
                record = json.loads(value)
            except (TypeError, ValueError):
                return None
            return record if isinstance(record, dict) else None
    return None


def percentile_text(record: dict[str, Any] | None) -> str:
    """The percentile as a fraction with three decimals: pytest-html sorts a column by its text, and one
    width from ``0.000`` to ``1.000`` sorts as the numbers do."""
    value = (record or {}).get("percentile")
    return f"{value:.3f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else ""


def metrics_text(record: dict[str, Any] | None) -> str:
    """``key=value`` for the first ranking metrics, in the terminal table's number format."""
    metrics = (record or {}).get("metrics") or {}
    keys = list((record or {}).get("ranking_metrics") or ())[:SHOWN_METRICS]
    return ", ".join(f"{k}={fmt_number(metrics[k])}" for k in keys if k in metrics)


class ResultColumns:
    """Registered by the plugin in a benchmark session's controller (where pytest-html writes its file)."""

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        cells[POSITION:POSITION] = ['<th class="sortable" data-column-type="percentile">Percentile</th>',
                                    '<th class="sortable" data-column-type="rexmleStatus">Status</th>',
                                    "<th>Key metrics</th>"]

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_row(self, report: Any, cells: list[str]) -> None:
        record = record_of(report)
        status = str((record or {}).get("status") or "")
        cells[POSITION:POSITION] = [f'<td class="col-percentile">{percentile_text(record)}</td>',
                                    f'<td class="col-rexmleStatus">{html.escape(status)}</td>',
                                    f'<td class="col-rexmleMetrics">{html.escape(metrics_text(record))}</td>']
