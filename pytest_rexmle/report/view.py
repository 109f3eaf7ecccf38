"""``rexmle view RUN_DIR|SESSION`` and ``rexmle export atif SESSION``: reading runs, here and elsewhere.

``view`` serves a run's page (``run.html``, rebuilt when missing or older than the run's files) on the
host's loopback, with each call's whole record on demand, so a run of a gigabyte of trajectory opens at
once and its bodies load one at a time. Given a session's report folder (or the runs folder), it serves
the session's report and every run's page under ``/runs/<n>/``. Nothing is served beyond those pages
and records: no file of the run folder is reachable by path.

``export atif`` writes each run of a session as ATIF in the folder layout Harbor's tools read.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from .runpage import RUN_HTML, call_record_text, render_run_page


def add_view_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", help="a run folder, a session's report folder, or the runs folder")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free one)")
    p.add_argument("--open", action="store_true", help="open the page in the default browser")
    p.add_argument("--no-serve", action="store_true", help="write run.html and print its path, serve nothing")


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("format", choices=["atif", "harbor"],
                   help="atif: one trajectory.json per run (ATIF v1.7); harbor: a Harbor job folder")
    p.add_argument("target", help="a session's report folder, the runs folder, or one run folder")
    p.add_argument("--out", required=True, help="folder to write (atif: one <task>__<run>/agent/trajectory.json per "
                                                "run; harbor: Harbor's jobs folder, with one <job>/ in it)")


def run_folders(target: Path) -> list[Path]:
    """The run folders a target names: itself (a run), a session report's runs, or every run below it."""
    target = Path(target)
    if (target / "run.json").is_file():
        return [target]
    report = target / "rexmle-report.json"
    if report.is_file():
        doc = json.loads(report.read_text(encoding="utf-8"))
        dirs = [Path(c["run_dir"]) for c in doc.get("challenges") or [] if isinstance(c, dict) and c.get("run_dir")]
        return [d for d in dirs if (d / "run.json").is_file()]
    return sorted(p.parent for p in target.glob("*/*/*/run.json"))


def page_of(run_dir: Path) -> str:
    """The run's page, rebuilt when missing or older than its run.json or call record."""
    page = run_dir / RUN_HTML
    sources = [run_dir / "run.json", run_dir / "logs" / "model-calls.jsonl", run_dir / "result.json"]
    newest = max((p.stat().st_mtime for p in sources if p.is_file()), default=0.0)
    if page.is_file() and not page.is_symlink() and page.stat().st_mtime >= newest:
        return page.read_text(encoding="utf-8")
    html = render_run_page(run_dir)
    try:
        from ..jsonfile import write_text_atomic

        write_text_atomic(page, html)
    except OSError:  # a read-only run folder is still viewable
        pass
    return html


class _Handler(BaseHTTPRequestHandler):
    runs: list[Path] = []
    session_html: str | None = None

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

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        parts = urlsplit(self.path)
        segments = [s for s in parts.path.split("/") if s]
        if not segments and self.session_html is not None:
            self._send(200, self.session_html, "text/html")
            return
        if not segments and len(self.runs) == 1:
            segments = ["runs", "0", RUN_HTML]
        if len(segments) == 3 and segments[0] == "runs" and segments[1].isdigit() and int(segments[1]) < len(self.runs):
            run_dir = self.runs[int(segments[1])]
            if segments[2] == RUN_HTML:
                self._send(200, page_of(run_dir), "text/html")
                return
            if segments[2] == "call":
                offset = (parse_qs(parts.query).get("offset") or [""])[0]
                text = call_record_text(run_dir, int(offset)) if offset.isdigit() else None
                if text is not None:
                    self._send(200, text, "text/plain")
                    return
        self._send(404, "not found", "text/plain")


def _session_index(runs: list[Path]) -> str:
    from html import escape

    rows = "".join(f'<li><a href="/runs/{i}/{RUN_HTML}">{escape(str(r))}</a></li>' for i, r in enumerate(runs))
    return (f"<!doctype html><meta charset=utf-8><title>ReX-MLE runs</title><h1>Runs</h1><ul>{rows}</ul>")


def serve(runs: list[Path], port: int = 0) -> ThreadingHTTPServer:
    """A loopback server for the runs' pages (started in a thread; ``shutdown()`` stops it)."""
    handler = type("Handler", (_Handler,), {"runs": list(runs),
                                             "session_html": _session_index(runs) if len(runs) != 1 else None})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="rexmle-view").start()
    return server


def run_view(args) -> int:
    runs = run_folders(Path(args.target))
    if not runs:
        print(f"rexmle view: no run found in {args.target}", file=sys.stderr)
        return 2
    if args.no_serve:
        for run_dir in runs:
            page_of(run_dir)
            print(run_dir / RUN_HTML)
        return 0
    server = serve(runs, args.port)
    host, port = server.server_address[:2]
    url = f"http://{host}:{port}/" + (f"runs/0/{RUN_HTML}" if len(runs) == 1 else "")
    print(f"rexmle view: {url}  (Ctrl-C stops)", flush=True)
    if args.open:
        import webbrowser

        webbrowser.open(url)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
    return 0


def run_export(args) -> int:
    from .atif import export_session

    runs = run_folders(Path(args.target))
    if not runs:
        print(f"rexmle export: no run found in {args.target}", file=sys.stderr)
        return 2
    try:
        if args.format == "harbor":
            from .harbor import export_job

            job = export_job(runs, Path(args.out), Path(args.target).resolve().name or "rexmle-job")
            print(f"rexmle export: {len(runs)} trial(s) in the Harbor job {job} (harbor view {args.out})")
            return 0
        written = export_session(runs, Path(args.out))
    except OSError as exc:  # --out is a file, not writable, a full disk: said in one line, not a traceback
        print(f"rexmle export: cannot write {exc.filename or args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"rexmle export: {len(written)} trajector{'y' if len(written) == 1 else 'ies'} (ATIF v1.7) in {args.out}")
    return 0
