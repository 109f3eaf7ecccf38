"""Whole sessions with a hostile agent: they finish, within memory, with clean reasons; resume keys hold."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from ..conftest import report_json, run_folders

AGENT = textwrap.dedent("""
    import os, sys
    ws = os.environ["REXMLE_WORKSPACE"]
    try:
        os.mkfifo(os.path.join(ws, "rexmle-usage.json"))      # an endless read for a naive host
    except OSError:                                          # (the sandbox's seccomp filter may refuse it)
        os.symlink("/dev/zero", os.path.join(ws, "rexmle-usage.json"))
    os.symlink("/dev/zero", os.path.join(ws, "train.log"))      # an endless, growing read
    with open(os.path.join(ws, "big.log"), "wb") as fh:        # 1 GiB of log, a few kB on disk
        fh.write(b"epoch 1 loss=0.5\\n" * 1000)
        fh.truncate(1 << 30)
    os.makedirs(os.path.join(ws, "x"), exist_ok=True)
    sys.stderr.write("\\x1b[2J\\x1b[31mFATAL\\x1b[0m \\x1b]0;pwned\\x07the end\\r\\n")
    sys.exit(3)
""")

#: runs pytest in a child and prints that child's peak RSS (MB) as the last line
PEAK = textwrap.dedent("""
    import resource, subprocess, sys
    proc = subprocess.run([sys.executable, "-m", "pytest", *sys.argv[1:]], capture_output=True, text=True)
    sys.stdout.write(proc.stdout)
    print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
""")


def test_hostile_leftovers_finish_the_session_within_memory(bench, needs_bwrap, tmp_path):
    agent_dir = tmp_path / "agent"
    agent_dir.mkdir()
    (agent_dir / "agent.py").write_text(AGENT)
    proc = subprocess.run([sys.executable, "-c", PEAK, "-p", "no:cacheprovider", "--rexmle-data=synthetic",
                           "--agent=command", f"--agent-option=dir={agent_dir}", "--agent-option=cmd=python3 agent.py",
                           "-k", "ldct-iqa"], cwd=bench.path, capture_output=True, text=True, timeout=600)
    lines = proc.stdout.splitlines()
    peak_mb = float(lines[-1])
    print(f"session peak RSS: {peak_mb:.0f} MB")
    assert any("1 failed" in line for line in lines), proc.stdout[-3000:]
    assert peak_mb < 1000, peak_mb  # the session grew to 6.6 GB on the logs alone
    fail = next(line for line in lines if "agent exited with code 3" in line)
    assert "stderr ends with: FATAL the end" in fail
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout
    record = report_json(bench.path)["tasks"][0]
    assert "\x1b" not in record["reason"] and record["reason"].endswith("stderr ends with: FATAL the end; "
                                                                        "no submission.csv in the submission folder")
    run = run_folders(bench.path, "ldct-iqa")[-1]
    meta = json.loads((run / "run.json").read_text())
    assert meta["scrub"]["n_removed"] == 2, meta["scrub"]  # the FIFO (or link) and the link to /dev/zero
    assert not (run / "workspace" / "rexmle-usage.json").exists()
    stages = json.loads((run / "stages.json").read_text())
    # scrubbed before it is read: the usage is the gateway's (the default network), never the agent's file
    assert stages["usage"]["source"] == "gateway" and "warnings" not in stages["usage"]


def test_resume_never_reuses_a_result_of_other_answers(bench, needs_bwrap):
    def run(*args):
        result = bench("--agent=sample", "-k", "ldct-iqa", "--rexmle-resume", *args)
        result.assert_outcomes(passed=1)
        return len(run_folders(bench.path, "ldct-iqa"))

    assert run("--rexmle-seed=1") == 1
    assert run("--rexmle-seed=1") == 1, "same pinned seed: the result is reused"
    assert report_json(bench.path)["settings"]["answers_reproducible"] is True
    assert run("--rexmle-seed=2") == 2, "another seed means other answers: never reused"
    assert run() == 3, "the secret-keyed twin is another data set again"
    assert report_json(bench.path)["settings"]["answers_reproducible"] is False
    assert run() == 3
