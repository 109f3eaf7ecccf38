"""The CI cluster's accounting database password (issue 23.7): random, root-only, never in the repository.

An agent that escaped to the host once read the password from ``.ci/slurm-setup.sh`` and opened
MariaDB. The script now makes a random one at set-up time, keeps it 0600 in
``/etc/slurm/rexmle-slurmdbd.secret`` and gives it to MariaDB on stdin; re-running it keeps the secret
and leaves the running daemons alone. The cluster is shared by everything on this machine, so the
re-run uses the cluster's own settings (its placeholder GPU count) and must leave it as it found it.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / ".ci" / "slurm-setup.sh"
SECRET = Path("/etc/slurm/rexmle-slurmdbd.secret")
DBD_CONF = Path("/etc/slurm/slurmdbd.conf")
OLD_PASSWORD = "rexmle-" + "slurmdbd"  # what the repository used to hold


def test_script_holds_no_password():
    text = SCRIPT.read_text()
    assert not re.search(re.escape(OLD_PASSWORD) + r"(?!\.secret)", text)  # the secret's file name only
    assert re.search(r"^StoragePass=\$\{db_pass\}$", text, re.MULTILINE)
    assert "IDENTIFIED BY '${db_pass}'" in text and 'mariadb -e "CREATE USER' not in text  # stdin, not argv


@pytest.fixture
def cluster_as_root(needs_slurm):
    if os.geteuid() != 0 or not SECRET.exists():
        pytest.skip("needs root and a cluster set up by this version of .ci/slurm-setup.sh")


def _pid(name: str) -> str:
    return subprocess.run(["pgrep", "-x", name], capture_output=True, text=True).stdout.strip()


def test_secret_is_random_root_only_and_used(cluster_as_root):
    st = SECRET.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == 0
    password = SECRET.read_text()
    assert re.fullmatch(r"[A-Za-z0-9]{40}", password)
    conf = DBD_CONF.read_text()
    assert f"StoragePass={password}\n" in conf and stat.S_IMODE(DBD_CONF.stat().st_mode) == 0o600
    if shutil.which("mariadb"):
        old = subprocess.run(["mariadb", "-u", "slurm", f"-p{OLD_PASSWORD}", "-h", "127.0.0.1", "-e", "select 1"],
                             capture_output=True, text=True, timeout=30)
        assert old.returncode != 0 and "Access denied" in old.stderr


def test_rerun_keeps_secret_and_daemons(cluster_as_root):
    gres = Path("/etc/slurm/gres.conf")
    fake_gpus = sum(line.startswith("Name=gpu") for line in gres.read_text().splitlines()) if gres.exists() else 0
    before = SECRET.read_text(), _pid("slurmdbd"), _pid("slurmctld"), _pid("slurmd")
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "REXMLE_SLURM_FAKE_GPUS": str(fake_gpus)})
    assert done.returncode == 0, done.stderr
    assert (SECRET.read_text(), _pid("slurmdbd"), _pid("slurmctld"), _pid("slurmd")) == before
    assert subprocess.run(["sacct", "-n", "-X", "-S", "now-1hours"], capture_output=True, timeout=60).returncode == 0
