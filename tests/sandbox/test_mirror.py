"""The mirror of the harness's Python for the agent's dedicated uid (runtime/sandbox/mirror.py).

Built for real from this machine's interpreter (hard links, so a few seconds) in world-traversable
folders under /tmp; the checks that switch uid need root, the Landlock run needs Landlock.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
import textwrap
from functools import partial
from pathlib import Path

import pytest

import pytest_rexmle
from pytest_rexmle.paths import cache_home, python_mirror_home
from pytest_rexmle.runtime.base import RunSpec
from pytest_rexmle.runtime.local import LocalRuntime
from pytest_rexmle.runtime.sandbox.elf import ElfError, is_elf, relocate_run_paths, run_paths
from pytest_rexmle.runtime.sandbox.identity import Identity, become, dedicated_identity, unreachable
from pytest_rexmle.runtime.sandbox.mirror import MARKER, MirrorUnavailable, Source, ensure, plan, prepare_home
from pytest_rexmle.runtime.sandbox.mirror_tree import TreeCopier
from pytest_rexmle.task import tasks_root

from .conftest import require_mechanism

NOBODY = Identity(65534, 65534)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="building for another uid and switching to it needs root")


def open_folder(prefix: str) -> Path:
    """A 0755 folder under /tmp (pytest's own tmp is 0700: the agent's uid could not enter it)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    folder.chmod(0o755)
    return folder


def source_for(who: Identity = NOBODY) -> Source:
    return plan(who, Path(pytest_rexmle.__file__).parent, tasks_root())


def as_uid(who: Identity, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, preexec_fn=partial(become, who), env={}, cwd="/", capture_output=True, text=True, timeout=120,
                          **kwargs)


@pytest.fixture(scope="module")
def home():
    folder = open_folder("rexmle-mirror-test-")
    yield folder / "mirrors"
    subprocess.run(["rm", "-rf", "--one-file-system", str(folder)], check=False)


@pytest.fixture(scope="module")
def built(home):
    if os.geteuid() != 0:
        pytest.skip("the mirror is for a root harness (it checks itself by running as the agent's uid)")
    return ensure(NOBODY, source_for(), home)


def test_mirror_is_built_once_and_reused(built, home):
    again = ensure(NOBODY, source_for(), home)
    assert again.root == built.root and again.built is False
    assert built.built is True and built.stats["linked"] > 1000
    assert [p.name for p in home.iterdir() if not p.name.startswith(".")] == [built.root.name]
    marker = json.loads((built.root / MARKER).read_text())
    assert marker["name"] == built.root.name and marker["source"]["version"] == sys.version.split()[0]


@needs_root
def test_mirrored_python_imports_numpy_and_the_package_as_the_agent_uid(built):
    code = ("import json, sys, numpy, SimpleITK, pytest_rexmle; "
            "maps = sorted({l.split()[-1] for l in open('/proc/self/maps') if '/' in l.split()[-1]}); "
            "print(json.dumps({'uid': __import__('os').getuid(), 'prefix': sys.prefix, 'exe': sys.executable, "
            "'maps': maps, 'numpy': numpy.__version__}))")
    done = as_uid(NOBODY, [str(built.python), "-c", code])
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["uid"] == 65534 and report["prefix"] == str(built.root / "venv")
    assert report["exe"] == str(built.python)
    libpython = [m for m in report["maps"] if "libpython" in m]
    assert libpython and all(m.startswith(str(built.root)) for m in libpython), libpython
    base = str(Path(sys.base_prefix).resolve())
    assert [m for m in report["maps"] if m.startswith(base + "/")] == []


@needs_root
def test_nothing_in_the_mirror_names_the_source_or_is_writable_or_setuid(built):
    base = Path(sys.base_prefix).resolve()
    bad, elf_checked = [], 0
    for folder, dirs, files in os.walk(built.root):
        if stat.S_IMODE(os.lstat(folder).st_mode) != 0o755:
            bad.append(("folder mode", folder))
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                if os.readlink(path).startswith(str(base) + "/"):
                    bad.append(("link into the source", path))
                continue
            if st.st_mode & (stat.S_ISUID | stat.S_ISGID | stat.S_IWGRP | stat.S_IWOTH) or st.st_uid == 65534:
                bad.append(("mode", path))
            if (".so" in name or name.startswith("python")) and is_elf(path):
                elf_checked += 1
                names = [e for rp in run_paths(Path(path).read_bytes()) for e in rp.entries]
                if any(e.startswith(str(base)) for e in names):
                    bad.append(("run path", path, names))
            elif name in ("pip", "pip3") and Path(path).read_bytes().startswith(b"#!" + str(base).encode()):
                bad.append(("#!", path))
    assert bad == []
    assert elf_checked > 10


def test_run_path_is_rewritten_relative_to_the_binary_and_never_longer(tmp_path):
    base = Path(sys.base_prefix).resolve()
    binary = Path(sys.executable).resolve()
    paths = [e for rp in run_paths(binary.read_bytes()) for e in rp.entries]
    if not any(e.startswith(str(base)) for e in paths):
        pytest.skip(f"{binary} has no run path into its installation ({paths})")
    copy = tmp_path / binary.name
    copy.write_bytes(binary.read_bytes())
    assert relocate_run_paths(copy, binary.parent, [base]) == [
        ":".join(f"$ORIGIN/{os.path.relpath(e, binary.parent)}" if e.startswith(str(base)) else e for e in paths)]
    assert [rp.value for rp in run_paths(copy.read_bytes())][0].startswith("$ORIGIN/")
    assert copy.stat().st_size == binary.stat().st_size
    deep = base.joinpath(*["d"] * 40)  # "$ORIGIN/../../...": longer than the absolute path
    again = tmp_path / "again"
    again.write_bytes(binary.read_bytes())
    with pytest.raises(ElfError, match="longer"):
        relocate_run_paths(again, deep, [base])
    assert again.read_bytes() == binary.read_bytes()


def test_tree_copier_carries_no_setuid_bit_or_agent_writable_file(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "lib" / "private").mkdir(parents=True)
    (src / "lib" / "private").chmod(0o700)
    files = {"plain": 0o644, "tool": 0o4755, "group_tool": 0o2755, "shared": 0o664, "open": 0o666}
    for name, mode in files.items():
        (src / "lib" / name).write_text(name)
        (src / "lib" / name).chmod(mode)
    (src / "lib" / "private" / "owned").write_text("agent's")
    agent = 65534 if os.geteuid() != 65534 else 65533  # never the harness's own uid
    if os.geteuid() == 0:
        os.chown(src / "lib" / "private" / "owned", agent, agent)
    os.symlink(src / "lib" / "plain", src / "lib" / "absolute")
    os.symlink("plain", src / "lib" / "relative")
    os.mkfifo(src / "lib" / "fifo")
    copier = TreeCopier(agent_uid=agent, relocate=lambda p: dst / p.relative_to(src) if src in p.parents else None)
    copier.mirror(src, dst)
    out = dst / "lib"
    assert stat.S_IMODE(out.stat().st_mode) == stat.S_IMODE((out / "private").stat().st_mode) == 0o755
    modes = {name: stat.S_IMODE((out / name).stat().st_mode) for name in files}
    assert modes == {"plain": 0o644, "tool": 0o755, "group_tool": 0o755, "shared": 0o644, "open": 0o644}
    same = {name: (out / name).stat().st_ino == (src / "lib" / name).stat().st_ino for name in files}
    assert same == {"plain": True, "tool": False, "group_tool": False, "shared": False, "open": False}
    owned = out / "private" / "owned"
    assert owned.read_text() == "agent's"
    if os.geteuid() == 0:  # the agent's own file: a copy the agent does not own, never a link it could write
        assert owned.stat().st_ino != (src / "lib" / "private" / "owned").stat().st_ino
        assert owned.stat().st_uid == 0
    assert os.readlink(out / "absolute") == str(out / "plain") and os.readlink(out / "relative") == "plain"
    assert not os.path.lexists(out / "fifo") and copier.stats["skipped"] == 1


def test_a_changed_interpreter_gets_a_new_key(tmp_path):
    base = tmp_path / "base"
    (base / "bin").mkdir(parents=True)
    binary = base / "bin" / "python3.11"
    binary.write_bytes(b"\x7fELF one")
    first = Source(base, binary, "3.11.7").name  # the key is computed from the file each time
    assert first == Source(base, binary, "3.11.7").name and first.startswith("py3.11-")
    os.utime(binary, ns=(1, 1))
    touched = Source(base, binary, "3.11.7").name
    assert touched != first
    binary.write_bytes(b"\x7fELF one, rebuilt and longer")
    os.utime(binary, ns=(1, 1))
    assert Source(base, binary, "3.11.7").name != touched
    assert Source(base, binary, "3.11.8").name != Source(base, binary, "3.11.7").name


@needs_root
def test_concurrent_builders_make_one_good_mirror_and_a_broken_one_is_rebuilt():
    folder = open_folder("rexmle-mirror-race-")
    home = folder / "mirrors"
    script = textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parents[2])!r})
        from tests.sandbox.test_mirror import NOBODY, source_for
        from pytest_rexmle.runtime.sandbox.mirror import ensure
        mirror = ensure(NOBODY, source_for(), Path({str(home)!r}))
        print(json.dumps({{"root": str(mirror.root), "built": mirror.built}}))
    """)
    try:
        procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for _ in range(3)]
        outs = [proc.communicate(timeout=300) for proc in procs]
        assert [p.returncode for p in procs] == [0, 0, 0], [err[-2000:] for _, err in outs]
        answers = [json.loads(out) for out, _ in outs]
        assert len({a["root"] for a in answers}) == 1
        assert sorted(a["built"] for a in answers) == [False, False, True]
        root = Path(answers[0]["root"])
        assert sorted(p.name for p in home.iterdir()) == sorted([root.name, f".{root.name}.lock"])
        # half-built (no marker) and a dead builder's leftovers: rebuilt, cleaned
        (root / MARKER).unlink()
        (home / f".build-{root.name}-dead").mkdir()
        again = ensure(NOBODY, source_for(), home)
        assert again.built is True and again.root == root and (root / MARKER).exists()
        assert sorted(p.name for p in home.iterdir()) == sorted([root.name, f".{root.name}.lock"])
        done = as_uid(NOBODY, [str(again.python), "-c", "import numpy, pytest_rexmle; print('ok')"])
        assert done.stdout.strip() == "ok", done.stderr[-2000:]
        # complete but no longer starting (its encodings package gone; unlinking the mirror's hard link
        # leaves the source alone): rebuilt as well
        encodings = root / "base" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "encodings"
        (encodings / "__init__.py").unlink()
        assert ensure(NOBODY, source_for(), home).built is True
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(folder)], check=False)


def test_mirror_home_must_be_safe_from_other_users():
    folder = open_folder("rexmle-mirror-home-")
    try:
        shared = folder / "shared"
        shared.mkdir()
        shared.chmod(0o777)  # world-writable without the sticky bit: anyone could swap our folder
        with pytest.raises(MirrorUnavailable, match="writable by other users"):
            prepare_home(shared / "mirrors")
        closed = folder / "closed"
        closed.mkdir(mode=0o700)
        with pytest.raises(MirrorUnavailable, match="cannot be traversed"):
            prepare_home(closed / "mirrors")
        if os.geteuid() == 0:
            squatted = folder / "squatted"
            squatted.mkdir(mode=0o755)
            os.chown(squatted, 65534, 65534)
            with pytest.raises(MirrorUnavailable, match="not a folder owned by root"):
                prepare_home(squatted)
        assert prepare_home(folder / "fine" / "mirrors") == folder / "fine" / "mirrors"
        assert stat.S_IMODE((folder / "fine").stat().st_mode) == 0o755
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(folder)], check=False)


def test_default_mirror_home_is_outside_the_cache_and_reachable(monkeypatch):
    """The default cache is under /root (0700) and holds the twins' secret: the mirror lives apart."""
    monkeypatch.delenv("REXMLE_PYTHON_MIRROR_DIR", raising=False)
    monkeypatch.delenv("REXMLE_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    home = python_mirror_home()
    assert home == Path("/var/cache/rexmle/python-mirror")
    assert cache_home() not in [home, *home.parents] and home not in cache_home().parents
    if os.geteuid() != 0:
        pytest.skip("creating the default mirror home needs root")
    assert prepare_home(home) == home
    assert unreachable(NOBODY, [home]) == []


@needs_root
def test_a_stage_the_uid_may_only_pass_through_is_reachable_for_entering_not_reading():
    """The run's stage is 0711: the agent enters it to its own folders but cannot list it."""
    stage = Path(tempfile.mkdtemp(prefix="rexmle-enter-", dir="/var/tmp"))
    try:
        os.chmod(stage, 0o711)
        assert unreachable(NOBODY, [stage]) == [stage]
        assert unreachable(NOBODY, [], enter=[stage]) == []
        os.chmod(stage, 0o700)
        assert unreachable(NOBODY, [], enter=[stage]) == [stage]
    finally:
        os.rmdir(stage)


@needs_root
def test_landlock_as_root_runs_the_agent_as_the_dedicated_uid(monkeypatch, home):
    require_mechanism("landlock")
    monkeypatch.setenv("REXMLE_PYTHON_MIRROR_DIR", str(home))
    base = open_folder("rexmle-mirror-run-")
    try:
        public, root = base / "data" / "public", base / "run"
        for folder in (public, root / "workspace", root / "submission", root / "logs"):
            folder.mkdir(parents=True)
            folder.chmod(0o755)
        (base / "data").chmod(0o755)
        (root / "instructions.md").write_text("do the task\n")
        (root / "workspace" / "agent.py").write_text(
            "import json, os, sys, numpy, pytest_rexmle\n"
            "print(json.dumps({'uid': os.getuid(), 'exe': sys.executable, 'path': os.environ['PATH']}))\n")
        spec = RunSpec("mirror-test", [sys.executable, "agent.py"], {}, public, root / "workspace",
                       root / "submission", root / "logs", root / "instructions.md", 60, network="none")
        outcome = LocalRuntime(sandbox="landlock").run(spec)
        stdout, stderr = outcome.stdout.read_text(), outcome.stderr.read_text()
        assert outcome.exit_code == 0, stderr[-3000:]
        report = json.loads(stdout.strip().splitlines()[-1])
        assert outcome.details["agent_uid"] != 0, outcome.details.get("agent_uid_reason")
        assert report["uid"] == 65534 == outcome.details["agent_uid"] == dedicated_identity().uid
        assert "agent_uid_reason" not in outcome.details
        if unreachable(NOBODY, [Path(sys.executable)]):  # this machine: Python under a 0700 /root
            mirror = outcome.details["python_mirror"]
            assert report["exe"].startswith(mirror + "/") and report["path"].startswith(mirror + "/")
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(base)], check=False)


@needs_root
def test_unreachable_run_folder_keeps_uid_0_and_says_why(tmp_path, monkeypatch, home):
    """pytest's tmp_path is 0700 root: the agent's uid cannot have its folders, so uid 0 — recorded."""
    require_mechanism("landlock")
    monkeypatch.setenv("REXMLE_PYTHON_MIRROR_DIR", str(home))
    public, root = tmp_path / "public", tmp_path / "run"
    for folder in (public, root / "workspace", root / "submission", root / "logs"):
        folder.mkdir(parents=True)
    (root / "instructions.md").write_text("x\n")
    spec = RunSpec("mirror-test", [sys.executable, "-c", "import os; print(os.getuid())"], {}, public,
                   root / "workspace", root / "submission", root / "logs", root / "instructions.md", 60)
    outcome = LocalRuntime(sandbox="landlock").run(spec)
    assert outcome.exit_code == 0, outcome.stderr.read_text()[-2000:]
    assert outcome.stdout.read_text().strip() == "0" and outcome.details["agent_uid"] == 0
    assert "cannot reach the run folder" in outcome.details["agent_uid_reason"]


@needs_root
def test_an_unreachable_package_and_task_registry_are_mirrored_too():
    """A checkout the agent's uid cannot enter (e.g. under /root): its package and tasks join the mirror,
    and the mirrored interpreter imports the package from there."""
    import shutil

    folder = open_folder("rexmle-mirror-roots-")
    try:
        closed = folder / "closed" / "checkout"
        shutil.copytree(Path(pytest_rexmle.__file__).parent, closed / "pytest_rexmle",
                        ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copytree(tasks_root(), closed / "tasks")
        (folder / "closed").chmod(0o700)
        source = plan(NOBODY, closed / "pytest_rexmle", closed / "tasks")
        assert source.package == closed / "pytest_rexmle" and source.tasks == closed / "tasks"
        mirror = ensure(NOBODY, source, folder / "mirrors")
        assert mirror.tasks_dir == mirror.root / "roots" / "1" / "tasks"
        assert sorted(p.name for p in mirror.tasks_dir.iterdir()) == sorted(p.name for p in tasks_root().iterdir())
        done = as_uid(NOBODY, [str(mirror.python), "-c", "import pytest_rexmle; print(pytest_rexmle.__file__)"])
        assert done.stdout.strip() == str(mirror.root / "roots" / "0" / "pytest_rexmle" / "__init__.py"), done.stderr
        # a change in the checkout is a new mirror
        (closed / "pytest_rexmle" / "__init__.py").write_text("# edited\n")
        assert plan(NOBODY, closed / "pytest_rexmle", closed / "tasks").name != mirror.root.name
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(folder)], check=False)
