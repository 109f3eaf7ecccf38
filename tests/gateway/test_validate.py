"""``POST /rexmle/validate`` runs the harness's validator on the run's own submission, against public data
only, in a worker; ``validate_client.py`` (standard library only) is the agent's side of it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import open_served

CLIENT = Path(__file__).resolve().parents[2] / "pytest_rexmle" / "gateway" / "validate_client.py"


@pytest.fixture(scope="module")
def twin(tmp_path_factory) -> Path:
    from pytest_rexmle.data.synthetic import generate
    from pytest_rexmle.task import get_task

    out = tmp_path_factory.mktemp("twin")
    generate(get_task("ldct-iqa"), out, 7)
    return out


def _client(served, *args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], **served.run.environment(served.base), **(env_extra or {})}
    env.setdefault("REXMLE_SUBMISSION_DIR", str(served.run.submission_dir))
    # -I: isolated, no site-packages, no harness: the client must stand on the standard library alone
    return subprocess.run([sys.executable, "-I", str(CLIENT), *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_valid_and_invalid_submissions(gateway, tmp_path, twin):
    s = open_served(gateway, tmp_path, public_dir=twin / "public")
    done = _client(s)
    assert done.returncode == 1 and "INVALID" in done.stdout and "submission.csv" in done.stdout
    shutil.copy(twin / "public" / "sample_submission.csv", s.run.submission_dir / "submission.csv")
    done = _client(s, "--submission", str(s.run.submission_dir))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("OK: ") and "ldct-iqa" in done.stdout
    (s.run.submission_dir / "submission.csv").write_text("image_id,quality_score\n1000,not-a-number\n")
    done = _client(s, "--json")
    verdict = json.loads(done.stdout)
    assert done.returncode == 1 and verdict["ok"] is False and verdict["problems"]
    assert verdict["checked_against"].startswith("public data only")
    s.run.close()


def test_only_the_runs_own_folder_and_only_with_its_token(gateway, tmp_path, twin):
    s = open_served(gateway, tmp_path, public_dir=twin / "public")
    done = _client(s, "--submission", str(tmp_path))
    assert done.returncode == 1 and "validates only the run's submission folder" in done.stdout
    status, _, body = s.request("POST", "/rexmle/validate", {}, token="rexmle-someone-else")
    assert status == 401
    status, _, body = s.request("POST", "/rexmle/validate", {})
    assert status == 200 and json.loads(body)["ok"] is False
    s.run.close()


def test_validation_time_out(standin, tmp_path, twin):
    from .conftest import make_gateway

    gw = make_gateway(standin, validate_timeout=0.01)
    s = open_served(gw, tmp_path, public_dir=twin / "public")
    shutil.copy(twin / "public" / "sample_submission.csv", s.run.submission_dir / "submission.csv")
    status, _, body = s.request("POST", "/rexmle/validate", {})
    assert status == 200 and "did not finish within" in json.loads(body)["problems"][0]
    gw.close()


def test_client_without_gateway_says_so(tmp_path):
    done = subprocess.run([sys.executable, "-I", str(CLIENT)], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"]}, timeout=60)
    assert done.returncode == 1 and "REXMLE_VALIDATE_URL" in done.stderr


def test_staged_submission_is_found_and_old_command_line_accepted(gateway, tmp_path, twin):
    """While a run is staged its submission lives in the stage (stage.json says where); the client also
    takes the old ``rexmle validate --submission DIR --task T`` command line."""
    s = open_served(gateway, tmp_path, public_dir=twin / "public")
    stage = tmp_path / "stage"
    (stage / "submission").mkdir(parents=True)
    shutil.copy(twin / "public" / "sample_submission.csv", stage / "submission" / "submission.csv")
    s.run.submission_dir.rename(tmp_path / "moved-away")
    (s.run.logs_dir.parent / "stage.json").write_text(json.dumps({"stage": str(stage)}))
    done = _client(s, "validate", "--submission", str(stage / "submission"), "--task", "ldct-iqa",
                   env_extra={"REXMLE_SUBMISSION_DIR": str(stage / "submission")})
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("OK: ")
    s.run.close()


def test_a_header_unlike_the_inputs_is_valid_with_a_warning(gateway, tmp_path):
    """The organisers score the voxels of a prediction whose header differs; the
    agent's validation says valid and warns, as ``rexmle validate`` does."""
    import SimpleITK as sitk

    from pytest_rexmle.data.synthetic import generate
    from pytest_rexmle.graders.base import load_grader
    from pytest_rexmle.task import get_task

    task = get_task("isles22")
    twin = tmp_path / "twin"
    generate(task, twin, 7)
    s = open_served(gateway, tmp_path / "run", public_dir=twin / "public", task_id="isles22")
    load_grader(task).write_baseline(twin / "public", s.run.submission_dir)
    done = _client(s)
    assert done.returncode == 0 and "WARNING" not in done.stdout, done.stdout + done.stderr
    first = sorted(p for p in s.run.submission_dir.rglob("*.nii*"))[0]
    image = sitk.ReadImage(str(first))
    image.SetOrigin(tuple(o + d for o, d in zip(image.GetOrigin(), (0.2, 0.0, 0.0), strict=True)))
    sitk.WriteImage(image, str(first))
    done = _client(s)
    assert done.returncode == 0 and done.stdout.startswith("OK: "), done.stdout + done.stderr
    assert "WARNING: " in done.stdout and "origin" in done.stdout
    verdict = json.loads(_client(s, "--json").stdout)
    assert verdict["ok"] is True and len(verdict["warnings"]) == 1
    s.run.close()
