"""Reading an image from what ``docker save``, ``skopeo copy`` or ``apptainer build --sandbox`` wrote.

Accepted: a docker-archive tar (``manifest.json`` beside the layers), an OCI image layout as a folder or a
tar (``oci-layout``, ``index.json``, ``blobs/sha256/``). Either gives the image's config (its digest is
the image id Docker shows) and its layers, each checked against the config's ``diff_ids`` while it is
applied. Nothing of the archive is ever extracted as it stands: members are read by name, and every name
the archive itself gives (a layer's path, a blob's digest) is checked first.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from .unpack import ImageRejected

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
MAX_JSON = 16 << 20  # a manifest, index or config larger than this is not one
PLATFORM = ("linux", "amd64")


@dataclass(frozen=True)
class ImageSource:
    """One image inside an archive: its config's bytes, its layers (names within the archive) and tags."""

    config: bytes
    layers: tuple[str, ...]
    tags: tuple[str, ...]
    kind: str  # "docker-archive" or "oci-layout"

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.config).hexdigest()

    def config_json(self) -> dict:
        try:
            return json.loads(self.config)
        except ValueError as exc:
            raise ImageRejected(f"the image's config is not JSON: {exc}") from None


class Archive:
    """Named members of a tar file or a folder, read without extracting anything."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._tar = None if path.is_dir() else _open_tar(path)

    def close(self) -> None:
        if self._tar is not None:
            self._tar.close()

    def has(self, name: str) -> bool:
        if self._tar is None:
            return (self.path / name).is_file() and not (self.path / name).is_symlink()
        try:
            return self._tar.getmember(name).isreg()
        except KeyError:
            return False

    @contextmanager
    def open(self, name: str) -> Iterator[BinaryIO]:
        _relative(name)
        if self._tar is None:
            path = self.path / name
            if path.is_symlink() or not path.is_file():
                raise ImageRejected(f"{self.path}: {name} is missing or not a regular file")
            with open(path, "rb") as fh:
                yield fh
            return
        try:
            member = self._tar.getmember(name)
        except KeyError:
            raise ImageRejected(f"{self.path}: no member {name!r}") from None
        if not member.isreg():
            raise ImageRejected(f"{self.path}: member {name!r} is not a regular file")
        yield self._tar.extractfile(member)

    def json(self, name: str):
        with self.open(name) as fh:
            data = fh.read(MAX_JSON + 1)
        if len(data) > MAX_JSON:
            raise ImageRejected(f"{self.path}: {name} is larger than {MAX_JSON} bytes")
        try:
            return json.loads(data)
        except ValueError as exc:
            raise ImageRejected(f"{self.path}: {name} is not JSON: {exc}") from None

    def read(self, name: str) -> bytes:
        with self.open(name) as fh:
            return fh.read()


def _open_tar(path: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(path, mode="r:")
    except (tarfile.TarError, OSError) as exc:
        raise ImageRejected(f"{path}: not a docker-archive or OCI tar ({exc})") from None


def _relative(name: str) -> None:
    if not isinstance(name, str) or not name or name.startswith("/") or ".." in name.split("/"):
        raise ImageRejected(f"the archive names a member {name!r} outside itself")


def _blob(digest: str) -> str:
    if not isinstance(digest, str) or not DIGEST.match(digest):
        raise ImageRejected(f"not a sha256 digest: {digest!r}")
    return "blobs/sha256/" + digest.split(":", 1)[1]


def read_image(archive: Archive) -> ImageSource:
    """The one image of the archive (the first of a ``docker save`` of several)."""
    if archive.has("manifest.json"):
        manifest = archive.json("manifest.json")
        if not isinstance(manifest, list) or not manifest or not isinstance(manifest[0], dict):
            raise ImageRejected(f"{archive.path}: manifest.json holds no image")
        entry = manifest[0]
        layers = entry.get("Layers") or []
        for name in [entry.get("Config"), *layers]:
            _relative(name)
        return ImageSource(archive.read(entry["Config"]), tuple(layers), tuple(entry.get("RepoTags") or ()),
                           "docker-archive")
    if archive.has("index.json") and archive.has("oci-layout"):
        return _oci_image(archive)
    raise ImageRejected(f"{archive.path}: neither a docker-archive (manifest.json) nor an OCI layout "
                        "(oci-layout, index.json)")


def _oci_image(archive: Archive) -> ImageSource:
    index = archive.json("index.json")
    descriptors = index.get("manifests") or [] if isinstance(index, dict) else []
    if not descriptors:
        raise ImageRejected(f"{archive.path}: index.json lists no image")
    top = descriptors[0]
    tags = tuple(str(t) for d in descriptors for t in [(d.get("annotations") or {}).get("io.containerd.image.name")
                                                        or (d.get("annotations") or {}).get("org.opencontainers.image.ref.name")]
                 if t)
    manifest = archive.json(_blob(top.get("digest")))
    for _ in range(2):  # an index (several platforms): take linux/amd64
        if "manifests" not in manifest:
            break
        chosen = next((m for m in manifest["manifests"]
                       if (m.get("platform") or {}).get("os", "linux") == PLATFORM[0]
                       and (m.get("platform") or {}).get("architecture", "amd64") == PLATFORM[1]), None)
        if chosen is None:
            raise ImageRejected(f"{archive.path}: no {'/'.join(PLATFORM)} image in the index")
        manifest = archive.json(_blob(chosen.get("digest")))
    config = archive.read(_blob((manifest.get("config") or {}).get("digest")))
    layers = tuple(_blob(layer.get("digest")) for layer in manifest.get("layers") or [])
    return ImageSource(config, layers, tags, "oci-layout")


@contextmanager
def layer_stream(archive: Archive, name: str) -> Iterator[BinaryIO]:
    """A layer's uncompressed tar stream (gzip detected by its magic; zstd refused with the fix)."""
    with archive.open(name) as raw:
        head = raw.read(4)
        rest = _Prefixed(head, raw)
        if head[:2] == GZIP_MAGIC:
            with gzip.GzipFile(fileobj=rest, mode="rb") as unzipped:
                yield unzipped
        elif head == ZSTD_MAGIC:
            raise ImageRejected(f"layer {name} is zstd-compressed, which this importer does not read; export "
                                "it with `docker save` (uncompressed layers) or `skopeo copy --dest-compress-format gzip`")
        else:
            yield rest


class _Prefixed:
    """``head`` followed by the rest of ``stream`` (the magic bytes, once read, are given back)."""

    def __init__(self, head: bytes, stream: BinaryIO) -> None:
        self.head, self.stream = head, stream

    def read(self, size: int = -1) -> bytes:
        if self.head:
            if size is None or size < 0:
                data, self.head = self.head + self.stream.read(), b""
                return data
            data, self.head = self.head[:size], self.head[size:]
            if len(data) < size:
                data += self.stream.read(size - len(data))
            return data
        return self.stream.read(size)
