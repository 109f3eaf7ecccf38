"""``rexmle view`` and ``rexmle export atif`` against a downloaded (hostile) session or run folder.

Each test is an attack on what the two commands read or serve: a request under another Host (DNS
rebinding: a web page the reader visits resolves its own name to 127.0.0.1 and reads the call records),
a report whose ``run_dir`` points anywhere, a run folder whose ``logs/`` is a link elsewhere, a run.json
whose ``task`` climbs out of ``--out``, JSON nested 200,000 deep, and a report of hundreds of megabytes.
Every refusal is one clear line and exit code 2, never a traceback; nothing outside the given folders
is read or written.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_rexmle.report.view import run_folders, serve

SECRET = "SECRET-CALL-RECORD-" + "z" * 8


def _run(folder: Path, task: str = "isles22", secret: str = SECRET) -> Path:
    """A finished run folder: run.json and one recorded call whose request holds ``secret``."""
    (folder / "logs").mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"task": task, "agent": "command", "runtime": "local",
                                                 "data": "synthetic", "started": "2026-01-01T00:00:00+00:00"}))
    record = {"ts": "2026-01-01T00:00:01+00:00", "protocol": "openai", "route": "POST /v1/chat/completions",
              "model": "gpt-4o", "status": 200, "request": {"messages": [{"role": "user", "content": secret}]},
              "response": {"choices": [{"message": {"role": "assistant", "content": "ok"}}]},
              "usage": {"input_tokens": 1, "output_tokens": 1}}
    (folder / "logs" / "model-calls.jsonl").write_text(json.dumps(record) + "\n")
    return folder


def _rexmle(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_rexmle", *args], capture_output=True, text=True,
                          timeout=timeout)


def _get(port: int, path: str, host: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest("GET", path, skip_host=True)
        conn.putheader("Host", host)
        conn.endheaders()
        response = conn.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    finally:
        conn.close()


def test_view_answers_only_its_own_host(tmp_path):
    run = _run(tmp_path / "run")
    server = serve([run])
    port = server.server_address[1]
    try:
        status, page = _get(port, "/runs/0/run.html", f"127.0.0.1:{port}")
        assert status == 200 and 'data-offset="0"' in page
        status, record = _get(port, "/runs/0/call?offset=0", f"localhost:{port}")
        assert status == 200 and SECRET in record
        # DNS rebinding: the attacker's name now resolves to 127.0.0.1; the browser sends its name as Host
        for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1:{port + 1}", "127.0.0.1", "",
                     f"localhost:{port}.evil.example", f"127.0.0.2:{port}"):
            status, body = _get(port, "/runs/0/call?offset=0", host)
            assert status in (403, 421), (host, status)
            assert SECRET not in body
    finally:
        server.shutdown()


def _session(root: Path, run_dirs: list[str]) -> Path:
    """``root/.rexmle/report/<id>/rexmle-report.json`` naming ``run_dirs``."""
    report = root / ".rexmle" / "report" / "20260101T000000Z-abcdef"
    report.mkdir(parents=True)
    (report / "rexmle-report.json").write_text(json.dumps(
        {"tasks": [{"task_id": "isles22", "run_dir": d} for d in run_dirs]}))
    return report


def test_a_downloaded_report_cannot_point_view_at_a_folder_outside_it(tmp_path):
    victim = _run(tmp_path / "home" / "victim" / "secret-run")  # a run folder of someone else on this machine
    mine = _run(tmp_path / "download" / ".rexmle" / "runs" / "isles22" / "command-abc" / "20260101T000000Z-1")
    report = _session(tmp_path / "download", [str(victim), "/etc", "../../../home/victim/secret-run",
                                              "/elsewhere/.rexmle/runs/isles22/command-abc/20260101T000000Z-1"])
    runs = run_folders(report)
    # the report's own runs folder, found by the run's names below it (the session was made elsewhere)
    assert runs == [mine]
    assert victim not in runs


def test_a_report_finds_its_runs_in_a_runs_folder_the_user_names(tmp_path):
    report = _session(tmp_path / "download", ["/far/away/runs/isles22/command-abc/20260101T000000Z-1"])
    elsewhere = _run(tmp_path / "custom-runs" / "isles22" / "command-abc" / "20260101T000000Z-1")
    skipped: list[str] = []
    assert run_folders(report, skipped=skipped) == [] and "isles22/command-abc/20260101T000000Z-1" in skipped[0]
    assert run_folders(report, [tmp_path / "custom-runs"]) == [elsewhere]
    proc = _rexmle("view", "--no-serve", "--runs", str(tmp_path / "custom-runs"), str(report))
    assert proc.returncode == 0 and proc.stdout.strip() == str(elsewhere / "run.html"), proc.stderr


def test_a_downloaded_reports_linked_runs_folder_is_not_followed(tmp_path):
    victim_runs = tmp_path / "home" / "victim" / ".rexmle" / "runs"
    _run(victim_runs / "isles22" / "command-abc" / "20260101T000000Z-1")
    report = _session(tmp_path / "download", ["/x/runs/isles22/command-abc/20260101T000000Z-1"])
    os.symlink(victim_runs, tmp_path / "download" / ".rexmle" / "runs")
    skipped: list[str] = []
    assert run_folders(report, skipped=skipped) == []
    assert skipped and "link" in skipped[0]


def test_export_writes_through_no_link_in_out(tmp_path):
    run = _run(tmp_path / "runs" / "isles22" / "command-abc" / "20260101T000000Z-1")
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    os.symlink(elsewhere, out / "isles22__20260101T000000Z-1")
    proc = _rexmle("export", "atif", str(run), "--out", str(out))
    assert proc.returncode == 2 and "link" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert list(elsewhere.iterdir()) == []


def test_view_and_export_do_not_follow_a_linked_logs_folder(tmp_path):
    victim = _run(tmp_path / "victim")
    run = tmp_path / "download" / "run"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"task": "isles22", "agent": "command"}))
    os.symlink(victim / "logs", run / "logs")
    proc = _rexmle("view", "--no-serve", str(run))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "logs" in proc.stderr and "link" in proc.stderr
    assert not (run / "run.html").exists()
    proc = _rexmle("export", "atif", str(run), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "link" in proc.stderr
    assert list(tmp_path.rglob("trajectory.json")) == []


def test_a_linked_run_folder_below_the_runs_folder_is_not_followed(tmp_path):
    victim = _run(tmp_path / "victim" / "isles22" / "command-abc" / "20260101T000000Z-9")
    runs_root = tmp_path / "download" / "runs"
    (runs_root / "isles22").mkdir(parents=True)
    os.symlink(victim.parent, runs_root / "isles22" / "command-abc")
    mine = _run(runs_root / "isles22" / "command-def" / "20260101T000000Z-1")
    assert run_folders(runs_root) == [mine]


@pytest.mark.parametrize("task", ["../escaped", "ABS/escaped", "a/../../escaped", "..", "x\x00y", "t\u202eexe"])
def test_export_keeps_every_trajectory_inside_out(tmp_path, task):
    task = task.replace("ABS", str(tmp_path / "abs"))
    run = _run(tmp_path / "runs" / "isles22" / "command-abc" / "20260101T000000Z-1", task=task if "\x00" not in task
               else "isles22")
    if "\x00" in task:  # JSON carries what a file name cannot
        doc = json.loads((run / "run.json").read_text())
        (run / "run.json").write_text(json.dumps({**doc, "task": task}))
    out = tmp_path / "export" / "out"
    proc = _rexmle("export", "atif", str(run), "--out", str(out))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "task" in proc.stderr
    written = [p for p in tmp_path.rglob("trajectory.json")]
    assert written == [], written
    assert not (tmp_path / "abs").exists()


def test_export_writes_a_plain_task_name(tmp_path):
    run = _run(tmp_path / "runs" / "isles22" / "command-abc" / "20260101T000000Z-1")
    proc = _rexmle("export", "atif", str(run), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "isles22__20260101T000000Z-1" / "agent" / "trajectory.json").is_file()


@pytest.mark.parametrize("where", ["report", "run.json"])
def test_json_nested_200k_deep_is_a_clean_error(tmp_path, where):
    deep = "[" * 200_000 + "]" * 200_000
    if where == "report":
        target = _session(tmp_path, [])
        (target / "rexmle-report.json").write_text(deep)
    else:
        target = _run(tmp_path / "run")
        (target / "run.json").write_text(deep)
    for args in (("view", "--no-serve", str(target)), ("export", "atif", str(target), "--out", str(tmp_path / "o"))):
        proc = _rexmle(*args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr and "RecursionError" not in proc.stderr
        assert "nested" in proc.stderr, proc.stderr


def test_a_huge_report_is_refused_before_it_is_read(tmp_path):
    """A sparse 256 MiB report (1 GiB behaves the same, only slower to fail on today's code): refused by
    its size, the process staying small."""
    target = _session(tmp_path, [])
    with open(target / "rexmle-report.json", "wb") as handle:
        handle.write(b'{"tasks": [')
        handle.truncate(256 * 1024 * 1024)
    # VmHWM, this process's own peak: getrusage's maxrss keeps the forking parent's peak across exec (an xdist
    # worker of 500 MB made this 2-line process "use" 500 MB)
    script = ("import sys\nfrom pytest_rexmle.cli import main\ncode = main(sys.argv[1:])\n"
              "hwm = next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:'))\n"
              "print('maxrss_kib', hwm, file=sys.stderr)\nsys.exit(code)\n")
    proc = subprocess.run([sys.executable, "-c", script, "view", "--no-serve", str(target)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "more than the" in proc.stderr, proc.stderr[-2000:]
    rss_kib = int(proc.stderr.rsplit("maxrss_kib", 1)[1].split()[0])
    assert rss_kib < 200 * 1024, f"peak RSS {rss_kib} KiB"
