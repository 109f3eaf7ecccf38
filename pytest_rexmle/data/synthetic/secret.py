"""The per-cache secret that synthetic answers are generated from.

The twin generators are ordinary, importable, deterministic code, and an agent can import them inside
its sandbox. Seeded by a small public number, an agent rebuilds the private answers by trying seeds until
the public files match, and scores 100 % on every task. So, unless the user pins ``--rexmle-seed``, each
twin's random stream is keyed by 32 random bytes kept in the cache (``<cache>/synthetic/.secret``, mode
0600), a folder no sandbox mounts: the generator without the secret cannot reproduce the answers.

Pinning a seed trades this away for reproducibility across machines; the session report then says
``"answers_reproducible": true``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

from ...errors import RexmleError

SECRET_FILE = ".secret"
SECRET_BYTES = 32


class SecretError(RexmleError):
    """The cache's secret exists but is not a private 32-byte file of this user."""


def cache_secret(cache_dir: Path, name: str = SECRET_FILE) -> bytes:
    """The cache's secret, created on first use atomically (two workers never end up with two secrets).

    ``name`` picks another secret of the same kind in the cache (the results' seal key, for one).

    A new secret is written to a private temporary file and hard-linked into place; ``link`` fails if
    another process got there first, and then that process's secret is read.
    """
    path = cache_dir / name
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cache_dir / f"{name}.{os.getpid()}.{secrets.token_hex(6)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, secrets.token_bytes(SECRET_BYTES))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    return _read(path)


def _read(path: Path) -> bytes:
    st = os.lstat(path)  # FileNotFoundError: not created yet
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise SecretError(f"{path} must be a regular file of this user readable by no one else (mode 0600); "
                          "remove it to get a new secret (cached synthetic twins are then regenerated)")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        data = os.read(fd, SECRET_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) != SECRET_BYTES:
        raise SecretError(f"{path} must hold exactly {SECRET_BYTES} bytes; remove it to get a new secret")
    return data


def secret_id(secret: bytes) -> str:
    """A public name for a secret (folder names, resume keys): a hash, which does not reveal it."""
    return hashlib.sha256(b"rexmle-secret-id/" + secret).hexdigest()[:16]


def secret_seed(secret: bytes, task_id: str) -> int:
    """The 256-bit seed of one task's twin under ``secret`` (keyed, so one task's seed tells nothing of
    another's or of the secret)."""
    return int.from_bytes(hmac.new(secret, f"synthetic/{task_id}".encode(), hashlib.sha256).digest(), "little")
