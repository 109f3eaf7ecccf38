"""Downloading release files: Zenodo/figshare file lists, resumable HTTP, MD5 checks, retries.

Releases are large (TopCoW 14 GB, CellSeg 21 GB, DENTEX 11 GB) and servers drop connections, so a
download is written to ``<name>.part`` and continued with an HTTP ``Range`` request after any failure,
within one call (retries with exponential back-off) or in a later run. A finished file is accepted only
when its size and MD5 match what the source's API publishes; a mismatch deletes the file, so a corrupt
copy is never extracted. Only the standard library is used for HTTP (no extra dependency, and urllib
keeps the Range header across the redirects figshare and Zenodo issue).

Only failures that can pass are retried — timeouts, 5xx/408/429 answers, connections reset or cut
short — each retry announced on stderr with its wait. A failure that waiting cannot fix (the host name
does not resolve, the network is unreachable, the connection is refused, a 404) stops at once with
:class:`NoNetwork` or a plain :class:`PrepareError`, naming the files to fetch by hand: on a machine
without network a silent two-minute back-off ending in a bare ``urlopen error`` helped nobody.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import json
import os
import shutil
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from .errors import ChecksumMismatch, NotEnoughDiskSpace, PrepareError

ZENODO_ENV = "REXMLE_ZENODO_URL"
ZENODO_DEFAULT = "https://zenodo.org"
FIGSHARE_ENV = "REXMLE_FIGSHARE_URL"
FIGSHARE_DEFAULT = "https://api.figshare.com"
BACKOFF_ENV = "REXMLE_DOWNLOAD_BACKOFF"
USER_AGENT = "pytest-rexmle (+https://github.com/; rexmle prepare)"
CHUNK = 1 << 20
TIMEOUT = 60.0
RETRIES = 6
#: free space kept in reserve beyond what a download or an extraction needs
DISK_MARGIN = 1 << 30
T = TypeVar("T")


@dataclass(frozen=True)
class RemoteFile:
    """One downloadable file as the source's API describes it."""

    name: str
    url: str
    size: int | None = None
    md5: str | None = None


def _backoff() -> float:
    try:
        return max(0.0, float(os.environ.get(BACKOFF_ENV, "2")))
    except ValueError:
        return 2.0


def _request(url: str, headers: dict[str, str] | None = None) -> urllib.request.Request:
    return urllib.request.Request(url, headers={"User-Agent": USER_AGENT, **(headers or {})})


class NoNetwork(PrepareError):
    """The source cannot be reached at all from here (no name resolution, no route, refused)."""


#: errno values that mean "this machine cannot reach that host", which no waiting fixes
_UNREACHABLE = {errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ECONNREFUSED, errno.ENETDOWN}


def _cause(exc: BaseException) -> BaseException:
    """The transport error inside urllib's URLError wrapper."""
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError) \
            and isinstance(exc.reason, BaseException):
        return exc.reason
    return exc


def unreachable(exc: BaseException) -> bool:
    """True for failures that say the host cannot be reached from this machine at all."""
    cause = _cause(exc)
    if isinstance(cause, socket.gaierror):
        return True
    return isinstance(cause, OSError) and not isinstance(cause, TimeoutError) and cause.errno in _UNREACHABLE


def _retryable(exc: BaseException) -> bool:
    """Failures that can pass: timeouts, overloaded or failing servers, connections reset or cut short."""
    if isinstance(exc, urllib.error.HTTPError):
        return exc.code in (408, 425, 429) or exc.code >= 500
    if unreachable(exc):
        return False
    cause = _cause(exc)
    if isinstance(cause, (TimeoutError, socket.timeout, http.client.IncompleteRead, http.client.RemoteDisconnected,
                          ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
        return True
    # our own "connection closed after N of M bytes" / bad Content-Range signals (plain ConnectionError)
    return type(cause) is ConnectionError or (isinstance(cause, OSError) and cause.errno == errno.ETIMEDOUT)


def _why(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    cause = _cause(exc)
    return f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__


def _retrying(fetch: Callable[[], T], what: str, url: str, manual: str, retries: int,
              failed: Callable[[BaseException, int], str]) -> T:
    """``fetch()``, retried with exponential back-off (each retry announced on stderr with its wait) while it
    fails in a way that can pass; :class:`NoNetwork` at once when the host is unreachable, else a
    :class:`PrepareError` saying ``failed(exc, attempts)``."""
    for attempt in range(retries + 1):
        try:
            return fetch()
        except PrepareError:
            raise
        except Exception as exc:  # noqa: BLE001 - classified below
            if unreachable(exc):
                raise no_network(url, exc, manual) from None
            if not _retryable(exc) or attempt == retries:
                raise PrepareError(failed(exc, attempt + 1)) from None
            wait = _backoff() * 2 ** attempt
            print(f"rexmle prepare: {what}: {_why(exc)}; retry {attempt + 1} of {retries} in {wait:.0f} s",
                  file=sys.stderr, flush=True)
            time.sleep(wait)
    raise AssertionError("unreachable")


def no_network(url: str, exc: BaseException, manual: str) -> NoNetwork:
    host = urllib.parse.urlsplit(url).hostname or url
    cause = _cause(exc)
    what = "the host name does not resolve" if isinstance(cause, socket.gaierror) else "the host is unreachable"
    return NoNetwork(f"cannot reach {host} ({what}: {cause}). No network here? Download {manual} by hand on a "
                     f"machine with network, copy it here and pass it with --raw-archive PATH "
                     f"(repeatable, one per file)")


def fetch_json(url: str, retries: int = RETRIES, manual: str | None = None) -> Any:
    """GET a JSON document, retrying transient failures with back-off; ``manual`` names what a user
    without network should download instead (used in the :class:`NoNetwork` hint)."""
    def fetch() -> Any:
        with urllib.request.urlopen(_request(url, {"Accept": "application/json"}), timeout=TIMEOUT) as resp:
            return json.loads(resp.read().decode("utf-8"))

    return _retrying(fetch, f"reading {url}", url, manual or f"the files listed at {url}", retries,
                     lambda exc, attempts: f"cannot read {url}: {_why(exc)}"
                     + (f" (gave up after {attempts} attempts)" if attempts > 1 else ""))


def zenodo_files(record_id: str) -> list[RemoteFile]:
    """The files of a Zenodo record (name, size, MD5, download link) from the records REST API."""
    base = os.environ.get(ZENODO_ENV, ZENODO_DEFAULT).rstrip("/")
    url = f"{base}/api/records/{record_id}"
    data = fetch_json(url, manual=f"the files of https://zenodo.org/records/{record_id}")
    entries = data.get("files") if isinstance(data, dict) else None
    if isinstance(entries, dict):  # InvenioRDM may nest the list under "entries"
        entries = entries.get("entries")
    if not isinstance(entries, list):
        raise PrepareError(f"{url}: the record lists no files")
    out = []
    for entry in entries:
        key = entry.get("key") or entry.get("filename")
        link = (entry.get("links") or {}).get("self") or (entry.get("links") or {}).get("content")
        if not key or not link:
            continue
        checksum = str(entry.get("checksum") or "")
        md5 = checksum.split(":", 1)[1] if checksum.startswith("md5:") else None
        out.append(RemoteFile(key, urllib.parse.urljoin(base + "/", link), _int(entry.get("size")), md5))
    return out


def figshare_files(article_id: str, version: int | None = None) -> list[RemoteFile]:
    """The files of a figshare article version (public API v2: name, size, computed MD5, download URL)."""
    base = os.environ.get(FIGSHARE_ENV, FIGSHARE_DEFAULT).rstrip("/")
    url = f"{base}/v2/articles/{article_id}" + (f"/versions/{version}" if version else "")
    data = fetch_json(url, manual=f"the files of figshare article {article_id} "
                                  f"(https://figshare.com/articles/dataset/{article_id})")
    out = []
    for entry in data.get("files", []) if isinstance(data, dict) else []:
        if entry.get("is_link_only"):
            continue
        md5 = entry.get("computed_md5") or entry.get("supplied_md5") or None
        out.append(RemoteFile(entry["name"], urllib.parse.urljoin(base + "/", entry["download_url"]),
                              _int(entry.get("size")), md5))
    return out


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def free_bytes(path: Path) -> int:
    """Free space on the file system holding ``path`` (its nearest existing ancestor)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def require_space(path: Path, need: int, what: str) -> None:
    free = free_bytes(path)
    if need + DISK_MARGIN > free:
        raise NotEnoughDiskSpace(
            f"{what} needs about {_human(need)} (+{_human(DISK_MARGIN)} reserve) in {path}, "
            f"but only {_human(free)} is free; free some space or use --data-dir on a larger disk")


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024:
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TB"


def _progress(name: str, total: int | None, initial: int, enabled: bool):
    try:
        from tqdm import tqdm  # start-up: tqdm only where this runs
    except ImportError:  # progress is a nicety; never fail a download for it
        return None
    return tqdm(total=total, initial=initial, unit="B", unit_scale=True, unit_divisor=1024, desc=name,
                disable=not enabled, leave=True)


def _verified_marker(dest: Path) -> Path:
    return dest.with_name(dest.name + ".md5")


def is_downloaded(remote: RemoteFile, dest: Path) -> bool:
    """True when ``dest`` was completed and verified by an earlier run (sidecar MD5 file)."""
    marker = _verified_marker(dest)
    if not dest.is_file() or not marker.is_file():
        return False
    if remote.size is not None and dest.stat().st_size != remote.size:
        return False
    return remote.md5 is None or marker.read_text().strip() == remote.md5


def download(remote: RemoteFile, dest: Path, progress: bool = True, retries: int = RETRIES) -> Path:
    """Fetch ``remote`` to ``dest`` (resuming ``dest.part``), verify size and MD5, return ``dest``."""
    if is_downloaded(remote, dest):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    if remote.size is not None:
        require_space(dest.parent, max(remote.size - have, 0), f"downloading {remote.name}")
    _retrying(lambda: _fetch_into(remote, part, progress), f"downloading {remote.name}", remote.url,
              f"{remote.name!r} ({remote.url})", retries,
              lambda exc, attempts: f"downloading {remote.name} from {remote.url} failed after {attempts} "
              f"attempt(s): {_why(exc)}; run the command again to resume")
    size = part.stat().st_size
    if remote.size is not None and size != remote.size:
        part.unlink(missing_ok=True)
        raise ChecksumMismatch(f"{remote.name}: downloaded {size} bytes, the source lists {remote.size}; "
                               "the file was deleted, run the command again")
    with part.open("rb") as fh:
        digest = hashlib.file_digest(fh, "md5").hexdigest()
    if remote.md5 is not None and digest != remote.md5.lower():
        part.unlink(missing_ok=True)
        raise ChecksumMismatch(f"{remote.name}: MD5 {digest} differs from the published {remote.md5} "
                               f"({remote.url}); the file was deleted, run the command again")
    os.replace(part, dest)
    _verified_marker(dest).write_text(digest + "\n")
    return dest


def _fetch_into(remote: RemoteFile, part: Path, progress: bool) -> None:
    """One attempt: continue ``part`` from its current size; raises on any transport failure."""
    offset = part.stat().st_size if part.exists() else 0
    if remote.size is not None and offset > remote.size:
        part.unlink()
        offset = 0
    if remote.size is not None and offset == remote.size:
        return
    headers = {"Range": f"bytes={offset}-"} if offset else {}
    try:
        resp = urllib.request.urlopen(_request(remote.url, headers), timeout=TIMEOUT)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and offset:  # our part is longer than the file: start again
            part.unlink(missing_ok=True)
        raise
    with resp:
        status = getattr(resp, "status", 200)
        if offset and status == 206:
            content_range = resp.headers.get("Content-Range", "")
            if not content_range.startswith(f"bytes {offset}-"):
                part.unlink(missing_ok=True)
                raise ConnectionError(f"server answered Range {offset}- with {content_range!r}; restarting")
            mode = "ab"
        else:  # 200: the server ignored the Range header, so the whole file comes again
            offset, mode = 0, "wb"
        length = _int(resp.headers.get("Content-Length"))
        expected_end = offset + length if length is not None else None
        bar = _progress(remote.name, remote.size, offset, progress)
        written = offset
        try:
            with part.open(mode) as fh:
                while True:
                    block = resp.read(CHUNK)
                    if not block:
                        break
                    fh.write(block)
                    written += len(block)
                    if bar is not None:
                        bar.update(len(block))
        finally:
            if bar is not None:
                bar.close()
    if expected_end is not None and written < expected_end:
        raise http.client.IncompleteRead(b"", expected_end - written)
    if remote.size is not None and written < remote.size:
        raise ConnectionError(f"{remote.name}: connection closed after {written} of {remote.size} bytes")
