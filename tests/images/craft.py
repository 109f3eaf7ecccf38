"""Image archives written entry by entry, as a hostile image builder could: what the import tests feed in.

``docker_archive`` writes the layout ``docker save`` writes (manifest.json, the config, one tar per layer),
``oci_layout`` an OCI image layout folder with gzip layers; each layer is a list of :class:`Entry`.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Entry:
    name: str
    kind: bytes = tarfile.REGTYPE
    data: bytes = b""
    mode: int = 0o644
    link: str = ""
    size: int | None = None  # a declared size other than len(data): the header lies


def file(name: str, data: bytes = b"x", mode: int = 0o644) -> Entry:
    return Entry(name, tarfile.REGTYPE, data, mode)


def folder(name: str) -> Entry:
    return Entry(name, tarfile.DIRTYPE, mode=0o755)


def symlink(name: str, target: str) -> Entry:
    return Entry(name, tarfile.SYMTYPE, link=target, mode=0o777)


def hardlink(name: str, target: str) -> Entry:
    return Entry(name, tarfile.LNKTYPE, link=target)


def layer_tar(entries: list[Entry]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            info = tarfile.TarInfo(entry.name)
            info.type, info.mode, info.linkname = entry.kind, entry.mode, entry.link
            if entry.kind == tarfile.CHRTYPE:
                info.devmajor, info.devminor = 1, 3
            if entry.size is not None:  # only the header: tarfile would refuse a short body
                info.size = entry.size
                out.write(info.tobuf(tarfile.PAX_FORMAT))
                continue
            info.size = len(entry.data) if entry.kind == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(entry.data) if info.size else None)
    return out.getvalue()


def config_for(layers: list[bytes], env: list[str] | None = None) -> bytes:
    return json.dumps({"architecture": "amd64", "os": "linux",
                       "config": {"Env": env or ["PATH=/usr/local/bin:/usr/bin:/bin"], "WorkingDir": "/"},
                       "rootfs": {"type": "layers",
                                  "diff_ids": ["sha256:" + hashlib.sha256(t).hexdigest() for t in layers]}}).encode()


def docker_archive(path: Path, layers: list[list[Entry]], tags: tuple[str, ...] = ("evil/image:latest",),
                   config: bytes | None = None, raw_layers: list[bytes] = ()) -> Path:
    """``raw_layers``: layer tars made elsewhere (e.g. by GNU tar), after those built from ``layers``."""
    tars = [layer_tar(entries) for entries in layers] + list(raw_layers)
    config = config or config_for(tars)
    with tarfile.open(path, "w") as out:
        names = []
        for number, data in enumerate(tars):
            names.append(f"{number:03d}/layer.tar")
            _add(out, names[-1], data)
        config_name = hashlib.sha256(config).hexdigest() + ".json"
        _add(out, config_name, config)
        _add(out, "manifest.json", json.dumps([{"Config": config_name, "RepoTags": list(tags), "Layers": names}]).encode())
    return path


def oci_layout(path: Path, layers: list[list[Entry]], tag: str = "oci/image:1") -> Path:
    tars = [layer_tar(entries) for entries in layers]
    blobs = path / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def blob(data: bytes) -> dict:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return {"digest": f"sha256:{digest}", "size": len(data)}

    config = blob(config_for(tars, ["PATH=/opt/tool/bin:/usr/bin:/bin", "TOOL_HOME=/opt/tool"]))
    manifest = {"schemaVersion": 2, "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **blob(gzip.compress(t))}
                           for t in tars]}
    top = blob(json.dumps(manifest).encode())
    (path / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    (path / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", **top,
         "annotations": {"io.containerd.image.name": tag}}]}))
    return path


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def sparse_info(name: str, stored: int, logical: int) -> tarfile.TarInfo:
    """A member whose first ``stored`` bytes are in the archive and the rest, up to ``logical``, a hole (GNU
    sparse 0.1 in PAX headers): reading it yields ``logical`` bytes from a few KiB of archive."""
    info = tarfile.TarInfo(name)
    info.size = stored
    info.pax_headers = {"GNU.sparse.map": f"0,{stored}", "GNU.sparse.size": str(logical)}
    return info


def tar_of(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    """An uncompressed PAX tar of the given headers and bodies (headers as given: sizes may lie)."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as out:
        for info, data in members:
            out.addfile(info, io.BytesIO(data) if info.size else None)
    return path


def named(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data
