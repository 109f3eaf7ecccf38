"""Reading an image from what ``docker save``, ``skopeo copy`` or ``apptainer build --sandbox`` wrote.

Accepted: a docker-archive tar (``manifest.json`` beside the layers), an OCI image layout as a folder or a
tar (``oci-layout``, ``index.json``, ``blobs/sha256/``). Either gives the image's config (its digest is
the image id Docker shows) and its layers, each checked against the config's ``diff_ids`` while it is
applied. Nothing of the archive is ever extracted as it stands: members are read by name, and every name
the archive itself gives (a layer's path, a blob's digest) is checked first.

Every document (manifest, index, config) is read under ``MAX_JSON`` bytes and checked for the shape it
must have, so a malformed one is a refusal that names it, never a traceback; sparse members (which read
as far more bytes than the archive holds) are refused, and in a folder no path component may be a link.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import stat
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

from .unpack import ImageRejected

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
MAX_JSON = 16 << 20  # a manifest, index or config larger than this is not one
MAX_LAYERS = 1000  # Docker stops at 127; an archive listing more is not an image
MAX_MEMBERS = 65_536  # a docker-archive or OCI tar holds a few per layer
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
        """The config, checked for the shape the importer reads (so a wrong type is a refusal, not a crash)."""
        config = _mapping(_loads(self.config, "the image's config"), "the image's config")
        rootfs = _mapping(config.get("rootfs"), "the config's rootfs", optional=True)
        _strings(rootfs.get("diff_ids"), "the config's rootfs.diff_ids")
        body = _mapping(config.get("config"), "the config's config", optional=True)
        _strings(body.get("Env"), "the config's Env")
        for key in ("WorkingDir", "User"):
            if not isinstance(body.get(key) or "", str):
                raise ImageRejected(f"the config's {key} is not a string: {body.get(key)!r:.80}")
        for key in ("Entrypoint", "Cmd"):
            if not isinstance(body.get(key) or "", str):
                _strings(body.get(key), f"the config's {key}")
        return config


def _loads(data: bytes, what: str) -> object:
    """The JSON document ``what``; a refusal naming it when it is not JSON or nests deeper than the parser
    recurses (``[[[[...``)."""
    try:
        return json.loads(data)
    except ValueError as exc:
        raise ImageRejected(f"{what} is not JSON: {exc}") from None
    except RecursionError:
        raise ImageRejected(f"{what} nests deeper than any image document") from None


def _mapping(value: object, what: str, optional: bool = False) -> dict:
    """``value`` if it is a JSON object (``{}`` for an absent optional one), else a refusal naming ``what``."""
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise ImageRejected(f"{what} is not a JSON object: {value!r:.80}")
    return value


def _strings(value: object, what: str) -> list[str]:
    """``value`` if it is a list of strings (``[]`` for an absent one), else a refusal naming ``what``."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ImageRejected(f"{what} is not a list of strings: {value!r:.80}")
    return value


def _mappings(value: object, what: str) -> list[dict]:
    """``value`` if it is a list of JSON objects (``[]`` for an absent one), else a refusal naming ``what``."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise ImageRejected(f"{what} is not a list of JSON objects: {value!r:.80}")
    return value


class Archive:
    """Named members of a tar file or a folder, read without extracting anything: never a sparse member,
    never more than ``limit`` bytes of a document, never through a link in a folder."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._tar = None if path.is_dir() else _open_tar(path)

    def close(self) -> None:
        if self._tar is not None:
            self._tar.close()

    def has(self, name: str) -> bool:
        if self._tar is None:
            try:
                os.close(_open_in_folder(self.path, name))
            except (OSError, ImageRejected):
                return False
            return True
        try:
            return self._tar.getmember(name).isreg()
        except KeyError:
            return False

    @contextmanager
    def open(self, name: str) -> Iterator[BinaryIO]:
        _relative(name)
        if self._tar is None:
            try:
                fd = _open_in_folder(self.path, name)
            except OSError:
                raise ImageRejected(f"{self.path}: {name} is missing, not a regular file, or reached through a "
                                    "link") from None
            with os.fdopen(fd, "rb") as fh:
                yield fh
            return
        try:
            member = self._tar.getmember(name)
        except KeyError:
            raise ImageRejected(f"{self.path}: no member {name!r}") from None
        if not member.isreg():
            raise ImageRejected(f"{self.path}: member {name!r} is not a regular file")
        if member.issparse():  # reads as its logical size from a few bytes of archive; no exporter writes one
            raise ImageRejected(f"{self.path}: member {name!r} is a sparse file, which no image archive holds")
        body = self._tar.extractfile(member)
        assert body is not None  # a regular member always has a body
        yield cast(BinaryIO, body)

    def json(self, name: str):
        return _loads(self.read(name), f"{self.path}: {name}")

    def read(self, name: str, limit: int = MAX_JSON) -> bytes:
        """A document's bytes, refused past ``limit`` (only layers are streamed, everything else is read)."""
        with self.open(name) as fh:
            data = fh.read(limit + 1)
        if len(data) > limit:
            raise ImageRejected(f"{self.path}: {name} is larger than {limit} bytes")
        return data


def _open_in_folder(folder: Path, name: str) -> int:
    """A read-only descriptor of regular file ``name`` under ``folder``, opened one component at a time with
    ``O_NOFOLLOW``: a link anywhere on the way (``blobs`` -> elsewhere) fails with ``OSError``."""
    _relative(name)
    parts = [p for p in name.split("/") if p not in ("", ".")]
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(folder, flags | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            inner = os.open(part, flags | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        leaf = os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(leaf).st_mode):
        os.close(leaf)
        raise OSError(f"{name} is not a regular file")
    return leaf


def _open_tar(path: Path) -> tarfile.TarFile:
    """The archive with its member list loaded, refused past ``MAX_MEMBERS`` (tarfile keeps every header it
    has read in memory: a file of empty members would cost far more memory than its size)."""
    try:
        tar = tarfile.open(path, mode="r:")
        for count, _ in enumerate(tar, 1):
            if count > MAX_MEMBERS:
                tar.close()
                raise ImageRejected(f"{path}: more than {MAX_MEMBERS} members, which no image archive has")
        return tar
    except (tarfile.TarError, OSError, ValueError) as exc:
        raise ImageRejected(f"{path}: not a docker-archive or OCI tar ({exc})") from None


def _relative(name: str) -> None:
    if not isinstance(name, str) or not name or name.startswith("/") or ".." in name.split("/"):
        raise ImageRejected(f"the archive names a member {name!r} outside itself")


def _blob(digest: object) -> str:
    if not isinstance(digest, str) or not DIGEST.match(digest):
        raise ImageRejected(f"not a sha256 digest: {digest!r:.80}")
    return "blobs/sha256/" + digest.split(":", 1)[1]


def read_image(archive: Archive) -> ImageSource:
    """The one image of the archive (the first of a ``docker save`` of several)."""
    if archive.has("manifest.json"):
        return _docker_image(archive)
    if archive.has("index.json") and archive.has("oci-layout"):
        return _oci_image(archive)
    raise ImageRejected(f"{archive.path}: neither a docker-archive (manifest.json) nor an OCI layout "
                        "(oci-layout, index.json)")


def _docker_image(archive: Archive) -> ImageSource:
    manifest = archive.json("manifest.json")
    if not isinstance(manifest, list) or not manifest or not isinstance(manifest[0], dict):
        raise ImageRejected(f"{archive.path}: manifest.json holds no image")
    entry = manifest[0]
    config = entry.get("Config")
    if not isinstance(config, str):
        raise ImageRejected(f"{archive.path}: manifest.json names no Config: {config!r:.80}")
    layers = _layer_names(_strings(entry.get("Layers"), "manifest.json's Layers"), archive)
    for name in [config, *layers]:
        _relative(name)
    tags = _strings(entry.get("RepoTags"), "manifest.json's RepoTags")
    return ImageSource(archive.read(config), tuple(layers), tuple(tags), "docker-archive")


def _layer_names(layers: list[str], archive: Archive) -> list[str]:
    if len(layers) > MAX_LAYERS:
        raise ImageRejected(f"{archive.path}: the image lists {len(layers)} layers, more than {MAX_LAYERS}")
    return layers


def _oci_image(archive: Archive) -> ImageSource:
    index = _mapping(archive.json("index.json"), "index.json")
    descriptors = _mappings(index.get("manifests"), "index.json's manifests")
    if not descriptors:
        raise ImageRejected(f"{archive.path}: index.json lists no image")
    tags = tuple(tag for d in descriptors if (tag := _ref_name(d)))
    manifest = _mapping(archive.json(_blob(descriptors[0].get("digest"))), "the image's manifest")
    for _ in range(2):  # an index (several platforms): take linux/amd64
        if "manifests" not in manifest:
            break
        chosen = next((m for m in _mappings(manifest["manifests"], "the image index's manifests")
                       if _platform(m) == PLATFORM), None)
        if chosen is None:
            raise ImageRejected(f"{archive.path}: no {'/'.join(PLATFORM)} image in the index")
        manifest = _mapping(archive.json(_blob(chosen.get("digest"))), "the image's manifest")
    config = archive.read(_blob(_mapping(manifest.get("config"), "the manifest's config").get("digest")))
    layers = tuple(_blob(layer.get("digest")) for layer in _mappings(manifest.get("layers"), "the manifest's layers"))
    return ImageSource(config, tuple(_layer_names(list(layers), archive)), tags, "oci-layout")


def _ref_name(descriptor: dict) -> str | None:
    """The tag an OCI descriptor carries (containerd's annotation, else the OCI one), if a string."""
    annotations = _mapping(descriptor.get("annotations"), "a descriptor's annotations", optional=True)
    name = annotations.get("io.containerd.image.name") or annotations.get("org.opencontainers.image.ref.name")
    return name if isinstance(name, str) and name else None


def _platform(descriptor: dict) -> tuple[object, object]:
    platform = _mapping(descriptor.get("platform"), "a descriptor's platform", optional=True)
    return platform.get("os", "linux"), platform.get("architecture", "amd64")


@contextmanager
def layer_stream(archive: Archive, name: str) -> Iterator[BinaryIO]:
    """A layer's uncompressed tar stream (gzip detected by its magic; zstd refused with the fix)."""
    with archive.open(name) as raw:
        head = raw.read(4)
        rest = cast(BinaryIO, _Prefixed(head, raw))
        if head[:2] == GZIP_MAGIC:
            with gzip.GzipFile(fileobj=rest, mode="rb") as unzipped:
                yield cast(BinaryIO, unzipped)
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
