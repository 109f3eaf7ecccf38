"""Where session reports live: one folder per session, a ``latest`` link and an index of all sessions.

A benchmark session can take days, and a quick ``-k`` re-run must never wipe it, so every session
writes into its own ``<report dir>/<run id>/`` (run ids start with the UTC start time, so folders sort
by age) and nothing of an earlier session is touched. ``latest`` points at the newest finished session,
and ``index.md`` / ``index.html`` list every session in the folder with its score. People share and
keep these files, so they are written world-readable (0644) and atomically (temp file + rename): a
reader never sees half a file, even while a second session updates the index.

Layout::

    .rexmle/report/
      20261123T175600Z-3f9a1c/   rexmle-report.{json,md,html}, rexmle-capability.json
      latest -> 20261123T175600Z-3f9a1c
      index.md, index.html
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..jsonfile import write_json_atomic, write_text_atomic
from .mdtext import md_row, md_table, md_text
from .model import data_kind
from .render import pct

REPORT_JSON = "rexmle-report.json"
LATEST = "latest"
INDEX_MD = "index.md"
INDEX_HTML = "index.html"
FILE_MODE = 0o644


def new_run_id(now: datetime | None = None) -> str:
    """A unique, sortable session id: UTC start time plus a random suffix (two sessions may start in the
    same second, e.g. on two machines sharing a folder)."""
    now = now or datetime.now(UTC)
    return f"{now.astimezone(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


def write_text(path: Path, text: str) -> Path:
    """Reports are shared and kept: world-readable (0644), written atomically."""
    return write_text_atomic(path, text, FILE_MODE)


def write_json(path: Path, payload: Any) -> Path:
    return write_json_atomic(path, payload, FILE_MODE)


def session_folder(report_dir: Path, run_id: str) -> Path:
    folder = Path(report_dir) / run_id
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o755)
    return folder


def point_latest(report_dir: Path, run_id: str) -> None:
    """Swap ``latest`` to ``run_id`` atomically (a relative link, so the folder can be moved or copied)."""
    link = Path(report_dir) / LATEST
    tmp = Path(report_dir) / f".{LATEST}.{uuid.uuid4().hex[:8]}"
    os.symlink(run_id, tmp)
    try:
        os.replace(tmp, link)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def sessions(report_dir: Path) -> list[dict]:
    """Every session report under ``report_dir`` (newest first), each with its folder name added.
    Unreadable, oversized or foreign files are left out rather than failing the index."""
    docs = ((path, _read_session(path)) for path in _session_reports(Path(report_dir)))
    return _newest_first([{**doc, "folder": path.parent.name} for path, doc in docs if doc is not None])


def _read_session(path: Path) -> dict | None:
    """A session's report, or None when it is unreadable, oversized or not a session report."""
    from .trust import read_report  # bounded (a download may be 1 GiB or 200k deep); looked up when called

    try:
        doc = read_report(path)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("tasks"), list) else None


def _newest_first(docs: list[dict]) -> list[dict]:
    return sorted(docs, key=lambda d: (str(d.get("created") or ""), d["folder"]), reverse=True)


def _session_reports(root: Path) -> list[Path]:
    """The ``rexmle-report.json`` of each session folder under ``root`` (by folder name: oldest first);
    ``latest`` and other links are not sessions of their own."""
    if not root.is_dir():
        return []
    return sorted((child / REPORT_JSON for child in root.iterdir()
                   if child.name != LATEST and not child.is_symlink() and (child / REPORT_JSON).is_file()),
                  key=lambda p: p.parent.name)


def resolve_all(path: Path) -> list[Path]:
    """Every ``rexmle-report.json`` that ``path`` names: the file itself, a session folder's report, or,
    for a report folder holding sessions, each session's report (oldest first)."""
    path = Path(path)
    if path.is_file():
        return [path]
    found = _session_reports(path)
    if found:
        return found
    if (path / REPORT_JSON).is_file():
        return [path / REPORT_JSON]
    raise FileNotFoundError(f"no {REPORT_JSON} at {path}, nor in a session folder under it")


def local_time(iso: str | None) -> str:
    """An ISO time as a reader wants it: this machine's local time, to the minute, with its zone."""
    if not iso:
        return "-"
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        return iso
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone().strftime("%Y-%m-%d %H:%M %Z").strip()


def _row(doc: dict) -> dict:
    n_selected = len(doc.get("selected") or [])
    return {"folder": doc["folder"], "created": local_time(doc.get("created")), "agent": str(doc.get("agent") or "-"),
            "score": pct(float(doc.get("score") or 0.0)), "tasks": str(n_selected),
            "partial": "partial" if doc.get("partial") else "full", "fail": str(doc.get("n_fail", "-")),
            "error": str(doc.get("n_error", 0)), "skipped": str(len(doc.get("skipped") or ())),
            "data": data_kind(doc)}


def index_markdown(docs: list[dict], latest: str | None) -> str:
    lines = ["# ReX-MLE sessions", "", f"{len(docs)} session(s), newest first. `latest` → `{latest or '-'}`.", "",
             *md_table("Session", "Started", "Agent", "Data", "Score", "Tasks", "FAIL", "ERROR", "Skipped")]
    for doc in docs:
        r = _row(doc)
        lines.append(md_row(f"[{md_text(r['folder'])}](<{r['folder']}/rexmle-report.md>)", r["created"],
                            md_text(r["agent"]), r["data"], r["score"], f"{r['tasks']} ({r['partial']})", r["fail"],
                            r["error"], r["skipped"]))
    return "\n".join(lines) + "\n"


def index_html(docs: list[dict], latest: str | None) -> str:
    from .templating import template

    return template("index.html.j2").render(rows=[_row(doc) for doc in docs], latest=latest)


#: what the index needs of each session, kept between sessions by the file's size and time, so that a session's
#: end reads only its own report, not every earlier one (which cost 7.5 ms × S² over S sessions)
INDEX_CACHE = ".index-cache.json"
INDEX_FIELDS = ("created", "agent", "score", "selected", "partial", "n_fail", "n_error", "skipped", "data_kind",
                "settings", "tasks")


def summaries(report_dir: Path) -> list[dict]:
    """:func:`sessions`, each cut to what the index shows, reading only reports that are new or changed since
    the last index (``.index-cache.json``: folder -> size, mtime and the summary)."""
    root = Path(report_dir)
    try:
        cached = json.loads((root / INDEX_CACHE).read_text())
        cached = cached if isinstance(cached, dict) else {}
    except (OSError, ValueError):
        cached = {}
    fresh, out = {}, []
    for path in _session_reports(root):
        try:
            st = path.stat()
        except OSError:
            continue
        stamp = [st.st_size, st.st_mtime_ns]
        hit = cached.get(path.parent.name)
        if isinstance(hit, dict) and hit.get("stamp") == stamp and isinstance(hit.get("summary"), dict):
            summary = hit["summary"]
        else:
            doc = _read_session(path)
            if doc is None:
                continue
            summary = {k: doc.get(k) for k in INDEX_FIELDS if k != "tasks"}
            summary["settings"] = {"data": (doc.get("settings") or {}).get("data")} \
                if isinstance(doc.get("settings"), dict) else None
            summary["tasks"] = []  # the rows are not shown in the index
        fresh[path.parent.name] = {"stamp": stamp, "summary": summary}
        out.append({**summary, "folder": path.parent.name})
    try:
        write_text(root / INDEX_CACHE, json.dumps(fresh))
    except OSError:
        pass
    return _newest_first(out)


def write_index(report_dir: Path) -> None:
    """Rebuild both index files from the session folders on disk, under a lock so that two sessions
    finishing together cannot interleave (each rebuild sees every folder, so the last one is complete)."""
    from filelock import FileLock  # start-up: filelock only where this runs

    root = Path(report_dir)
    with FileLock(str(root / ".index.lock")):
        docs = summaries(root)
        link = root / LATEST
        latest = os.readlink(link) if link.is_symlink() else None
        write_text(root / INDEX_MD, index_markdown(docs, latest))
        write_text(root / INDEX_HTML, index_html(docs, latest))
