"""``rexmle validate`` inside the sandbox is the gateway's standard-library client, with no harness code.

The agent runs with the system's ``python3`` (not the harness's interpreter, not its venv) under each
local mechanism, as its own uid when the harness is root; its tools folder's ``rexmle validate`` asks a
real session gateway serving this run on the host's loopback (``--rexmle-network=host`` here; the
gateway network mode wires the same endpoint into the sandbox's own namespace). The verdicts are the
harness validator's, run by the gateway on the run's staged submission folder.
"""

from __future__ import annotations

from pytest_rexmle.runtime import staging
from pytest_rexmle.runtime.base import RunSpec
from pytest_rexmle.runtime.local import LocalRuntime

COMMAND = ("cp $REXMLE_DATA_DIR/sample_submission.csv $REXMLE_SUBMISSION_DIR/submission.csv && "
           "rexmle validate --submission $REXMLE_SUBMISSION_DIR > $REXMLE_WORKSPACE/ok.txt; echo $? >> $REXMLE_WORKSPACE/ok.txt; "
           "printf 'image_id,quality_score\\n' > $REXMLE_SUBMISSION_DIR/submission.csv; "
           "rexmle-validate --submission $REXMLE_SUBMISSION_DIR > $REXMLE_WORKSPACE/bad.txt; echo $? >> $REXMLE_WORKSPACE/bad.txt; "
           "cp $REXMLE_DATA_DIR/sample_submission.csv $REXMLE_SUBMISSION_DIR/submission.csv")


def test_rexmle_validate_inside_goes_through_the_gateway_client(tmp_path, mechanism, shared_cache):
    from pytest_rexmle.data.synthetic import ensure_synthetic
    from pytest_rexmle.gateway import session_gateway
    from pytest_rexmle.task import registry

    twin = ensure_synthetic(registry().get("ldct-iqa"), shared_cache)
    run = tmp_path / "run"
    for folder in (run / "workspace", run / "submission", run / "logs"):
        folder.mkdir(parents=True)
    (run / "instructions.md").write_text("validate\n")
    runtime = LocalRuntime(sandbox=mechanism)
    spec = RunSpec("ldct-iqa", ["/bin/sh", "-c", COMMAND], {}, twin.public, run / "workspace", run / "submission",
                   run / "logs", run / "instructions.md", 120, network="host")
    spec = runtime.stage(spec)
    if spec.stage is None:
        spec = RunSpec(**{**spec.__dict__, "stage": staging.plan(spec)})
    assert spec.stage is not None, "no stage root on this filesystem"
    gateway_run = session_gateway(None).open_run(f"validate-{mechanism}", logs_dir=run / "logs",
                                                 submission_dir=spec.stage / "submission", task_id="ldct-iqa",
                                                 public_dir=twin.public)
    try:
        host, port = gateway_run.host_address()
        paths = runtime.contract_paths(spec)
        spec.env.update(gateway_run.environment(f"http://{host}:{port}"))
        spec.env.update(REXMLE_TASK="ldct-iqa", REXMLE_DATA_DIR=paths["data"], REXMLE_WORKSPACE=paths["workspace"],
                        REXMLE_SUBMISSION_DIR=paths["submission"])
        outcome = runtime.run(spec)
    finally:
        gateway_run.close()
    assert outcome.exit_code == 0, outcome.stderr.read_text()[-2000:]
    ok = (run / "workspace" / "ok.txt").read_text().splitlines()
    assert ok[0].startswith("OK: 15 test case(s)") and ok[-1] == "0", ok
    bad = (run / "workspace" / "bad.txt").read_text().splitlines()
    assert bad[0].startswith("INVALID:") and "1000" in bad[0] and bad[-1] == "1", bad
