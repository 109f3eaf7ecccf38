"""Synthetic answers come from a per-cache secret unless a seed is pinned; the resume key knows which."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_rexmle.data.synthetic import ensure_synthetic, generate
from pytest_rexmle.data.synthetic.secret import SECRET_BYTES, SecretError, cache_secret
from pytest_rexmle.task import registry

TASK = "ldct-iqa"


def answers(data) -> str:
    return (data.private / "answers.csv").read_text()


def test_twins_differ_between_caches_and_match_with_a_pinned_seed(tmp_path):
    task = registry().get(TASK)
    one, two = ensure_synthetic(task, tmp_path / "a"), ensure_synthetic(task, tmp_path / "b")
    assert answers(one) != answers(two)
    assert one.answers_id != two.answers_id and one.answers_id.startswith("secret-")
    assert ensure_synthetic(task, tmp_path / "a").root == one.root  # cached, same secret
    pinned = [ensure_synthetic(task, tmp_path / c, seed=7) for c in ("a", "b")]
    assert answers(pinned[0]) == answers(pinned[1]) and pinned[0].answers_id == "seed-7"


def test_the_importable_generator_without_the_secret_misses_the_answers(tmp_path):
    """What an agent inside the sandbox can do: import the generator and try seeds."""
    task = registry().get(TASK)
    secret_keyed = answers(ensure_synthetic(task, tmp_path / "cache"))
    for seed in range(4):
        assert answers(generate(task, tmp_path / f"guess{seed}", seed=seed)) != secret_keyed


def test_the_secret_is_private_and_created_once(tmp_path):
    cache = tmp_path / "cache"
    code = ("import sys; from pathlib import Path; from pytest_rexmle.data.synthetic.secret import cache_secret; "
            "print(cache_secret(Path(sys.argv[1])).hex())")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(cache)], stdout=subprocess.PIPE, text=True)
             for _ in range(6)]
    seen = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert len(seen) == 1 and len(bytes.fromhex(seen.pop())) == SECRET_BYTES
    st = os.lstat(cache / ".secret")
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.getuid()
    assert sorted(os.listdir(cache)) == [".secret"]  # no temporary file left behind


def test_a_readable_or_linked_secret_is_refused(tmp_path):
    cache = tmp_path / "cache"
    cache_secret(cache)
    os.chmod(cache / ".secret", 0o644)
    with pytest.raises(SecretError, match="mode 0600"):
        cache_secret(cache)
    (cache / ".secret").unlink()
    (cache / ".secret").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(SecretError):
        cache_secret(cache)


def test_private_answers_are_not_world_readable(tmp_path):
    data = ensure_synthetic(registry().get(TASK), tmp_path / "cache")
    assert stat.S_IMODE(os.stat(data.private).st_mode) == 0o700
    # the task folder is traversable: a root harness's agent uid reads public/ beside it (Landlock)
    assert stat.S_IMODE(os.stat(data.private.parent).st_mode) == 0o755


def test_the_run_key_names_the_answers_and_the_settings(tmp_path):
    from pytest_rexmle.agents import get_agent
    from pytest_rexmle.run.launch import run_key
    from pytest_rexmle.settings import Settings

    task = registry().get(TASK)
    agent = get_agent("sample")
    secret_twin = ensure_synthetic(task, tmp_path / "c")
    seeded = ensure_synthetic(task, tmp_path / "c", seed=1)
    assert run_key(task, agent, secret_twin, 60, "local") != run_key(task, agent, seeded, 60, "local")

    def settings(**kw) -> Settings:
        base = dict(agent="sample", agent_options={}, data="synthetic", data_dir=Path("."), runtime="local",
                    time_limit=None, runs_dir=Path("r"), report_dir=Path("p"), min_percentile=0.0, resume=True,
                    unsafe_local=False, seed=1)
        return Settings(**{**base, **kw})

    key = run_key(task, agent, seeded, 60, "local", settings())
    assert key["settings"]["seed"] == 1 and key["settings"]["answers_reproducible"] is True
    assert key == run_key(task, agent, seeded, 60, "local", settings(min_percentile=0.5, judge="none"))
    assert key != run_key(task, agent, seeded, 60, "local", settings(network="none"))
