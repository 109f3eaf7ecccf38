"""The image cache: ``$REXMLE_CACHE_DIR/images/sha256-<digest>/`` holds ``rootfs/`` and ``image.json``.

Content-addressed by the image's digest (the sha256 of its config, the id ``docker images`` shows), so a
second import of the same image is a no-op and every run and session shares one read-only copy. An image
is unpacked into a private temporary folder beside the others and renamed into place only when complete:
a reader never sees half an image, and two sessions importing at once both end with the same one.

``image.json`` keeps what a run needs from the image's config: ``env`` (``KEY=VALUE``, PATH first of all),
``working_dir``, ``entrypoint``/``cmd``, the tags it was imported under and what extraction neutralised.
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
from dataclasses import dataclass
from pathlib import Path

from ..paths import cache_home
from .archive import Archive, layer_stream, read_image
from .unpack import DEFAULT_MAX_LAYER, DEFAULT_MAX_TOTAL, ImageRejected, LayerWriter, UnpackReport

MANIFEST = "image.json"
ROOTFS = "rootfs"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Apptainer keeps a converted image's environment as ``export NAME="value"`` lines in these files
APPTAINER_ENV = ".singularity.d/env"
_EXPORT = re.compile(r'^export\s+([A-Za-z_][A-Za-z0-9_]*)="([^"$`\\]*)"\s*$')


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
    """The image stored under tag ``name`` (or digest ``sha256:...``), latest import first; None if absent."""
    for image in stored():
        if name == image.digest or name in image.tags:
            return image
    return None


def import_archive(path: Path, tags: tuple[str, ...] = (), max_layer: int = DEFAULT_MAX_LAYER,
                   max_total: int = DEFAULT_MAX_TOTAL) -> tuple[StoredImage, UnpackReport | None]:
    """Import a docker-archive or OCI layout (tar or folder), or an Apptainer sandbox folder."""
    path = Path(path)
    if not path.exists():
        raise ImageRejected(f"{path}: no such file or folder")
    if path.is_dir() and not (path / "index.json").is_file():  # a root folder (Apptainer sandbox)
        return _import_sandbox(path, tags, max_total)
    archive = Archive(path)
    try:
        source = read_image(archive)
        config = source.config_json()
        digest = source.digest
        all_tags = tuple(dict.fromkeys([*tags, *source.tags]))
        existing = _existing(digest, all_tags)
        if existing is not None:
            return existing, None
        diff_ids = list((config.get("rootfs") or {}).get("diff_ids") or [])
        if len(diff_ids) != len(source.layers):
            raise ImageRejected(f"{path}: the config lists {len(diff_ids)} layer(s), the manifest {len(source.layers)}")
        with _building(digest) as work:
            writer = LayerWriter(work / ROOTFS, max_layer=max_layer, max_total=max_total)
            for number, (name, expected) in enumerate(zip(source.layers, diff_ids, strict=True), 1):
                label = f"layer {number}/{len(source.layers)}"
                with layer_stream(archive, name) as stream:
                    got = writer.apply(stream, label)
                if got != expected:
                    raise ImageRejected(f"{label} ({name}) does not match the image's config: sha256 {got}, "
                                        f"config says {expected}")
            body = config.get("config") or {}
            manifest = {"digest": digest, "tags": list(all_tags), "source": source.kind,
                        "env": list(body.get("Env") or []), "working_dir": body.get("WorkingDir") or "",
                        "entrypoint": body.get("Entrypoint"), "cmd": body.get("Cmd"),
                        "user": body.get("User") or "", **_report_fields(writer.report)}
            return _publish(work, manifest), writer.report
    finally:
        archive.close()


def _import_sandbox(folder: Path, tags: tuple[str, ...], max_total: int) -> tuple[StoredImage, UnpackReport]:
    """An Apptainer sandbox folder (``apptainer build --sandbox``) or any unpacked root: copied under the same
    rules as a layer (no devices, no setuid, links kept as links), its digest a hash of the tree."""
    if not tags:
        raise ImageRejected(f"{folder}: a root folder carries no tag; pass --tag NAME (e.g. rexmle/aide:latest)")
    if not (folder / "usr").is_dir():
        raise ImageRejected(f"{folder}: not an image's root folder (no usr/), an OCI layout (index.json) or an "
                            "Apptainer sandbox (.singularity.d/)")
    digest = _tree_digest(folder)
    existing = _existing(digest, tags)
    if existing is not None:
        return existing, UnpackReport()
    report = UnpackReport()
    with _building(digest) as work:
        _copy_tree(folder, work / ROOTFS, report, max_total)
        manifest = {"digest": digest, "tags": list(tags), "source": "apptainer-sandbox",
                    "env": [f"{k}={v}" for k, v in _apptainer_env(folder).items()], "working_dir": "",
                    "entrypoint": None, "cmd": None, "user": "", **_report_fields(report)}
        return _publish(work, manifest), report


def _tree_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for name in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            digest.update(f"{os.path.relpath(full, folder)}\0{st.st_mode:o}\0".encode())
            if stat.S_ISLNK(st.st_mode):
                digest.update(os.readlink(full).encode())
            elif stat.S_ISREG(st.st_mode):
                with open(full, "rb") as fh:
                    while chunk := fh.read(1 << 20):
                        digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def _copy_tree(src: Path, dest: Path, report: UnpackReport, max_total: int) -> None:
    dest.mkdir(mode=0o755, exist_ok=True)
    for dirpath, dirnames, filenames in os.walk(src):
        rel_dir = os.path.relpath(dirpath, src)
        target_dir = dest / rel_dir if rel_dir != "." else dest
        for name in list(dirnames) + filenames:
            full, rel = os.path.join(dirpath, name), os.path.normpath(os.path.join(rel_dir, name))
            st = os.lstat(full)
            target = target_dir / name
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(full), target)
            elif stat.S_ISDIR(st.st_mode):
                target.mkdir(mode=(st.st_mode & 0o1755) | 0o700)
            elif stat.S_ISREG(st.st_mode):
                report.bytes_written += st.st_size
                if report.bytes_written > max_total:
                    raise ImageRejected(f"{full}: the folder holds more than the image's cap of {max_total} bytes "
                                        "(--max-image-size)")
                shutil.copyfile(full, target, follow_symlinks=False)
                if st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                    report.setuid_stripped.append(rel)
                os.chmod(target, st.st_mode & 0o1755)
            else:
                report.devices_skipped.append(rel)
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]


def _apptainer_env(folder: Path) -> dict[str, str]:
    """The plain ``export NAME="value"`` lines of the sandbox's environment scripts (no expansions)."""
    env = {"PATH": DEFAULT_PATH}
    scripts = folder / APPTAINER_ENV
    if scripts.is_dir() and not scripts.is_symlink():
        for script in sorted(scripts.glob("*.sh")):
            if script.is_symlink() or not script.is_file():
                continue
            for line in script.read_text(encoding="utf-8", errors="replace").splitlines():
                if match := _EXPORT.match(line.strip()):
                    env[match.group(1)] = match.group(2)
    return env


def _report_fields(report: UnpackReport) -> dict:
    return {"size": report.bytes_written, "devices_skipped": report.devices_skipped[:50],
            "setuid_stripped": report.setuid_stripped[:50], "imported": time.time()}


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


class _building:
    """A private folder to unpack into, removed unless published."""

    def __init__(self, digest: str) -> None:
        self.digest = digest

    def __enter__(self) -> Path:
        home = images_home()
        home.mkdir(parents=True, exist_ok=True)
        os.chmod(home, 0o755)
        self.work = Path(tempfile.mkdtemp(prefix=".import-", dir=home))
        (self.work / ROOTFS).mkdir(mode=0o755)
        return self.work

    def __exit__(self, *exc) -> None:
        if self.work.exists():
            _chmod_writable(self.work)
            shutil.rmtree(self.work, ignore_errors=True)


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


def _chmod_writable(folder: Path) -> None:
    for dirpath, dirnames, _ in os.walk(folder):
        for name in dirnames:
            full = os.path.join(dirpath, name)
            if not os.path.islink(full):
                os.chmod(full, 0o700)


def remove(image: StoredImage) -> None:
    _chmod_writable(image.folder)
    shutil.rmtree(image.folder)
