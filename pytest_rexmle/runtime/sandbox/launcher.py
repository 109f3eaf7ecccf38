"""The agent's first process: drops every privilege, applies limits and filters, then runs the agent.

Started by the harness as ``python -I -c '<import this module>; main(sys.argv)' FD``; its whole
configuration arrives as JSON on file descriptor FD, so no host path of the run ever appears in a
command line (``/proc/*/cmdline`` is world-readable).

Two modes:
* ``exec`` (inside bubblewrap, whose PID namespace already ends every process with its init): drop
  privileges, set rlimits, install seccomp, ``execve`` the agent.
* ``supervise`` (Landlock, no namespaces): this process becomes a *child subreaper*, so every process
  the agent starts — double-forked, new session or not — is re-parented to it and never escapes. It
  forks the agent (privilege drop, rlimits, Landlock, seccomp, exec), reaps, and on its own exit or
  on SIGTERM from the harness kills every remaining descendant before exiting. It stays outside the
  agent's Landlock domain and (as root) under another uid, so the agent can neither signal nor trace it.
Exit status: the agent's exit code, or 128+signal when a signal ended it.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from contextlib import suppress

from .identity import Identity, drop_privileges
from .limits import apply_rlimits
from .seccomp import build_filter, install
from .uids import kill_until_gone

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _confine(config: dict, ruleset=None) -> None:
    """Everything that must hold before the agent's code runs, in an order that keeps each step possible."""
    drop_privileges(Identity(config["uid"], config["gid"]))
    apply_rlimits({int(k): v for k, v in config["rlimits"].items()})
    if config.get("pdeathsig"):
        _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if ruleset is not None:
        ruleset.restrict()
        ruleset.close()
    install(build_filter(network=config.get("seccomp_network") or config["network"],
                         deny_unix_sockets=config.get("deny_unix_sockets", False)))


def _exec(config: dict) -> None:
    os.chdir(config["cwd"])
    os.umask(0o022)
    argv = config["argv"]
    env = config["env"]
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        print(f"rexmle launcher: cannot run {argv[0]!r}: {exc}", file=sys.stderr, flush=True)
        os._exit(127)


def _open_gateway(config: dict) -> None:
    """``network: gateway``: the listener the harness serves, made while this process is still trusted."""
    if not config.get("gateway"):
        return
    from .gateway_net import open_in_sandbox  # start-up: the launcher loads only what the sandbox it sets up needs

    try:
        open_in_sandbox(config["gateway"])
    except (OSError, RuntimeError) as exc:  # the harness sees the channel close and stops the run
        print(f"rexmle launcher: cannot make the gateway listener: {exc}", file=sys.stderr, flush=True)
        os._exit(125)


def run_exec(config: dict) -> None:
    _open_gateway(config)
    _confine(config)
    _exec(config)


# -- supervise ---------------------------------------------------------------------------------------
def _children_of(root: int) -> list[int]:
    """Every live descendant of ``root`` (from /proc, one pass; callers repeat until none is left)."""
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        parents.setdefault(ppid, []).append(int(name))
    out, stack = [], [root]
    while stack:
        for child in parents.get(stack.pop(), []):
            out.append(child)
            stack.append(child)
    return out


def _reap_all() -> None:
    with suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _status_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status)


class _Stop(Exception):
    """SIGTERM/SIGINT from the harness: end the run."""


def run_supervised(config: dict) -> None:
    from .landlock import LandlockView, prepare  # start-up: the launcher loads only what the sandbox it sets up needs

    me = os.getpid()
    if _libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    stop = {"signal": None}

    def on_term(signum, _frame):
        stop["signal"] = signum
        raise _Stop  # leaves waitpid, which PEP 475 would otherwise restart

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    # the harness died (even kill -9): SIGTERM, so the handler below still ends the agent's whole tree
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != config.get("parent", os.getppid()):  # the harness died before PDEATHSIG was armed
        os._exit(137)
    code = None
    try:
        # before the ruleset: a new user namespace (unprivileged harness) must precede opening its paths
        _open_gateway(config)
        ruleset = prepare(LandlockView.from_json(config["landlock"]))
        child = os.fork()
        if child == 0:
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.setsid()
                _confine(config, ruleset)
            except BaseException as exc:  # never fall through into the supervisor's loop
                print(f"rexmle launcher: cannot confine the agent: {exc}", file=sys.stderr, flush=True)
                os._exit(126)
            _exec(config)
        ruleset.close()
        while code is None:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            if pid == child:
                code = _status_code(status)
    except _Stop:
        pass
    finally:  # whatever ended the wait, nothing the agent started outlives the supervisor
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        kill_until_gone(lambda: _children_of(me), 10.0, _reap_all)
    if code is None:
        code = 128 + (stop["signal"] or signal.SIGKILL)
    sys.stdout.flush()
    os._exit(code)


def main(argv: list[str]) -> None:
    fd = int(argv[1])
    with os.fdopen(fd, "rb") as fh:
        config = json.loads(fh.read())
    if config["mode"] == "supervise":
        run_supervised(config)
    else:
        run_exec(config)


if __name__ == "__main__":
    main(sys.argv)
