"""Job states read from accounting directly (no submitit internals)."""

from __future__ import annotations

import subprocess
import time

from pytest_rexmle.runtime.sacct import COLUMNS, Accounting, parse


def test_parse_keeps_rows_by_job_and_skips_foreign_lines():
    text = ("12|RUNNING|vm|None|00:00:05|00:06:00|2026-01-01T00:00:00|0:0\n"
            "garbage line\n"
            "13|CANCELLED by 0|None assigned|None|00:00:00|00:06:00|Unknown|0:0\n")
    rows = parse(text)
    assert sorted(rows) == ["12", "13"]
    assert rows["12"]["NodeList"] == "vm" and rows["13"]["State"] == "CANCELLED by 0"
    assert set(rows["12"]) == set(COLUMNS)


def test_a_real_job_moves_from_unknown_to_completed(needs_slurm):
    job_id = subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true"],
                            capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
    accounting = Accounting()
    assert accounting.get_info(job_id, mode="cache") == {}  # cache mode never calls sacct
    deadline = time.monotonic() + 120
    while accounting.get_info(job_id, mode="force").get("State") != "COMPLETED":
        assert time.monotonic() < deadline, accounting.get_info(job_id)
        time.sleep(0.5)
    info = accounting.get_info(job_id)
    assert info["JobID"] == job_id and info["ExitCode"] == "0:0" and info["Elapsed"].count(":") == 2
