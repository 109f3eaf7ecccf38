"""--rexmle-prepare: the benchmark prepares missing real data on demand, once, under xdist."""

from __future__ import annotations

import json

from ..conftest import report_json


def test_prepare_on_demand_under_xdist(bench, needs_bwrap, fake_sources, tmp_path):
    state, _manual = fake_sources
    data_dir = tmp_path / "data"
    result = bench("--agent=sample", "--rexmle-data=prepared", f"--rexmle-data-dir={data_dir}", "--rexmle-prepare",
                   "-n", "2", "-k", "isles22 or topcow-cta-det or topcow-mra-det or usenhance", "-rs")
    # usenhance comes from a Google Drive file that must be fetched by hand: a skip naming the file
    result.assert_outcomes(passed=3, skipped=1)
    result.stdout.fnmatch_lines(["*train_dataset.zip*"])
    for task_id in ("isles22", "topcow-cta-det", "topcow-mra-det"):
        manifest = json.loads((data_dir / task_id / "private" / "prepare_manifest.json").read_text())
        assert manifest["project_id"] == task_id
    doc = report_json(bench.path)
    assert {c["task_id"]: c["status"] for c in doc["tasks"]} == {
        "isles22": "ok", "topcow-cta-det": "ok", "topcow-mra-det": "ok", "usenhance": "missing"}
    # the shared TopCoW release is downloaded once although two workers prepared two TopCoW tasks
    assert len(state.downloads("TopCoW2024_Data_Release.zip")) == 1
