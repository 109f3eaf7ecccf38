"""``rexmle view RUN_DIR|SESSION`` and ``rexmle export atif SESSION``: reading runs, here and elsewhere.

``view`` serves a run's page (``run.html``, rendered from the run's records, never a page found in the
folder) on the host's loopback, with each call's whole record on demand, so a run of a gigabyte of
trajectory opens at once and its bodies load one at a time. Given a session's report folder (or the runs
folder), it serves the session's report and every run's page under ``/runs/<n>/``. Nothing is served
beyond those pages and records: no file of the run folder is reachable by path, and only a request that
names the server itself (``127.0.0.1:PORT``/``localhost:PORT``) is answered — DNS rebinding gets 421.

``export atif`` writes each run of a session as ATIF in the folder layout Harbor's tools read.

Both treat every folder below the one they are given as hostile (it may be downloaded): a report's
``run_dir`` is looked for only below the allowed runs folders, by its names; no symbolic link is followed
below the given folder; JSON is read bounded in size and depth; a task name must be a plain name before
it becomes a folder under ``--out``. A refusal is one line, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePosixPath
from urllib.parse import parse_qs, urlsplit

from ..agent_output import RefusedFile, clean_text, plain_name, read_json
from ..jsonfile import write_text_atomic
from .archive import REPORT_JSON
from .atif import export_session
from .harbor import export_job
from .runpage import RUN_HTML, call_record_text, render_run_page


def add_view_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", help="a run folder, a session's report folder, or the runs folder")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free one)")
    p.add_argument("--open", action="store_true", help="open the page in the default browser")
    p.add_argument("--no-serve", action="store_true", help="write run.html and print its path, serve nothing")
    _runs_argument(p)


def _runs_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", action="append", default=[], metavar="DIR",
                   help="a runs folder where a session report's runs are (default: the runs folder beside the "
                        "report's folder); repeatable")


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("format", choices=["atif", "harbor"],
                   help="atif: one trajectory.json per run (ATIF v1.7); harbor: a Harbor job folder")
    p.add_argument("target", help="a session's report folder, the runs folder, or one run folder")
    p.add_argument("--out", required=True, help="folder to write (atif: one <task>__<run>/agent/trajectory.json per "
                                                "run; harbor: Harbor's jobs folder, with one <job>/ in it)")
    _runs_argument(p)


#: what of a run folder these commands read by path: none of them (nor the folders above them, below the
#: given folder) may be a symbolic link, so a downloaded folder cannot point a read elsewhere
READ_ENTRIES = ("run.json", "result.json", "capability.json", "stages.json", "trajectory.atif.json", "logs",
                "logs/model-calls.jsonl", "submission", "workspace")
#: a run's run.json read whole (as the harness reads it)
MAX_RUN_JSON_BYTES = 4 * 1024 * 1024
#: a session report read whole (a real one is a few hundred kilobytes)
MAX_REPORT_BYTES = 64 * 1024 * 1024
#: rendered pages a server keeps
MAX_CACHED_PAGES = 16
#: run folders looked at below a runs folder
MAX_RUNS = 100_000


def linked_component(root: Path, rel: str) -> str | None:
    """The first part of ``rel`` below ``root`` that is a symbolic link (``lstat``: nothing is followed),
    as a relative path, or None; a missing component ends the check (nothing is read through it)."""
    parts = rel.split("/")
    for depth in range(1, len(parts) + 1):
        prefix = "/".join(parts[:depth])
        try:
            mode = os.lstat(Path(root) / prefix).st_mode
        except OSError:
            return None
        if stat.S_ISLNK(mode):
            return prefix
    return None


def check_run_folder(run_dir: Path) -> None:
    """Refuse a run folder (:class:`RefusedFile`) where anything these commands read is a symbolic link."""
    for rel in READ_ENTRIES:
        linked = linked_component(run_dir, rel)
        if linked is not None:
            raise RefusedFile(f"{run_dir}: {linked} is a symbolic link (rexmle view and export follow no link "
                              f"in a run folder)")
    record = read_json(run_dir / "run.json", MAX_RUN_JSON_BYTES, f"{run_dir}/run.json", allow_constants=True)
    if not isinstance(record, dict):
        raise RefusedFile(f"{run_dir}/run.json is not a JSON object")


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _run_below(root: Path, names: tuple[str, ...]) -> Path | None:
    """``root/<task>/<agent>/<run>`` when none of them is a link and it holds a regular run.json, else None."""
    here = Path(root).joinpath(*names)
    return here if linked_component(root, "/".join(names)) is None and _is_regular(here / "run.json") else None


def _runs_of_report(report: Path, roots: list[Path], skipped: list[str]) -> list[Path]:
    """The runs a session report names, found by their last three names (task, agent, run) below the
    runs folders allowed — never at the path the report claims, which a downloaded report chooses."""
    doc = read_json(report / REPORT_JSON, MAX_REPORT_BYTES, REPORT_JSON)
    records = (doc.get("tasks") or doc.get("challenges")) if isinstance(doc, dict) else None  # schema 2, or 1
    found: list[Path] = []
    for entry in records if isinstance(records, list) else []:
        claimed = entry.get("run_dir") if isinstance(entry, dict) else None
        if not isinstance(claimed, str) or not claimed:
            continue
        names = tuple(PurePosixPath(claimed).parts[-3:])
        if len(names) != 3 or any(plain_name(n) is None for n in names):
            skipped.append(f"a run_dir that is not <task>/<agent>/<run>: {clean_text(claimed, limit=120)}")
            continue
        run = next((r for r in (_run_below(root, names) for root in roots) if r is not None), None)
        if run is None:
            skipped.append(f"run {'/'.join(names)} is not in {', '.join(map(str, roots))}")
        elif run not in found:
            found.append(run)
    return found


def _runs_in(root: Path) -> list[Path]:
    """Every ``<task>/<agent>/<run>/run.json`` below a runs folder, walked without following a link."""
    found: list[Path] = []
    level = [Path(root)]
    for _ in range(3):
        below = []
        for folder in level:
            try:
                with os.scandir(folder) as entries:
                    below += [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            if len(below) > MAX_RUNS:
                raise RefusedFile(f"{root} holds more than {MAX_RUNS} folders at one level")
        level = below
    found = [run for run in level if _is_regular(run / "run.json")]
    return sorted(found)


def run_folders(target: Path, runs: Sequence[Path] = (), skipped: list[str] | None = None) -> list[Path]:
    """The run folders a target names: itself (a run), a session report's runs, or every run below it.

    The target (and ``runs``, more runs folders) is what the user named and is taken as given; everything
    below it, and whatever a report says, is the agent's or a downloader's: a report's run is looked for
    only below the runs folder beside the report's folder (``.rexmle/runs`` for ``.rexmle/report/<id>``)
    and below ``runs``; no link is followed below them; a run folder with a linked entry is left out,
    with its reason in ``skipped``."""
    target = Path(target)
    skipped = [] if skipped is None else skipped
    if _is_regular(target / "run.json"):
        candidates = [target]
    elif _is_regular(target / REPORT_JSON):
        beside = target.resolve().parent.parent / "runs"  # the report's own tree: a link there is not followed
        roots = [*map(Path, runs)]
        if linked_component(beside.parent, "runs"):
            skipped.append(f"{beside} is a symbolic link (rexmle view and export follow no link below the "
                           f"given folder; name a runs folder with --runs)")
        else:
            roots.append(beside)
        candidates = _runs_of_report(target, roots, skipped)
    else:
        candidates = _runs_in(target)
    found = []
    for run in candidates:
        try:
            check_run_folder(run)
        except RefusedFile as exc:
            skipped.append(str(exc))
            continue
        found.append(run)
    return found


def page_of(run_dir: Path) -> str:
    """The run's page, rendered from its records (a ``run.html`` already in the folder is never served:
    a downloaded folder's page is the downloader's HTML) and written beside them when the folder allows."""
    html = render_run_page(run_dir)
    try:
        write_text_atomic(run_dir / RUN_HTML, html)
    except OSError:  # a read-only run folder is still viewable
        pass
    return html


class _Handler(BaseHTTPRequestHandler):
    runs: list[Path] = []
    session_html: str | None = None
    pages: dict[tuple[int, int], str] = {}

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - quiet: the terminal shows the URL only
        return

    def _send(self, status: int, body: str, ctype: str) -> None:
        data = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", f"{ctype}; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def _own_host(self) -> bool:
        """Whether the request names this server (``127.0.0.1:PORT`` or ``localhost:PORT``). A page on
        any other site can make the browser send requests here after its name re-resolves to 127.0.0.1
        (DNS rebinding); its Host header still carries that site's name, so it is answered 421."""
        address = self.server.server_address
        port = address[1] if isinstance(address, tuple) else None
        return (self.headers.get("Host") or "").lower() in (f"127.0.0.1:{port}", f"localhost:{port}")

    def _page(self, index: int, first: int) -> str:
        """The run's page whose timeline starts at call ``first`` (rendered once per server: a big run's
        page takes seconds to build; the first one is also written as the folder's run.html)."""
        key = (index, first)
        if key not in self.pages:
            while len(self.pages) >= MAX_CACHED_PAGES:  # each page is up to a few MiB: keep the newest
                self.pages.pop(next(iter(self.pages)))
            run_dir = self.runs[index]
            self.pages[key] = page_of(run_dir) if first == 1 else render_run_page(run_dir, first)
        return self.pages[key]

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if not self._own_host():
            self._send(421, "misdirected request: rexmle view answers only 127.0.0.1 and localhost", "text/plain")
            return
        parts = urlsplit(self.path)
        segments = [s for s in parts.path.split("/") if s]
        if not segments and self.session_html is not None:
            self._send(200, self.session_html, "text/html")
            return
        if not segments and len(self.runs) == 1:
            segments = ["runs", "0", RUN_HTML]
        if len(segments) == 3 and segments[0] == "runs" and segments[1].isdigit() and int(segments[1]) < len(self.runs):
            index = int(segments[1])
            if segments[2] == RUN_HTML:
                first = (parse_qs(parts.query).get("from") or ["1"])[0]
                if first.isdigit() and 0 < len(first) < 10 and int(first) > 0:
                    self._send(200, self._page(index, int(first)), "text/html")
                    return
            if segments[2] == "call":
                offset = (parse_qs(parts.query).get("offset") or [""])[0]
                text = call_record_text(self.runs[index], int(offset)) if offset.isdigit() else None
                if text is not None:
                    self._send(200, text, "text/plain")
                    return
        self._send(404, "not found", "text/plain")


def _session_index(runs: list[Path]) -> str:
    from .templating import template

    return template("runs.html.j2").render(runs=runs, page=RUN_HTML)


def serve(runs: list[Path], port: int = 0) -> ThreadingHTTPServer:
    """A loopback server for the runs' pages (started in a thread; ``shutdown()`` stops it)."""
    handler = type("Handler", (_Handler,), {"runs": list(runs), "pages": {},
                                             "session_html": _session_index(runs) if len(runs) != 1 else None})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="rexmle-view").start()
    return server


def _folders(args, command: str) -> tuple[list[Path], list[str]]:
    skipped: list[str] = []
    runs = run_folders(Path(args.target), [Path(r) for r in args.runs], skipped)
    for reason in skipped:
        print(f"rexmle {command}: skipped: {reason}", file=sys.stderr)
    return runs, skipped


def run_view(args) -> int:
    runs, skipped = _folders(args, "view")
    if not runs:
        print(f"rexmle view: no run to show in {args.target}", file=sys.stderr)
        return 2
    if args.no_serve:
        for run_dir in runs:
            page_of(run_dir)
            print(run_dir / RUN_HTML)
        return 0
    server = serve(runs, args.port)
    port = server.server_address[1]
    url = f"http://127.0.0.1:{port}/" + (f"runs/0/{RUN_HTML}" if len(runs) == 1 else "")
    print(f"rexmle view: {url}  (Ctrl-C stops)", flush=True)
    if args.open:
        import webbrowser  # start-up: webbrowser only where this runs

        webbrowser.open(url)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
    return 0


def run_export(args) -> int:
    runs, skipped = _folders(args, "export")
    if not runs:
        print(f"rexmle export: no run to export in {args.target}", file=sys.stderr)
        return 2
    try:
        if args.format == "harbor":
            job = export_job(runs, Path(args.out), Path(args.target).resolve().name or "rexmle-job")
            print(f"rexmle export: {len(runs)} trial(s) in the Harbor job {job} (harbor view {args.out})")
            return 0
        written = export_session(runs, Path(args.out))
    except OSError as exc:  # --out is a file, not writable, a full disk: said in one line, not a traceback
        print(f"rexmle export: cannot write {exc.filename or args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"rexmle export: {len(written)} trajector{'y' if len(written) == 1 else 'ies'} (ATIF v1.7) in {args.out}")
    return 2 if skipped else 0
