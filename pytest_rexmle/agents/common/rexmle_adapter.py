"""Shared helpers of the agent start scripts (copied into every agent image as /opt/rexmle-agent/).

A start script maps the ReX-MLE contract (REXMLE_* variables, see the README) onto one agent's own CLI:
it writes the agent a task description (the challenge's description.md + the harness instructions +
a note on where that agent must leave its predictions), runs the agent under a deadline a little
shorter than the harness's hard limit, and then copies the agent's best submission (the CSV and every
prediction file it refers to) into $REXMLE_SUBMISSION_DIR, which is all the harness grades.

Standard library only: it runs in whatever Python the agent image has.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

STARTED = time.monotonic()


@dataclass(frozen=True)
class Contract:
    task: str
    data: Path
    workspace: Path
    submission: Path
    instructions: Path
    time_limit: float

    @classmethod
    def from_env(cls) -> Contract:
        env = os.environ
        return cls(env["REXMLE_TASK"], Path(env["REXMLE_DATA_DIR"]), Path(env["REXMLE_WORKSPACE"]),
                   Path(env["REXMLE_SUBMISSION_DIR"]), Path(env["REXMLE_INSTRUCTIONS"]),
                   float(env.get("REXMLE_TIME_LIMIT") or 86400))

    def remaining(self) -> float:
        return self.time_limit - (time.monotonic() - STARTED)

    def agent_budget(self) -> float:
        """The time left, less a reserve for extracting the submission before the hard kill."""
        return max(1.0, self.remaining() - min(900.0, max(15.0, 0.1 * self.time_limit)))


def parse(argv: list[str], flags: dict[str, str | int]) -> argparse.Namespace:
    """The start script's ``flags`` as its host-side adapter passes them: ``--<name>`` (dashes for
    underscores), typed and defaulted by the value given (``""`` or ``0``: unset)."""
    p = argparse.ArgumentParser(description="Start the agent under the ReX-MLE contract")
    for name, default in flags.items():
        p.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    return p.parse_args(argv)


def log(message: str) -> None:
    print(f"[rexmle-adapter] {message}", file=sys.stderr, flush=True)


def task_description(contract: Contract, where_to_write: str) -> str:
    """The prompt text: the organisers' description, the harness instructions, the adapter's note."""
    parts = []
    description = contract.data / "description.md"
    if description.is_file():
        parts.append(description.read_text(encoding="utf-8", errors="replace"))
    if contract.instructions.is_file():
        parts.append(contract.instructions.read_text(encoding="utf-8", errors="replace"))
    parts.append("## Where your program must write its predictions\n" + where_to_write.strip() + "\n")
    return "\n\n".join(parts)


def write_description(contract: Contract, folder: Path, where_to_write: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "task_description.md"
    path.write_text(task_description(contract, where_to_write), encoding="utf-8")
    return path


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    """The API-key values of the environment (long enough to be keys, not flags)."""
    env = os.environ if environ is None else environ
    return [v for v in (env.get(k, "") for k in SECRET_VARIABLES) if len(v) >= 8]


def _relay(source, sink, secrets: list[bytes], copy=None) -> None:
    """Copy the agent's output line by line, every key replaced by ``***`` (agents log their settings);
    ``copy`` (a binary file) also gets every line, for start scripts that read the agent's own report."""
    for line in iter(source.readline, b""):
        for value in secrets:
            line = line.replace(value, b"***")
        sink.write(line)
        sink.flush()
        if copy is not None:
            copy.write(line)
            copy.flush()
    source.close()


def run_with_deadline(argv: list[str], seconds: float, cwd: Path, env: dict[str, str] | None = None,
                      stdout_copy: Path | None = None) -> int | None:
    """Run the agent in its own process group; at the deadline interrupt it, then kill it. None: deadline hit.

    Its stdout/stderr reach ours (the harness's log files) through a relay that masks API keys;
    ``stdout_copy`` also receives its (masked) stdout, e.g. a CLI's JSON event stream.
    """
    log(f"starting {Path(argv[0]).name} with a budget of {seconds:.0f} s")
    secrets = [v.encode() for v in secret_values(env)]
    proc = subprocess.Popen(argv, cwd=str(cwd), env=env, start_new_session=True, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    copy = open(stdout_copy, "wb") if stdout_copy is not None else None
    relays = [threading.Thread(target=_relay, args=(pipe, sink, secrets, extra), daemon=True)
              for pipe, sink, extra in ((proc.stdout, sys.stdout.buffer, copy), (proc.stderr, sys.stderr.buffer, None))]
    for relay in relays:
        relay.start()
    try:
        return proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        log("agent budget used up: interrupting it to collect its best submission")
        for sig, grace in ((signal.SIGINT, 20.0), (signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue
        return None
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for relay in relays:  # a grandchild may keep a pipe open: do not wait for it forever
            relay.join(timeout=5)
        if copy is not None:
            copy.close()


def export_submission(csv_path: Path, submission_dir: Path, files_base: Path | None = None) -> bool:
    """Copy ``csv_path`` as submission.csv plus the files it refers to (relative paths in its cells that
    name files under ``files_base``, default: next to the CSV); False when there is nothing to copy."""
    if not csv_path.is_file():
        return False
    base = (files_base or csv_path.parent).resolve()
    try:
        with open(csv_path, newline="", encoding="utf-8", errors="replace") as fh:
            cells = {cell.strip() for row in list(csv.reader(fh))[1:] for cell in row}
    except OSError:
        cells = set()
    files = sorted(cell for cell in cells
                   if cell and not cell.startswith("/") and ".." not in Path(cell).parts
                   and (base / cell).is_file() and (base / cell).resolve().is_relative_to(base))
    submission_dir.mkdir(parents=True, exist_ok=True)
    for rel in files:
        dest = submission_dir / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(base / rel, dest)
    shutil.copy2(csv_path, submission_dir / "submission.csv")
    log(f"exported {csv_path} (+{len(files)} file(s)) to {submission_dir}")
    return True


def has_submission(submission_dir: Path) -> bool:
    return (submission_dir / "submission.csv").is_file()


def newest(paths: list[Path]) -> Path | None:
    existing = [p for p in paths if p.exists()]
    return max(existing, key=lambda p: p.stat().st_mtime) if existing else None


#: environment variables whose values must never be left in files the run folder keeps
SECRET_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENROUTER_API_KEY", "GEMINI_API_KEY",
                    "GOOGLE_API_KEY", "DEEPSEEK_API_KEY", "AZURE_OPENAI_API_KEY", "LITELLM_API_KEY")


def scrub_secrets(folder: Path, values: list[str] | None = None, limit_bytes: int = 20_000_000) -> int:
    """Replace API-key values (default: this environment's) in the agent's own logs/configs (some agents
    save their config or settings); the host-side adapter scrubs the copies it keeps with it too."""
    values = secret_values() if values is None else values
    if not values or not folder.is_dir():
        return 0
    changed = 0
    for path in folder.rglob("*"):
        try:
            if not path.is_file() or path.is_symlink() or path.stat().st_size > limit_bytes:
                continue
            data = path.read_bytes()
        except OSError:
            continue
        # ``***`` in text; in binary files (pickled logs) as many stars, so they still load
        binary = path.suffix in (".pkl", ".pickle") or b"\0" in data[:8192]
        new = data
        for value in values:
            new = new.replace(value.encode(), b"*" * len(value.encode()) if binary else b"***")
        if new != data:
            path.write_bytes(new)
            changed += 1
    return changed
