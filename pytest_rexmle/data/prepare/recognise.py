"""What a hand-downloaded raw file *is*, told from its content rather than its name or its position.

A browser saves a Google Drive file under a name of its own (``LDCTIQAC_test.zip``), users download
archives one by one or as a "download all" bundle, and they pass them in any order. So every
``--raw-archive`` is opened and listed (archive member names, nested archives one level down, a
folder's files, a JSON file's keys), and each raw part of a source declares the member paths that
identify it (``Part.signature``). Only listing happens here: nothing is extracted or written.
"""

from __future__ import annotations

import json
import re
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from .errors import PrepareError

#: files and folders that operating systems leave behind and that no release contains
DEBRIS_NAMES = frozenset({".ds_store", "thumbs.db", "desktop.ini"})
DEBRIS_FOLDERS = frozenset({"__macosx"})
ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")
MAX_NESTED = 16            # nested archives listed per file (SEG.A's bundle holds three)
#: a compressed nested zip is listed only below this size: its directory sits at its end, and reaching it
#: means inflating everything before (a stored one is listed at any size, seeking is free there)
NESTED_DEFLATED_BYTES = 256 * 1024 ** 2
SHOWN = 4                  # member names quoted in a one-line error


def is_debris(rel: str) -> bool:
    """macOS resource forks and folders, Finder and Explorer metadata."""
    parts = PurePosixPath(rel.replace("\\", "/")).parts
    return bool(parts) and (parts[-1].lower() in DEBRIS_NAMES or parts[-1].startswith("._")
                            or any(p.lower() in DEBRIS_FOLDERS for p in parts))


def is_archive_name(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIXES)


@dataclass
class Contents:
    """The listing of one supplied path: member paths ('/'-separated) and what was odd about it."""

    path: Path
    kind: str                                   # "zip", "tar", "folder", "json" or "file"
    members: list[str] = field(default_factory=list)
    debris: int = 0
    json_keys: list[str] = field(default_factory=list)

    def search(self, pattern: str) -> bool:
        regex = re.compile(pattern, re.IGNORECASE)
        return any(regex.search("/" + m) for m in self.members)

    def summary(self) -> str:
        """A few member names, for one-line error messages."""
        if self.kind == "json":
            return f"a JSON file with keys {self.json_keys[:SHOWN]}"
        if not self.members:
            return f"an empty {self.kind}"
        shown = ", ".join(self.members[:SHOWN]) + (", ..." if len(self.members) > SHOWN else "")
        return f"{len(self.members)} files ({shown})"


def _zip_members(zf: zipfile.ZipFile, prefix: str, nested: list[int]) -> list[str]:
    names = [prefix + i.filename for i in zf.infolist() if not i.is_dir()]
    out = list(names)
    for info in zf.infolist():
        cheap = info.compress_type == zipfile.ZIP_STORED or info.compress_size <= NESTED_DEFLATED_BYTES
        if info.filename.lower().endswith(".zip") and nested[0] < MAX_NESTED and cheap \
                and not is_debris(info.filename):
            nested[0] += 1
            try:
                with zf.open(info) as inner, zipfile.ZipFile(inner) as inner_zip:
                    out += _zip_members(inner_zip, prefix + info.filename + "/", nested)
            except (zipfile.BadZipFile, OSError, ValueError):
                pass  # listed as a file only; its content is checked when it is extracted
    return out


def inspect(path: Path) -> Contents:
    """List ``path`` (zip, tar, folder, JSON or other file); debris is counted and left out."""
    if not path.exists():
        raise PrepareError(f"--raw-archive {path}: no such file or folder")
    if path.is_dir():
        # the folder's own name is kept: it is what the archive's top folder would have been
        raw = [f"{path.name}/{p.relative_to(path).as_posix()}" for p in sorted(path.rglob("*")) if p.is_file()]
        kind = "folder"
    elif zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as zf:
                raw = _zip_members(zf, "", [0])
        except (zipfile.BadZipFile, OSError) as exc:
            raise PrepareError(f"--raw-archive {path}: not a readable zip archive ({exc})") from None
        kind = "zip"
    elif is_archive_name(path.name) and tarfile.is_tarfile(path):
        try:
            with tarfile.open(path) as tf:
                raw = [m.name for m in tf.getmembers() if m.isfile()]
        except (tarfile.TarError, OSError) as exc:
            raise PrepareError(f"--raw-archive {path}: not a readable tar archive ({exc})") from None
        kind = "tar"
    elif path.suffix.lower() == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8-sig"))
        except (OSError, ValueError) as exc:
            raise PrepareError(f"--raw-archive {path}: not valid JSON ({exc})") from None
        keys = [str(k) for k in data] if isinstance(data, dict) else []
        return Contents(path, "json", [path.name], 0, keys)
    else:
        if is_archive_name(path.name):
            raise PrepareError(f"--raw-archive {path}: named like an archive but neither zip nor tar "
                               f"(an interrupted download, or an HTML page saved instead?)")
        return Contents(path, "file", [path.name])
    raw = [m.replace("\\", "/") for m in raw]          # zips written on Windows may use backslashes
    members = [m for m in raw if not is_debris(m)]
    return Contents(path, kind, members, len(raw) - len(members))

