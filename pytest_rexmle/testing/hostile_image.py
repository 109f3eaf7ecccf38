"""A small hostile image, built from this machine's system Python: what the ``interpreter`` check (and the
tests of issue #38's drop before exec) run through a runtime that runs imported images.

An image's own interpreter is hostile input: its ``python3`` may be replaced, or a genuine one may carry a
``.pth`` file in its site-packages (``python3 -I`` still runs them). Either runs :data:`EVIL` first: it
reports what the process observes (uid, capabilities, ``no_new_privs``, seccomp, rlimits) on a line of its
stdout starting with :data:`MARK`, then tries to set a file capability and the immutable flag in the
workspace and in ``/tmp``. The image is an unpacked root folder (``rexmle images import`` of a folder):
the interpreter, the C libraries it and its extension modules load (``ldd``), the standard library less
its tests and GUI, ``/bin/sh``. No Docker, no download.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

#: the line prefix of every report EVIL prints
MARK = "REXMLE-EVIL "
SYSTEM_PYTHON = "/usr/bin/python3"
#: where the hostile module lives in the image, and the replaced interpreter that runs only it
EVIL_MODULE = "/opt/rexmle-evil/rexmle_evil.py"
REPLACED = "/usr/local/bin/python3"
STDLIB_SKIPPED = frozenset({"test", "idlelib", "tkinter", "ensurepip", "lib2to3", "pydoc_data", "turtledemo",
                            "site-packages", "dist-packages", "__pycache__", "sitecustomize.py"})
FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_IMMUTABLE_FL, FS_APPEND_FL = 0x80086601, 0x40086602, 0x10, 0x20
#: the flags a dropped run cannot leave: immutable, append-only
STUCK = FS_IMMUTABLE_FL | FS_APPEND_FL

#: the attack and probe every hostile start runs: what the process observes, then what it manages to do
EVIL = r'''
import fcntl, json, os, struct

def status():
    wanted = ("Uid", "Gid", "CapEff", "CapPrm", "CapInh", "CapAmb", "NoNewPrivs", "Seccomp")
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in wanted:
                out[key] = value.split()[0]
    return out

def limits():
    out = {}
    with open("/proc/self/limits") as fh:
        for line in fh.read().splitlines()[1:]:
            out[line[:26].strip()] = line[26:47].strip()
    return out

def attempt(fn):
    try:
        fn()
        return "ok"
    except OSError as exc:
        return exc.strerror

def setcap(path):  # cap_setuid+ep, as `setcap cap_setuid+ep` writes it (VFS_CAP_REVISION_2)
    with open(path, "wb") as fh:
        fh.write(b"x")
    os.setxattr(path, "security.capability", struct.pack("<IIIII", 0x02000001, 1 << 7, 0, 0, 0))

def immutable(path):  # chattr +i
    fd = os.open(path, os.O_CREAT | os.O_RDONLY, 0o644)
    try:
        fcntl.ioctl(fd, 0x40086602, struct.pack("l", 0x10))  # FS_IOC_SETFLAGS, FS_IMMUTABLE_FL
    finally:
        os.close(fd)

here = str(os.getpid())
report = {"status": status(), "limits": limits()}
for folder in ("/rexmle/workspace", "/tmp"):
    if os.path.isdir(folder):
        report[f"setcap {folder}"] = attempt(lambda: setcap(f"{folder}/rootshell-{here}"))
        report[f"immutable {folder}"] = attempt(lambda: immutable(f"{folder}/stuck-{here}"))
print("REXMLE-EVIL " + json.dumps(report), flush=True)
'''


class NoSystemPython(RuntimeError):
    """This machine has no system Python to build the image from."""


def _describe(python: str) -> dict:
    code = ("import json, site, sys, sysconfig; print(json.dumps({'executable': sys.executable, "
            "'stdlib': sysconfig.get_paths()['stdlib'], 'site': site.getsitepackages()}))")
    try:
        done = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise NoSystemPython(f"{python} cannot run: {exc}") from None
    if done.returncode != 0:
        raise NoSystemPython(f"{python} failed: {done.stderr.strip()[-300:]}")
    return json.loads(done.stdout)


def _libraries(files: list[Path]) -> set[Path]:
    """Every shared library ``ldd`` names for ``files``, and the dynamic loader."""
    out: set[Path] = set()
    for chunk in range(0, len(files), 200):
        listing = subprocess.run(["ldd", *map(str, files[chunk:chunk + 200])], capture_output=True, text=True,
                                 timeout=120).stdout
        for line in listing.splitlines():
            words = line.split()
            if "=>" in words and len(words) > words.index("=>") + 1 and words[words.index("=>") + 1].startswith("/"):
                out.add(Path(words[words.index("=>") + 1]))
            elif words and words[0].startswith("/") and "ld-linux" in words[0]:
                out.add(Path(words[0]))
    return out


def _copy_file(source: Path, root: Path) -> None:
    """``source``'s content at the same path in ``root`` (its folder's links resolved as the host has them,
    the host's top-level links being mirrored)."""
    target = root / str(source.parent.resolve()).lstrip("/") / source.name
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists():
        shutil.copy2(source.resolve(), target)


def build_root(root: Path, *, replaced_python: bool, pth: bool, python: str = SYSTEM_PYTHON) -> Path:
    """A minimal image root at ``root``: the system Python, the libraries it loads, ``/bin/sh``, the attack
    module, and either a ``python3`` first on the image's PATH that runs only the attack (never the launcher)
    or a ``.pth`` in the site-packages that imports it."""
    info = _describe(python)
    executable, stdlib = Path(info["executable"]).resolve(), Path(info["stdlib"])
    root.mkdir(parents=True)
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        if Path(f"/{top}").is_symlink():
            (root / top).symlink_to(os.readlink(f"/{top}"))
    for folder in ("etc", "tmp", "var/tmp", "root", "usr/bin", "usr/local/bin"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    shutil.copytree(stdlib, root / str(stdlib).lstrip("/"), symlinks=True,
                    ignore=lambda folder, names: [n for n in names if n in STDLIB_SKIPPED])
    sh = Path("/bin/sh").resolve()
    extensions = list((stdlib / "lib-dynload").glob("*.so"))
    for path in (executable, sh, *_libraries([executable, sh, *extensions])):
        _copy_file(path, root)
    python3 = root / str(executable.parent).lstrip("/") / "python3"
    if not python3.exists():
        python3.symlink_to(executable.name)
    shell = root / "bin/sh"
    shell.parent.mkdir(parents=True, exist_ok=True)
    if not shell.exists():
        shell.symlink_to(sh)
    evil = root / EVIL_MODULE.lstrip("/")
    evil.parent.mkdir(parents=True)
    evil.write_text(EVIL)
    if pth:
        site = root / str(info["site"][0]).lstrip("/")
        site.mkdir(parents=True, exist_ok=True)
        (site / "zz-evil.pth").write_text(f"import sys; sys.path.append({os.path.dirname(EVIL_MODULE)!r}); "
                                          "import rexmle_evil\n")
    if replaced_python:  # first on the image's PATH: what the launcher starts, running only the attack
        hostile = root / REPLACED.lstrip("/")
        hostile.write_text(f"#!/bin/sh\nexec {executable} -I -S {EVIL_MODULE}\n")
        hostile.chmod(0o755)
    return root


def reports(stdout: str) -> list[dict]:
    """Every report the hostile code printed."""
    return [json.loads(line[len(MARK):]) for line in stdout.splitlines() if line.startswith(MARK)]


def problems(found: list[dict], agent_uid: int, limits: dict, harness_root: bool) -> list[str]:
    """What a hostile start observed or did that a dropped run must not allow: not the run's uid, a
    capability, no ``no_new_privs`` or seccomp filter, an rlimit other than ``run.json``'s, an attack done."""
    out = []
    for number, report in enumerate(found, 1):
        status = report["status"]
        where = f"start {number}"
        if status.get("Uid") != str(agent_uid) or status.get("Gid") != str(agent_uid) or (harness_root and agent_uid == 0):
            out.append(f"{where} ran as uid {status.get('Uid')} gid {status.get('Gid')}, run.json says {agent_uid}")
        held = [f"{k} {status.get(k)}" for k in ("CapEff", "CapPrm", "CapInh", "CapAmb")
                if status.get(k) != "0000000000000000"]
        if held:
            out.append(f"{where} held capabilities: {', '.join(held)}")
        if status.get("NoNewPrivs") != "1" or status.get("Seccomp") != "2":
            out.append(f"{where}: NoNewPrivs {status.get('NoNewPrivs')}, Seccomp {status.get('Seccomp')}")
        for name, row in (("open_files", "Max open files"), ("file_size", "Max file size")):
            if limits.get(name) is not None and report["limits"].get(row) != str(limits[name]):
                out.append(f"{where}: {row} {report['limits'].get(row)}, run.json says {limits[name]}")
        out += [f"{where}: {attack} succeeded" for attack, result in report.items()
                if attack.startswith(("setcap ", "immutable ")) and result == "ok"]
    return out


def left_behind(folder: Path) -> list[str]:
    """Files under ``folder`` with a file capability (what ``getcap -r`` lists) or the immutable or
    append-only flag (``lsattr``), which a dropped run cannot leave."""
    out = []
    for path in _entries(folder):
        try:
            os.getxattr(path, "security.capability", follow_symlinks=False)
            out.append(f"{path} (file capability)")
        except OSError:
            pass
        if _flags(path) & STUCK:
            out.append(f"{path} (immutable or append-only)")
    return out


def _entries(folder: Path) -> Iterator[str]:
    """Every path under ``folder`` but the links (whose flags would be their targets')."""
    for dirpath, dirs, files in os.walk(folder):
        for name in dirs + files:
            if not os.path.islink(path := os.path.join(dirpath, name)):
                yield path


def _flags(path: str) -> int:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return 0
    try:
        return struct.unpack("l", fcntl.ioctl(fd, FS_IOC_GETFLAGS, struct.pack("l", 0)))[0]
    except OSError:
        return 0
    finally:
        os.close(fd)


def clear_flags(folder: Path) -> None:
    """Take the immutable and append-only flags off every file under ``folder`` (root only: what a runtime
    that failed the check let the agent set would otherwise keep the check-up's folder from going)."""
    for path in _entries(folder):
        if (flags := _flags(path)) & STUCK:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("l", flags & ~STUCK))
            except OSError:
                pass
            finally:
                os.close(fd)
