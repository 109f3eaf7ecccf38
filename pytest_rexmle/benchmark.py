"""The benchmark item. Collected only when ``--agent`` is given (the plugin adds this file)."""

import pytest


def test_task(rexmle_result, rexmle_settings):
    """One ReX-MLE task: the agent ran, its submission was graded and ranked."""
    result = rexmle_result
    if result.status != "ok":
        pytest.fail(f"FAIL [{result.status}] {result.reason}", pytrace=False)
    if result.percentile < rexmle_settings.min_percentile:
        pytest.fail(f"percentile {100 * result.percentile:.1f}% is below --rexmle-min-percentile "
                    f"{100 * rexmle_settings.min_percentile:g}%", pytrace=False)
