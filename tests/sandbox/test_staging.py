"""The neutral stage (runtime/staging.py): the run's folders leave for /var/tmp/rexmle-* while the agent runs,
come back however the run ends (or the next session brings them back), and nothing the agent leaves can
make the way back write outside the run folder."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_rexmle.runtime import staging
from pytest_rexmle.runtime.base import RunSpec

from .conftest import SECRET, run_agent

REPO = Path(__file__).resolve().parents[2]


def _spec(tmp_path: Path) -> RunSpec:
    """A run folder and a public folder (nested folders, a relative link, an odd mode), as the harness makes them."""
    run, public = tmp_path / "runs" / "task" / "agent-key" / "stamp", tmp_path / "data" / "task" / "public"
    for folder in (run / "workspace", run / "submission", run / "logs", public / "train" / "case1"):
        folder.mkdir(parents=True)
    (public / "train" / "case1" / "image.nii").write_bytes(b"voxels")
    (public / "sample_submission.csv").write_text("id,label\n1,0\n")
    os.symlink("sample_submission.csv", public / "sample.csv")
    os.chmod(public / "train", 0o750)
    (run / "instructions.md").write_text("do it\n")
    (run / "workspace" / "notes.txt").write_text("mine")
    return RunSpec("task", ["true"], {}, public, run / "workspace", run / "submission", run / "logs",
                   run / "instructions.md", 60, hidden=(tmp_path / "data", tmp_path / "runs"))


def _tree(root: Path) -> dict[str, tuple]:
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        what = os.readlink(path) if path.is_symlink() else (st.st_ino if path.is_file() else "dir")
        out[str(path.relative_to(root))] = (what, stat.S_IMODE(st.st_mode) if not path.is_symlink() else None)
    return out


def test_stage_holds_the_run_and_everything_goes_back(tmp_path):
    spec = _spec(tmp_path)
    run = spec.workspace.parent
    workspace_inode = spec.workspace.stat().st_ino
    with staging.staged(spec) as view:
        stage = view.spec.stage
        assert stage.parent == Path("/var/tmp") and stage.name.startswith("rexmle-")
        assert view.details["host_paths_hidden"] is True and view.details["data_view"] == "links"
        assert not spec.workspace.exists() and not spec.submission.exists()
        assert (stage / "workspace" / "notes.txt").read_text() == "mine"
        assert stat.S_IMODE(stage.stat().st_mode) == 0o700  # no other uid enters it
        # the record a later session recovers from names the stage and this process
        record = json.loads((run / "stage.json").read_text())
        assert record["stage"] == str(stage) and record["pid"] == os.getpid()
        # the public folder as hard links: same names, same inodes (no copy), same modes
        assert _tree(view.spec.data_dir) == _tree(spec.data_dir)
        assert view.spec.instructions.read_text() == "do it\n" and view.spec.data_dir == stage / "data"
        (stage / "submission" / "submission.csv").write_text("id,label\n1,1\n")
    assert spec.workspace.stat().st_ino == workspace_inode
    assert (spec.submission / "submission.csv").read_text() == "id,label\n1,1\n"
    assert not stage.exists() and not (run / "stage.json").exists()
    assert sorted(p.name for p in run.iterdir()) == ["instructions.md", "logs", "submission", "workspace"]
    assert (spec.data_dir / "train" / "case1" / "image.nii").stat().st_nlink == 1


def test_a_harness_error_inside_the_run_still_moves_everything_back(tmp_path):
    spec = _spec(tmp_path)
    with pytest.raises(RuntimeError, match="engine went away"):
        with staging.staged(spec) as view:
            stage = view.spec.stage
            raise RuntimeError("engine went away")
    assert (spec.workspace / "notes.txt").read_text() == "mine" and not stage.exists()


@pytest.mark.parametrize("ending", ["success", "failure", "timeout"])
def test_real_runs_move_back_however_they_end(tmp_path, mechanism, ending):
    code = {"success": "open('made.txt', 'w').write('x')",
            "failure": "open('made.txt', 'w').write('x'); raise SystemExit(3)",
            "timeout": "open('made.txt', 'w').write('x'); import time; time.sleep(60)"}[ending]
    run = run_agent(tmp_path, mechanism, code, time_limit=3 if ending == "timeout" else 60)
    assert run.outcome.timed_out is (ending == "timeout")
    assert run.outcome.exit_code == {"success": 0, "failure": 3, "timeout": None}[ending], run.stderr[-2000:]
    assert (run.root / "workspace" / "made.txt").read_text() == "x"
    assert run.outcome.details["host_paths_hidden"] is True
    assert not Path(run.outcome.details["stage"]).exists() and not (run.root / "stage.json").exists()
    assert sorted(p.name for p in run.root.iterdir()) == ["instructions.md", "logs", "submission", "workspace"]


def test_the_data_view_is_read_only_inside_and_the_cache_untouched(tmp_path, mechanism):
    """Hard links share inodes with the cache: writing, truncating, renaming or linking them out must fail."""
    code = r'''
import errno, json, os
data = os.path.join(os.path.dirname(os.environ["HOME"]), "data")
out = {"listing": sorted(os.listdir(data)), "read": open(os.path.join(data, "train.csv")).read()}
def attempt(name, fn):
    try:
        fn()
        out[name] = "ok"
    except OSError as exc:
        out[name] = errno.errorcode.get(exc.errno)
attempt("write", lambda: open(os.path.join(data, "train.csv"), "a").write("forged"))
attempt("create", lambda: open(os.path.join(data, "new.csv"), "w"))
attempt("unlink", lambda: os.unlink(os.path.join(data, "train.csv")))
attempt("link_out", lambda: os.link(os.path.join(data, "train.csv"), "train-link.csv"))
print(json.dumps(out))
'''
    run = run_agent(tmp_path, mechanism, code)
    report = run.report()
    assert report["listing"] == ["train.csv"] and report["read"] == "case,label\n1,0\n"
    for name in ("write", "create", "unlink", "link_out"):
        assert report[name] in ("EROFS", "EACCES", "EPERM", "EXDEV"), (name, report[name])
    public = tmp_path / "data" / "public"
    assert (public / "train.csv").read_text() == "case,label\n1,0\n" and sorted(os.listdir(public)) == ["train.csv"]
    assert (public / "train.csv").stat().st_nlink == 1


def test_hidden_folders_inside_the_public_folder_are_left_out_of_the_view(tmp_path):
    spec = _spec(tmp_path)
    secret = spec.data_dir / "train" / "answers"
    secret.mkdir()
    (secret / "answers.csv").write_text(SECRET)
    target = tmp_path / "view"
    staging.link_tree(spec.data_dir, target, skip=(secret,))
    assert not (target / "train" / "answers").exists() and (target / "train" / "case1" / "image.nii").exists()


def test_a_hostile_top_entry_cannot_make_the_move_back_write_outside(tmp_path):
    """Were the agent able to swap the staged folders for a link or a FIFO, the move back refuses them:
    an empty folder stands in, and nothing outside the run folder is written or followed."""
    spec = _spec(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("host file")
    with staging.staged(spec) as view:
        stage = view.spec.stage
        staging.remove_tree(stage / "workspace")
        os.symlink(outside, stage / "workspace")
        os.rmdir(stage / "submission")
        os.mkfifo(stage / "submission")
    run = spec.workspace.parent
    for name in ("workspace", "submission"):
        assert (run / name).is_dir() and not (run / name).is_symlink() and list((run / name).iterdir()) == []
    assert sorted(os.listdir(outside)) == ["keep.txt"] and (outside / "keep.txt").read_text() == "host file"
    assert len(view.details["stage_notes"]) == 2 and "symbolic link" in view.details["stage_notes"][0]
    assert not stage.exists()


def test_a_folder_swapped_for_another_folder_is_refused_too(tmp_path):
    spec = _spec(tmp_path)
    with staging.staged(spec) as view:
        stage = view.spec.stage
        os.rename(stage / "workspace", stage / "old")
        (stage / "workspace").mkdir()
    assert list(spec.workspace.iterdir()) == [] and "not the folder moved in" in view.details["stage_notes"][0]


def test_deep_trees_fifos_and_links_inside_move_back_untouched_and_fast(tmp_path):
    spec = _spec(tmp_path)
    with staging.staged(spec) as view:
        work = view.spec.workspace
        os.mkfifo(work / "trap.fifo")
        os.symlink("/dev/zero", work / "zero")
        deep = os.open(work, os.O_RDONLY)
        for _ in range(1500):
            os.mkdir("d", dir_fd=deep)
            child = os.open("d", os.O_RDONLY, dir_fd=deep)
            os.close(deep)
            deep = child
        os.close(deep)
        tmp_deep = view.spec.stage / ".tmp-deep"  # the private /tmp the runtime removes: any depth
        subprocess.run(["sh", "-c", f"cd {tmp_deep.parent} && mkdir .tmp-deep && cd .tmp-deep && "
                        "for i in $(seq 1500); do mkdir d && cd d; done"], check=True)
        moved = os.lstat(work / "d").st_ino
        started = time.monotonic()
    try:
        # the tree came back by one rename, not a walk or a copy: the same inode (the time it takes is a
        # benchmark's matter; the bound here only says it did not hang)
        assert os.lstat(spec.workspace / "d").st_ino == moved
        assert time.monotonic() - started < 120
        assert stat.S_ISFIFO(os.lstat(spec.workspace / "trap.fifo").st_mode)
        assert os.readlink(spec.workspace / "zero") == "/dev/zero"
        assert (spec.workspace / "d" / "d" / "d").is_dir() and not view.spec.stage.exists()
    finally:
        staging.remove_tree(spec.workspace)  # pytest's own clean-up of old tmp folders recurses


def test_no_stage_root_on_the_filesystem_runs_unstaged_and_says_so(tmp_path, mechanism, monkeypatch):
    """/dev/shm is another filesystem than the run folder: nothing can be renamed there."""
    if os.stat("/dev/shm").st_dev == tmp_path.stat().st_dev:
        pytest.skip("/dev/shm is on the run folder's filesystem here")
    monkeypatch.setenv(staging.STAGE_ENV, "/dev/shm")
    monkeypatch.setattr(staging, "_warned", set())
    if mechanism == "landlock" and os.geteuid() == 0:
        # unstaged, the run's own uid cannot reach folders under root's 0700 pytest tmp: a refusal naming
        # the fix, never a run as root (issue 17.7)
        from pytest_rexmle.runtime.local import AgentIdentityRefused

        with pytest.warns(UserWarning, match="host_paths_hidden: false"):
            with pytest.raises(AgentIdentityRefused, match=f"cannot reach its run folder.*{staging.STAGE_ENV}"):
                run_agent(tmp_path, mechanism, "open('made.txt', 'w').write('x')")
        assert (tmp_path / "run" / "workspace").stat().st_uid == 0  # given back, though the run never started
        return
    with pytest.warns(UserWarning, match="host_paths_hidden: false"):
        run = run_agent(tmp_path, mechanism, "open('made.txt', 'w').write('x')")
    assert run.outcome.exit_code == 0, run.stderr[-2000:]
    assert run.outcome.details["host_paths_hidden"] is False and run.outcome.details["stage"] is None
    assert (run.root / "workspace" / "made.txt").read_text() == "x"
    assert not [p for p in Path("/dev/shm").iterdir() if p.name.startswith("rexmle-")]


def test_public_data_on_another_filesystem_is_bound_from_its_host_path(tmp_path, monkeypatch):
    """Hard links cannot cross filesystems: the real folder stands in, and the run says its path shows."""
    shm = Path(os.environ.get("REXMLE_TEST_SHM", "/dev/shm"))
    if os.stat(shm).st_dev == tmp_path.stat().st_dev:
        pytest.skip("no second filesystem here")
    spec = _spec(tmp_path)
    import tempfile

    public = Path(tempfile.mkdtemp(dir=shm))
    try:
        (public / "train.csv").write_text("x")
        spec = RunSpec(**{**spec.__dict__, "data_dir": public})
        with staging.staged(spec) as view:
            assert view.details["data_view"] == "host path" and view.details["host_paths_hidden"] is False
            assert (view.spec.data_dir / "train.csv").read_text() == "x"
            assert os.path.realpath(view.spec.data_dir) == str(public)
        assert (public / "train.csv").read_text() == "x"
    finally:
        staging.remove_tree(public)


def test_a_live_owner_is_never_recovered_from(tmp_path):
    spec = _spec(tmp_path)
    with staging.staged(spec) as view:
        assert staging.recover_all(tmp_path / "runs") == 0  # this process owns it: a concurrent session
        assert (view.spec.workspace / "notes.txt").exists()


def test_a_kill_9_harness_leaves_a_stage_the_next_session_brings_home(tmp_path, mechanism):
    code_file = tmp_path / "agent-code.py"
    code_file.write_text("open('progress.txt', 'w').write('half done'); import time; time.sleep(300)")
    harness = ("import sys; from pathlib import Path; from tests.sandbox.conftest import run_agent; "
               "run_agent(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]).read_text(), time_limit=300)")
    proc = subprocess.Popen([sys.executable, "-c", harness, str(tmp_path), mechanism, str(code_file)], cwd=REPO,
                            start_new_session=True)
    run = tmp_path / "run"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if (run / "stage.json").exists():
                stage = Path(json.loads((run / "stage.json").read_text())["stage"])
                if (stage / "workspace" / "progress.txt").exists():
                    break
            time.sleep(0.2)
        else:
            pytest.fail("the agent never wrote into its stage")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    time.sleep(1)  # the agent dies with its harness (pdeathsig, die-with-parent)
    assert not (run / "workspace").exists() and (run / "stage.json").exists()
    assert staging.recover(run) is True
    assert (run / "workspace" / "progress.txt").read_text() == "half done"
    if os.geteuid() == 0:  # the dead run's uid (a later run may get it) owns nothing of it any more
        assert all(p.lstat().st_uid == 0 for p in [run / "workspace", *(run / "workspace").rglob("*")])
    assert (run / "submission").is_dir() and not (run / "stage.json").exists() and not stage.exists()


def test_session_start_up_recovers_every_dead_stage_in_the_runs_folder(tmp_path):
    """``recover_all`` (called by the plugin's start-up sweep) finds runs/<task>/<agent>/<stamp>/stage.json."""
    spec = _spec(tmp_path)
    dying = ("import os, signal, sys; from pathlib import Path; from pytest_rexmle.runtime import staging; "
             "from tests.sandbox.test_staging import _spec\n"
             "with staging.staged(_spec(Path(sys.argv[1]))) as view:\n"
             "    (view.spec.workspace / 'late.txt').write_text('kept')\n"
             "    os.kill(os.getpid(), signal.SIGKILL)")
    staging.remove_tree(tmp_path / "runs")
    staging.remove_tree(tmp_path / "data")
    proc = subprocess.run([sys.executable, "-c", dying, str(tmp_path)], cwd=REPO)
    assert proc.returncode == -signal.SIGKILL
    assert not spec.workspace.exists()
    assert staging.recover_all(tmp_path / "runs") == 1
    assert (spec.workspace / "late.txt").read_text() == "kept" and (spec.workspace / "notes.txt").exists()
    assert staging.recover_all(tmp_path / "runs") == 0
