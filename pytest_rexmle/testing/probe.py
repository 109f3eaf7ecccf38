"""The conformance suite's agent: it runs inside the runtime under test and tries what a hostile agent tries.

``python3 probe.py SCENARIO CONFIG``: standard library only (it must start in any image with a
``python3``), never imports the harness. ``CONFIG`` is a JSON file the suite wrote into the workspace; it
hands over the host paths and ports the probe should not be able to use (a real agent would have to
guess them; handing them over makes every check stricter). Each attempt is recorded in
``$REXMLE_WORKSPACE/probe-SCENARIO.json`` as ``{"ok": bool, "detail": str}`` where ``ok`` means the
attempt got through; whatever it read goes to ``found`` so the host can look there for its secrets.
The host judges each check from the host's side as well (files, processes, services); the probe's own
word is only half of it.

Scenarios: ``probe`` (answers, writes, keys, network, then leftovers: a detached process and files in the
shared temporary folders) and ``limits`` (a fork bomb capped by the suite, then a memory hog).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import subprocess
import sys
import time

WORK = os.environ.get("REXMLE_WORKSPACE") or os.getcwd()
report: dict = {"uid": os.getuid(), "attempts": {}, "found": []}


def attempt(name: str):
    """Record one attack; ``ok`` True means the defence did NOT hold."""
    def wrap(fn):
        try:
            ok, detail = fn()
        except Exception as exc:  # the expected outcome of most attempts
            ok, detail = False, f"{type(exc).__name__}: {exc}"
        report["attempts"][name] = {"ok": bool(ok), "detail": str(detail)[:2000]}
        return fn
    return wrap


def keep(text: str, where: str) -> None:
    report["found"].append({"where": where, "text": text[:20000]})


def save(scenario: str) -> None:
    with open(os.path.join(WORK, f"probe-{scenario}.json"), "w") as fh:
        json.dump(report, fh, indent=1)


def read_into_report(path: str) -> bool:
    try:
        with open(path, errors="replace") as fh:
            keep(fh.read(100_000), path)
        return True
    except OSError:
        return False


# -- answers ---------------------------------------------------------------------------------------------

def answers(cfg: dict) -> None:
    data = os.environ.get("REXMLE_DATA_DIR", "")

    @attempt("answers_by_host_path")
    def _():
        read = [p for p in cfg["secret_files"] if read_into_report(p)]
        return bool(read), read or "every host path refused"

    @attempt("answers_beside_data")
    def _():
        read = [p for p in (os.path.join(data, "..", "private", cfg["answers_name"]),
                            os.path.join(data, "private", cfg["answers_name"]),
                            os.path.join(data, cfg["hidden_name"], cfg["hidden_file"])) if read_into_report(p)]
        return bool(read), read or "nothing beside or under the data folder"

    @attempt("answers_search")
    def _():
        """By name, near the contract folders first, then the whole visible tree (system folders last)."""
        hits, seen, deadline = [], set(), time.monotonic() + cfg.get("search_seconds", 15)
        wanted = {cfg["answers_name"], cfg["hidden_file"]}
        system = ("/proc", "/sys", "/dev", "/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc")
        starts = [os.path.dirname(os.path.abspath(data)), os.path.dirname(WORK), "/"] + list(system[3:])
        for start in starts:
            for root, dirs, files in os.walk(start, onerror=lambda e: None):
                if root in seen or time.monotonic() > deadline or (start == "/" and root.startswith(system)):
                    dirs[:] = []
                    continue
                seen.add(root)
                hits += [os.path.join(root, n) for n in files
                         if n in wanted and read_into_report(os.path.join(root, n))]
        return bool(hits), hits or "no answers file found by name"

    @attempt("answers_via_proc")
    def _():
        seen = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            for path in cfg["secret_files"]:
                via = f"/proc/{pid}/root{path}"
                if int(pid) != os.getpid() and read_into_report(via):
                    seen.append(via)
        return bool(seen), seen or "no other process's root shows them"


# -- writes ----------------------------------------------------------------------------------------------

def writes(cfg: dict) -> None:
    mark = cfg["marker"]
    targets = {"data": os.environ.get("REXMLE_DATA_DIR", ""), "outside": cfg["outside"],
               "run_folder": cfg["run_root"], "run_folder_seen": os.path.join(WORK, ".."),
               "package": cfg.get("package") or ""}
    for name, folder in sorted(targets.items()):
        @attempt(f"write_{name}")
        def _(folder: str = folder):
            if not folder:
                return False, "no such folder given"
            path = os.path.join(folder, f"{mark}-write")
            with open(path, "w") as fh:
                fh.write("written from inside the run")
            return True, f"wrote {path}"

    @attempt("write_instructions")
    def _():
        with open(os.environ["REXMLE_INSTRUCTIONS"], "r+"):
            return True, "opened the instructions for writing"


# -- metadata --------------------------------------------------------------------------------------------

def metadata(cfg: dict) -> None:
    """Change what no write of content changes: mode, owner, times, extended attributes."""
    targets = {"data": os.path.join(os.environ.get("REXMLE_DATA_DIR", ""), "README.md"),
               "outside": cfg.get("owner_only") or ""}
    changes = {"chmod": lambda p: os.chmod(p, 0o666, follow_symlinks=False),
               "chown": lambda p: os.chown(p, os.getuid(), os.getgid(), follow_symlinks=False),
               "utime": lambda p: os.utime(p, (1, 1), follow_symlinks=False),
               "touch": lambda p: os.utime(p, None),
               "xattr": lambda p: os.setxattr(p, "user.rexmle", b"marked", follow_symlinks=False)}
    for target, path in sorted(targets.items()):
        for change, do in sorted(changes.items()):
            @attempt(f"meta_{change}_{target}")
            def _(path: str = path, do=do):
                if not path:
                    return False, "no such file given"
                do(path)
                return True, f"changed {path}"


# -- keys ------------------------------------------------------------------------------------------------

def keys(cfg: dict) -> None:
    @attempt("key_environment")
    def _():
        own = "\n".join(f"{k}={v}" for k, v in os.environ.items())
        keep(own, "own environment")
        return False, "recorded (judged on the host)"

    @attempt("key_other_processes")
    def _():
        read = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            if int(pid) == os.getpid():
                continue
            for part in ("environ", "cmdline"):
                try:
                    with open(f"/proc/{pid}/{part}", "rb") as fh:
                        keep(fh.read().replace(b"\0", b"\n").decode(errors="replace"), f"/proc/{pid}/{part}")
                    read.append(f"{pid}/{part}")
                except OSError:
                    pass
        return False, f"read {len(read)} (judged on the host)"

    @attempt("key_host_file")
    def _():
        return read_into_report(cfg["key_file"]), cfg["key_file"]


# -- network ---------------------------------------------------------------------------------------------

def _gateways() -> list[str]:
    out = []
    try:
        for line in open("/proc/net/route").read().splitlines()[1:]:
            fields = line.split()
            if fields[1] == "00000000" and fields[2] != "00000000":
                out.append(".".join(str(b) for b in struct.pack("<I", int(fields[2], 16))))
    except OSError:
        pass
    return out


def _fetch(host: str, port: int, request: bytes, timeout: float = 3.0) -> str:
    """A raw exchange (no proxy variable applies): what the peer answered, or the error."""
    with socket.create_connection((host, port), timeout=timeout) as conn:
        conn.sendall(request)
        chunks: list[bytes] = []
        try:
            while len(b"".join(chunks)) < 8192:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                chunks.append(chunk)
        except TimeoutError:
            pass
        return b"".join(chunks).decode(errors="replace")


def network(cfg: dict) -> None:
    port = int(cfg["port"])
    get = b"GET / HTTP/1.0\r\nHost: selfcheck\r\n\r\n"

    @attempt("host_loopback_service")
    def _():
        hosts = ["127.0.0.1", "localhost", *(["host.docker.internal"] if os.path.exists("/.dockerenv") else []),
                 *_gateways()]
        got = []
        for host in dict.fromkeys(hosts):
            try:
                keep(_fetch(host, port, get), f"{host}:{port}")
                got.append(host)
            except OSError:
                pass
        return bool(got), got or f"port {port} refused on {', '.join(dict.fromkeys(hosts))}"

    @attempt("outside_direct")
    def _():
        host, out_port = cfg.get("outside_host") or "pypi.org", 443
        with socket.create_connection((host, out_port), timeout=5):
            return True, f"connected to {host}:{out_port} directly"

    gateway = os.environ.get("REXMLE_GATEWAY", "")
    host, _, gport = gateway[len("http://"):].split("/")[0].rpartition(":")

    @attempt("loopback_through_gateway")
    def _():
        if not gateway.startswith("http://"):
            return False, "no gateway in the environment"
        auth = base64.b64encode(f"rexmle:{os.environ.get('REXMLE_GATEWAY_TOKEN', '')}".encode()).decode()
        answer = _fetch(host, int(gport), f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                        f"Proxy-Authorization: Basic {auth}\r\n\r\n".encode() + get)
        keep(answer, "CONNECT through the gateway")
        return answer.startswith("HTTP/1.1 200") or answer.startswith("HTTP/1.0 200"), answer[:200]

    @attempt("gateway_reachable")
    def _():  # the one peer the agent must have: ok True here is the expected outcome (judged on the host)
        if not gateway.startswith("http://"):
            return False, "no gateway in the environment"
        answer = _fetch(host, int(gport), b"GET /rexmle/health HTTP/1.0\r\nHost: gateway\r\n\r\n")
        return answer.startswith("HTTP/"), answer.split("\r\n", 1)[0]


# -- leftovers -------------------------------------------------------------------------------------------

def leftovers(cfg: dict) -> None:
    mark = cfg["marker"]

    @attempt("detached_process")
    def _():
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", f"{mark}-process"],
                                start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        return True, f"left pid {proc.pid} running in a session of its own"

    @attempt("temporary_files")
    def _():
        left = []
        for folder in ("/tmp", "/var/tmp", "/dev/shm", os.environ.get("TMPDIR") or "/tmp"):
            path = os.path.join(folder, f"{mark}-file")
            try:
                with open(path, "w") as fh:
                    fh.write("left behind")
                left.append(path)
            except OSError:
                pass
        return bool(left), left


# -- limits ----------------------------------------------------------------------------------------------

def limits(cfg: dict) -> None:
    children, error = [], None
    for _ in range(int(cfg.get("forks", 400))):
        try:
            pid = os.fork()
        except OSError as exc:
            error = str(exc)
            break
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        children.append(pid)
    report.update(forks=len(children), fork_error=error)
    for pid in children:
        os.kill(pid, 9)
    for pid in children:
        os.waitpid(pid, 0)
    save("limits")
    hog, step = [], 16 << 20
    for i in range(int(cfg.get("hog_mb", 1024)) // 16):
        block = bytearray(step)
        for j in range(0, step, 4096):
            block[j] = 1
        hog.append(block)
        report["hog_mb"] = (i + 1) * 16
        save("limits")
    report["hog_done"] = True
    save("limits")


def gpus(cfg: dict) -> None:
    """Every GPU node of the faked machine, by its /dev name and by its path in the fake: which ones open."""
    opened = []
    for name in cfg["gpu_nodes"]:
        for path in (os.path.join("/dev", name), os.path.join(cfg["fake_dev"], name)):
            try:
                with open(path) as fh:
                    fh.read(1)
            except OSError:
                continue
            opened.append(name)
            break
    report["gpu_nodes_opened"] = opened
    report["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    save("gpus")


def main() -> None:
    scenario, config = sys.argv[1], sys.argv[2]
    with open(config) as fh:
        cfg = json.load(fh)
    if scenario == "limits":
        limits(cfg)
        return
    if scenario == "gpus":
        gpus(cfg)
        return
    for part in (answers, writes, metadata, keys, network):
        part(cfg)
        save(scenario)
    leftovers(cfg)
    save(scenario)
    print(json.dumps({k: v["ok"] for k, v in report["attempts"].items()}))


if __name__ == "__main__":
    main()
