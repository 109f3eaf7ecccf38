"""A competition is one folder: the toy of ``examples/competitions/toy`` copied into a copy of the repository's
tracked files, with no other file edited, is listed, prepared from a release and graded end to end.

The commands are the guide's own (docs/extending/competition.md, "Try it with the toy competition"), run as
written, so following the guide is what is tested.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import require_service

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "extending" / "competition.md"
TOY = "toy-fundus-cls"


def guide_commands(heading: str = "## Try it with the toy competition") -> str:
    """The first bash block of one section of the guide, its indentation removed."""
    section = GUIDE.read_text(encoding="utf-8").split(heading + "\n", 1)[1]
    match = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert match, f"{GUIDE}: no bash block in the section {heading!r}"
    return "\n".join(line.strip() for line in match.group(1).splitlines()) + "\n"


def guide_env(root: Path, cache: Path) -> dict[str, str]:
    """The guide's commands run with the copy's package and the interpreter running these tests."""
    env = {**os.environ, "PYTHONPATH": str(root), "REXMLE_CACHE_DIR": str(cache),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for name in ("REXMLE_COMPETITIONS_DIR", "REXMLE_DATA_DIR", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER"):
        env.pop(name, None)
    return env


def tracked_copy(dest: Path) -> list[str]:
    """The repository's tracked files (as they are in the working tree) copied to ``dest``."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    names = [n for n in listed.decode().split("\0") if n and (REPO / n).is_file()]
    for name in names:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest / name)
    return names


def digests(root: Path, names: list[str]) -> dict[str, str]:
    return {n: hashlib.sha256((root / n).read_bytes()).hexdigest() for n in names}


@pytest.fixture(scope="module")
def followed(tmp_path_factory) -> tuple[Path, list[str], str]:
    """The guide's commands run in a fresh copy of the checkout: (the copy, its tracked files, the output)."""
    if not (REPO / ".git").exists():
        pytest.skip("needs the source checkout (git ls-files)")
    # the guide's sample-agent run is sandboxed, as every run is
    require_service(shutil.which("bwrap") is not None, "REXMLE_REQUIRE_SANDBOX", "bubblewrap (bwrap)")
    root = tmp_path_factory.mktemp("checkout")
    names = tracked_copy(root)
    assert not (root / "pytest_rexmle" / "competitions" / "toy").exists()
    before = digests(root, names)
    env = guide_env(root, tmp_path_factory.mktemp("cache"))
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", guide_commands()], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert digests(root, names) == before, "following the guide edited a file of the repository"
    return root, names, done.stdout


def test_the_toy_is_one_folder_and_nothing_else(followed):
    root, names, _ = followed
    toy = root / "pytest_rexmle" / "competitions" / "toy"
    added = sorted(str(p.relative_to(root)) for p in toy.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert added == sorted(f"pytest_rexmle/competitions/toy/{p.relative_to(REPO / 'examples/competitions/toy')}"
                           for p in (REPO / "examples" / "competitions" / "toy").rglob("*")
                           if p.is_file() and "__pycache__" not in p.parts)
    assert not any(n.startswith("pytest_rexmle/competitions/toy/") for n in names)


def test_listed_with_its_new_modality(followed):
    *_, out = followed
    assert re.search(r"^toy-fundus-cls\s+classification\s+fundus\s+Toy-Fundus$", out, re.MULTILINE), out
    # `rexmle info`: the source's SIGNATURES name the release file, not yet downloaded
    assert '"raw_parts": {"ToyFundus.zip": false}' in out


def test_graded_against_the_humans(followed):
    *_, out = followed
    grades = re.findall(r"^balanced_accuracy: (\S+) \(position (\d)\)\naccuracy: (\S+)\npercentile: (\S+)$", out,
                        re.MULTILINE)
    # the perfect submission, then the sample submission (every label 0: each class's recall is 1 and 0)
    assert grades[:2] == [("1.0", "1", "1.0", "100.0%"), ("0.5", "5", grades[1][2], "0.0%")], out
    assert 0.0 < float(grades[1][2]) < 1.0


def test_the_sample_agent_run_is_graded(followed):
    *_, out = followed
    assert re.search(r"^toy-fundus-cls\s+ok\s+balanced_accuracy=0\.5\s+0\.0%$", out, re.MULTILINE), out
    assert re.search(r"^=+ 1 passed, 20 deselected", out, re.MULTILINE), out


def test_prepared_from_a_release_archive(followed):
    root, _, out = followed
    assert re.search(rf"^{TOY}: prepared in \S+/data/{TOY} \(19 train / 5 test, ", out, re.MULTILINE), out


def test_the_grader_contract_holds_for_the_toy(followed, tmp_path):
    """The guide's "Test it" commands: the contract suite collects the toy from the registry and its grader's
    declared format, records the baseline's metrics, then checks them."""
    root, *_ = followed
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", guide_commands("## Test it")], cwd=root,
                          env=guide_env(root, tmp_path / "cache"), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    out = done.stdout
    assert "1 snapshot generated." in out and "1 snapshot passed." in out, out
    runs = re.findall(r"^=+ (\d+) passed, (\d+) deselected", out, re.MULTILINE)
    assert len(runs) == 2 and runs[0] == runs[1] and int(runs[0][0]) >= 15, out
    assert "failed" not in out


def test_a_competition_naming_another_in_its_task_is_refused(followed, tmp_path):
    """The task's competition is its folder: a grader of another competition is a clear TaskConfigError."""
    import yaml

    root, *_ = followed
    comps = tmp_path / "competitions"
    shutil.copytree(root / "pytest_rexmle" / "competitions" / "toy", comps / "toy")
    path = comps / "toy" / "tasks" / TOY / "task.yaml"
    data = yaml.safe_load(path.read_text())
    data["grader"] = "ldct:QualityScore"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(root), "REXMLE_COMPETITIONS_DIR": str(comps)}
    done = subprocess.run([sys.executable, "-m", "pytest_rexmle", "list"], env=env, cwd=root, capture_output=True,
                          text=True)
    assert done.returncode != 0
    assert f"{path}: field 'grader' names the competition 'ldct', but the task lives in the competition " \
           f"folder 'toy'" in done.stderr, done.stderr


@pytest.mark.parametrize("signatures", [
    '{"ToyFundus.zip": r"/labels\\.csv$"}',                       # a bare regex per file
    '{"ToyFundus.zip": (r"/labels\\.csv$", "the toy release")}',  # regexes not in a tuple of their own
])
def test_a_wrongly_shaped_signatures_is_a_clear_error(tmp_path, signatures):
    """``rexmle info`` on a competition whose SIGNATURES has another shape names source.py and the shape (it
    was a bare ``ValueError: too many values to unpack``)."""
    tracked_copy(tmp_path)
    toy = tmp_path / "pytest_rexmle" / "competitions" / "toy"
    shutil.copytree(REPO / "examples" / "competitions" / "toy", toy)
    (toy / "source.py").write_text(f"SIGNATURES = {signatures}\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "REXMLE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("REXMLE_COMPETITIONS_DIR", None)
    done = subprocess.run([sys.executable, "-m", "pytest_rexmle", "info", TOY], env=env, cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"{toy / 'source.py'}: SIGNATURES['ToyFundus.zip'] is " in done.stderr
    assert "must map each release file name to a pair (a tuple of member-path regexes, a description)" in done.stderr
