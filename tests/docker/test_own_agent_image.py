"""``--agent=command --agent-option image=NAME``: the README's example agent in the offline test image.

No ``--rexmle-runtime``: the command runs only from an image, so the session chooses the docker runtime,
says so in its header and records why in run.json and the report's settings.
"""

from __future__ import annotations

import json

from ..conftest import REPO, report_json, run_folders

EXAMPLE = REPO / "examples"


def test_example_agent_in_an_image_chooses_docker_itself(bench, test_image):
    result = bench("--agent=command", "--agent-option=cmd=python3 my_agent.py", f"--agent-option=dir={EXAMPLE}",
                   f"--agent-option=image={test_image}", "-k", "ldct-iqa")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["rexmle: agent=command runtime=docker *",
                                 "rexmle: runtime docker chosen: agent 'command' runs only from an image*"])
    record = report_json(bench.path)["tasks"][0]
    folder = run_folders(bench.path, "ldct-iqa")[-1]
    run, stdout = json.loads((folder / "run.json").read_text()), (folder / "logs" / "agent.stdout.log").read_text()
    assert record["status"] == "ok", record
    assert run["runtime"] == "docker" and "only from an image" in run["runtime_reason"]
    assert report_json(bench.path)["settings"]["runtime_reason"] == run["runtime_reason"]
    assert "validation: {'ok': True" in stdout
