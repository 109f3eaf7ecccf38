"""The image cache: ``$REXMLE_CACHE_DIR/images/sha256-<digest>/`` holds ``rootfs/`` and ``image.json``.

Content-addressed by the image's digest (the sha256 of its config, the id ``docker images`` shows), so a
second import of the same image is a no-op and every run and session shares one read-only copy. An image
is unpacked into a private temporary folder beside the others and renamed into place only when complete:
a reader never sees half an image, and two sessions importing at once both end with the same one.

``image.json`` keeps what a run needs from the image's config: ``env`` (``KEY=VALUE``, PATH first of all),
``working_dir``, ``entrypoint``/``cmd``, the tags it was imported under and what extraction neutralised.

Names are look-ups, so they are guarded: a digest (``sha256:<hex>``) finds only the image with exactly that
digest, before any tag is considered, and a tag that parses as a digest is refused; the tags an archive
gives itself (``RepoTags``) are only kept as ``archive_tags`` unless the importer asks to adopt them, so an
archive cannot take over ``rexmle/aide:latest`` by naming itself so. Staging folders carry their import's
deadline in their name; the next import removes those whose deadline passed (a killed import's leftovers).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..paths import cache_home
from .archive import Archive, layer_stream, read_image
from .unpack import (
    DEFAULT_MAX_ENTRIES,
    DEFAULT_MAX_LAYER,
    DEFAULT_MAX_SECONDS,
    DEFAULT_MAX_TOTAL,
    DEFAULT_MIN_FREE,
    MAX_COMPONENT,
    MAX_DEPTH,
    Deadline,
    ImageRejected,
    LayerWriter,
    UnpackReport,
    check_free,
    remove_tree,
)

MANIFEST = "image.json"
ROOTFS = "rootfs"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Apptainer keeps a converted image's environment as ``export NAME="value"`` lines in these files
APPTAINER_ENV = ".singularity.d/env"
_EXPORT = re.compile(r'^export\s+([A-Za-z_][A-Za-z0-9_]*)="([^"$`\\]*)"\s*$')
#: a digest (``sha256:`` and hex, however short: ``images list`` shows 12 of them), or a bare image id: never
#: a tag. ``agent:<40-hex git sha>`` is an ordinary tag and stays one.
_DIGEST_LIKE = re.compile(r"^(?:(?:sha256|sha384|sha512):[0-9a-fA-F]+|[0-9a-fA-F]{64})$")
MAX_TAG = 255
STAGING = ".import-"
#: a staging folder whose name carries no deadline (an older importer's) is stale after this long
STALE_UNDATED = 24 * 3600


def images_home() -> Path:
    return cache_home() / "images"


@dataclass(frozen=True)
class StoredImage:
    """An unpacked image: where its root is, and what its config says."""

    folder: Path
    manifest: dict

    @property
    def digest(self) -> str:
        return self.manifest["digest"]

    @property
    def rootfs(self) -> Path:
        return self.folder / ROOTFS

    @property
    def tags(self) -> list[str]:
        return list(self.manifest.get("tags") or [])

    def env(self) -> dict[str, str]:
        """The image config's variables (``PATH`` at least)."""
        out = {"PATH": DEFAULT_PATH}
        for item in self.manifest.get("env") or []:
            key, sep, value = str(item).partition("=")
            if sep and key:
                out[key] = value
        return out

    def record(self) -> dict:
        """What ``run.json`` keeps about the image that ran."""
        return {"digest": self.digest, "tags": self.tags, "source": self.manifest.get("source")}


def folder_for(digest: str) -> Path:
    return images_home() / digest.replace(":", "-")


def stored() -> list[StoredImage]:
    """Every complete image of the cache, newest import first."""
    home = images_home()
    out = []
    if home.is_dir():
        for folder in home.glob("sha256-*"):
            try:
                manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            out.append(StoredImage(folder, manifest))
    return sorted(out, key=lambda image: image.manifest.get("imported", 0), reverse=True)


def find(name: str) -> StoredImage | None:
    """The image with digest ``name`` (exactly), else the one stored under tag ``name``, latest import first;
    None if absent. A name that looks like a digest never matches a tag (an old cache may hold such tags)."""
    images = stored()
    by_digest = next((image for image in images if image.digest == name), None)
    if by_digest is not None or _DIGEST_LIKE.match(name):
        return by_digest
    return next((image for image in images if name in image.tags), None)


def check_tag(tag: object, where: str = "--tag") -> str:
    """``tag`` if it can name an image here: printable, no spaces, at most 255 characters, and not a digest
    (which would shadow, or be shadowed by, the image that has it)."""
    if not isinstance(tag, str) or not tag or len(tag) > MAX_TAG:
        raise ImageRejected(f"{where}: {tag!r:.80} is not a tag (1 to {MAX_TAG} characters)")
    if not tag.isprintable() or any(c.isspace() for c in tag):
        raise ImageRejected(f"{where}: {tag!r} holds spaces or control characters")
    if _DIGEST_LIKE.match(tag):
        raise ImageRejected(f"{where}: {tag!r} is spelled as a digest; a tag may not be one (images are found "
                            "by their digest already)")
    return tag


@dataclass(frozen=True)
class Limits:
    """What one import may cost: bytes per layer and in all, entries, seconds, and free space left."""

    max_layer: int = DEFAULT_MAX_LAYER
    max_total: int = DEFAULT_MAX_TOTAL
    max_entries: int = DEFAULT_MAX_ENTRIES
    max_seconds: float = DEFAULT_MAX_SECONDS
    min_free: int = DEFAULT_MIN_FREE


def import_archive(path: Path, tags: tuple[str, ...] = (), max_layer: int = DEFAULT_MAX_LAYER,
                   max_total: int = DEFAULT_MAX_TOTAL, adopt_tags: bool = False,
                   limits: Limits | None = None) -> tuple[StoredImage, UnpackReport | None]:
    """Import a docker-archive or OCI layout (tar or folder), or an Apptainer sandbox folder, under ``tags``
    (and the archive's own tags only when ``adopt_tags``); ``limits`` overrides ``max_layer``/``max_total``."""
    path = Path(path)
    limits = limits or Limits(max_layer=max_layer, max_total=max_total)
    tags = tuple(check_tag(tag) for tag in tags)
    deadline = Deadline(limits.max_seconds)
    if not path.exists():
        raise ImageRejected(f"{path}: no such file or folder")
    if path.is_dir() and not (path / "index.json").is_file():  # a root folder (Apptainer sandbox)
        return _import_sandbox(path, tags, limits, deadline)
    archive = Archive(path)
    try:
        source = read_image(archive)
        config = source.config_json()
        digest = source.digest
        adopted = tuple(check_tag(tag, "the archive's own tag") for tag in source.tags) if adopt_tags else ()
        all_tags = tuple(dict.fromkeys([*tags, *adopted]))
        existing = _existing(digest, all_tags)
        if existing is not None:
            return existing, None
        diff_ids = list((config.get("rootfs") or {}).get("diff_ids") or [])
        if len(diff_ids) != len(source.layers):
            raise ImageRejected(f"{path}: the config lists {len(diff_ids)} layer(s), the manifest {len(source.layers)}")
        with _building(deadline) as work:
            writer = LayerWriter(work / ROOTFS, max_layer=limits.max_layer, max_total=limits.max_total,
                                 max_entries=limits.max_entries, deadline=deadline, min_free=limits.min_free)
            for number, (name, expected) in enumerate(zip(source.layers, diff_ids, strict=True), 1):
                label = f"layer {number}/{len(source.layers)}"
                with layer_stream(archive, name) as stream:
                    got = writer.apply(stream, label)
                if got != expected:
                    raise ImageRejected(f"{label} ({name}) does not match the image's config: sha256 {got}, "
                                        f"config says {expected}")
            body = config.get("config") or {}
            manifest = _manifest(digest, all_tags, source.kind, body, writer.report,
                                 archive_tags=list(source.tags)[:50])
            return _publish(work, manifest), writer.report
    finally:
        archive.close()


def _import_sandbox(folder: Path, tags: tuple[str, ...], limits: Limits,
                    deadline: Deadline) -> tuple[StoredImage, UnpackReport]:
    """An Apptainer sandbox folder (``apptainer build --sandbox``) or any unpacked root: copied under the same
    rules as a layer (no devices, no setuid, links kept as links, entries and depth capped), its digest a
    hash of the tree."""
    if not tags:
        raise ImageRejected(f"{folder}: a root folder carries no tag; pass --tag NAME (e.g. rexmle/aide:latest)")
    if not (folder / "usr").is_dir():
        raise ImageRejected(f"{folder}: not an image's root folder (no usr/), an OCI layout (index.json) or an "
                            "Apptainer sandbox (.singularity.d/)")
    entries = _sandbox_entries(folder, limits, deadline)
    digest = _tree_digest(folder, entries, deadline)
    existing = _existing(digest, tags)
    if existing is not None:
        return existing, UnpackReport()
    report = UnpackReport()
    with _building(deadline) as work:
        _copy_tree(folder, work / ROOTFS, entries, report, limits, deadline)
        env = [f"{k}={v}" for k, v in _apptainer_env(folder).items()]
        return _publish(work, _manifest(digest, tags, "apptainer-sandbox", {"Env": env}, report)), report


def _sandbox_entries(folder: Path, limits: Limits, deadline: Deadline) -> list[tuple[str, os.stat_result]]:
    """Every entry under ``folder`` (relative name, ``lstat``), each folder's sorted, folders depth first (the
    order ``os.walk`` gave the digest); iterative, so no depth breaks it, and refused past ``max_entries``,
    ``MAX_DEPTH`` folders or the deadline. Links to folders are entries, never walked into."""
    out: list[tuple[str, os.stat_result]] = []
    pending = [""]
    while pending:
        rel_dir = pending.pop()
        deadline.check(f"listing {rel_dir or '.'}")
        subdirs = []
        for name in sorted(os.listdir(os.path.join(folder, rel_dir))):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            st = os.lstat(os.path.join(folder, rel))
            out.append((rel, st))
            if len(out) > limits.max_entries:
                raise ImageRejected(f"{folder}: more than {limits.max_entries} entries (--max-entries)")
            if stat.S_ISDIR(st.st_mode):
                if rel.count("/") >= MAX_DEPTH or len(name.encode("utf-8", "surrogateescape")) > MAX_COMPONENT:
                    raise ImageRejected(f"{folder}: {rel[:80]!r}... lies more than {MAX_DEPTH} folders deep")
                subdirs.append(rel)
        pending.extend(reversed(subdirs))
    return out


def _tree_digest(folder: Path, entries: list[tuple[str, os.stat_result]], deadline: Deadline) -> str:
    """The sha256 of every non-folder entry's name, mode and link target or contents, in walk order."""
    digest = hashlib.sha256()
    for rel, st in entries:
        if stat.S_ISDIR(st.st_mode):
            continue
        full = os.path.join(folder, rel)
        digest.update(f"{rel}\0{st.st_mode:o}\0".encode())
        if stat.S_ISLNK(st.st_mode):
            digest.update(os.readlink(full).encode())
        elif stat.S_ISREG(st.st_mode):
            deadline.check(f"hashing {rel!r}")
            with open(full, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def _copy_tree(src: Path, dest: Path, entries: list[tuple[str, os.stat_result]], report: UnpackReport,
               limits: Limits, deadline: Deadline) -> None:
    """Copy the listed entries; every entry is charged a header's worth (512 bytes), files their size."""
    dest.mkdir(mode=0o755, exist_ok=True)
    for rel, st in entries:
        deadline.check(f"copying {rel!r}")
        full, target = os.path.join(src, rel), dest / rel
        report.entries += 1
        report.bytes_written += 512 + (st.st_size if stat.S_ISREG(st.st_mode) else 0)
        if report.bytes_written > limits.max_total:
            raise ImageRejected(f"{full}: the folder holds more than the image's cap of {limits.max_total} bytes "
                                "(--max-image-size)")
        if stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(full), target)
        elif stat.S_ISDIR(st.st_mode):
            target.mkdir(mode=(st.st_mode & 0o1755) | 0o700)
        elif stat.S_ISREG(st.st_mode):
            check_free(dest, st.st_size, limits.min_free, f"{full}")
            shutil.copyfile(full, target, follow_symlinks=False)
            if st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                report.setuid_stripped.append(rel)
            os.chmod(target, st.st_mode & 0o1755)
        else:
            report.devices_skipped.append(rel)


def _apptainer_env(folder: Path) -> dict[str, str]:
    """The plain ``export NAME="value"`` lines of the sandbox's environment scripts (no expansions); none
    when ``.singularity.d`` or its ``env`` is a link (it would read a host file's lines into the image)."""
    env = {"PATH": DEFAULT_PATH}
    scripts = folder / APPTAINER_ENV
    if not scripts.is_dir() or any((folder / prefix).is_symlink() for prefix in (".singularity.d", APPTAINER_ENV)):
        return env
    for script in sorted(scripts.glob("*.sh")):
        if script.is_symlink() or not script.is_file():
            continue
        for line in script.read_text(encoding="utf-8", errors="replace").splitlines():
            if match := _EXPORT.match(line.strip()):
                env[match.group(1)] = match.group(2)
    return env


def _manifest(digest: str, tags: tuple[str, ...], kind: str, body: dict, report: UnpackReport, **extra) -> dict:
    """``image.json`` (see the module's docstring): what a run needs of the config ``body``, what extraction did."""
    return {"digest": digest, "tags": list(tags), "source": kind, **extra, "env": list(body.get("Env") or []),
            "working_dir": body.get("WorkingDir") or "", "entrypoint": body.get("Entrypoint"), "cmd": body.get("Cmd"),
            "user": body.get("User") or "", "size": report.bytes_written, "entries": report.entries,
            "devices_skipped": report.devices_skipped[:50], "setuid_stripped": report.setuid_stripped[:50],
            "imported": time.time()}


def _existing(digest: str, tags: tuple[str, ...]) -> StoredImage | None:
    """The image when already stored (its tags extended by ``tags``), else None."""
    folder = folder_for(digest)
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    manifest["tags"] = list(dict.fromkeys([*manifest.get("tags", []), *tags]))
    manifest["imported"] = time.time()  # the latest import wins a tag shared with an older image
    _write_manifest(folder, manifest)
    return StoredImage(folder, manifest)


@contextmanager
def _building(deadline: Deadline) -> Iterator[Path]:
    """A private folder to unpack into, removed unless published. Its name carries the import's deadline
    (``.import-<epoch>-<random>``): once past it no import can still be writing there, so entering removes
    every such folder whose deadline passed (an import killed midway, a machine that went down)."""
    home = images_home()
    home.mkdir(parents=True, exist_ok=True)
    os.chmod(home, 0o755)
    sweep_stale(home)
    work = Path(tempfile.mkdtemp(prefix=f"{STAGING}{int(deadline.wall_end) + 1}-", dir=home))
    try:
        (work / ROOTFS).mkdir(mode=0o755)
        yield work
    finally:
        if work.exists():
            remove_tree(work)


def sweep_stale(home: Path) -> list[str]:
    """Remove the staging folders under ``home`` whose import's deadline has passed (an undated one after a
    day); returns their names. Another session's live import is never touched: its deadline lies ahead."""
    now = time.time()
    removed = []
    with os.scandir(home) as entries:
        staging = [Path(e.path) for e in entries if e.name.startswith(STAGING) and e.is_dir(follow_symlinks=False)]
    for folder in staging:
        stamp = folder.name[len(STAGING):].split("-", 1)[0]
        try:
            deadline = float(stamp) if stamp.isdigit() else folder.lstat().st_mtime + STALE_UNDATED
        except FileNotFoundError:
            continue
        if deadline < now:
            try:
                remove_tree(folder)
            except OSError:
                continue  # another sweeper is removing it too, or a file system refused: next import retries
            removed.append(folder.name)
    return removed


def _publish(work: Path, manifest: dict) -> StoredImage:
    folder = folder_for(manifest["digest"])
    _write_manifest(work, manifest)
    os.chmod(work, 0o755)
    try:
        os.rename(work, folder)
    except OSError:  # another import of the same image won the race: theirs is as good
        if not (folder / MANIFEST).is_file():
            raise
        return _existing(manifest["digest"], tuple(manifest["tags"])) or StoredImage(folder, manifest)
    return StoredImage(folder, manifest)


def _write_manifest(folder: Path, manifest: dict) -> None:
    tmp = folder / f".{MANIFEST}.{os.getpid()}"
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
    os.chmod(tmp, 0o644)
    os.replace(tmp, folder / MANIFEST)


def remove(image: StoredImage) -> None:
    remove_tree(image.folder)
