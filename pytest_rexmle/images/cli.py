"""``rexmle images export|import|list``: moving agent images to machines without a Docker engine.

``export --agent NAME FILE`` (where Docker runs) writes the agent's image as one docker-archive (``docker
save``); ``import FILE`` unpacks a docker-archive, an OCI layout (folder or tar) or an Apptainer sandbox
folder into the image cache; ``list`` says, per agent, where its image is usable: the Docker engine, the
cache (the local and Slurm runtimes), or neither.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import RexmleError
from . import store
from .unpack import DEFAULT_MAX_LAYER, DEFAULT_MAX_TOTAL, ImageRejected


def _engine():
    """The local Docker engine's client, or None (nothing here needs one except ``export``)."""
    try:
        import docker

        client = docker.from_env(timeout=600)
        client.ping()
        return client
    except Exception:  # ImportError, DockerException, connection errors
        return None


def export_image(name: str, dest: Path, client) -> str:
    """``docker save`` of image ``name`` into ``dest`` (written beside, then renamed); returns its id."""
    from ..agents.image_build import local_image

    image = local_image(client, name)
    if image is None:
        from .runnable import agent_of_image

        agent = agent_of_image(name)
        build = f"`rexmle images build --agent {agent}`" if agent else "`docker build` (or `docker load`)"
        raise RexmleError(f"image {name} is not in the local Docker engine; build it with {build} first")
    partial = dest.with_name(f".{dest.name}.partial")
    try:
        with open(partial, "wb") as fh:
            for chunk in image.save(named=True):
                fh.write(chunk)
        partial.replace(dest)
    except Exception as exc:  # the engine failed midway (docker.errors.APIError): no half archive is left
        partial.unlink(missing_ok=True)
        raise RexmleError(f"the Docker engine could not save {name}: {exc}") from None
    return image.id


def run_export(args: argparse.Namespace) -> int:
    from ..agents.image_build import RECIPES

    if not args.file or not args.agent or len(args.agent) != 1:
        print("rexmle images export: give one --agent NAME and the FILE to write", file=sys.stderr)
        return 2
    name = args.tag or RECIPES[args.agent[0]].tag
    client = _engine()
    if client is None:
        print("rexmle images export: no Docker engine answers here; export on the machine that built the "
              "image (or `docker save IMAGE -o FILE` there)", file=sys.stderr)
        return 2
    try:
        image_id = export_image(name, Path(args.file), client)
    except (RexmleError, OSError) as exc:
        print(f"rexmle images export: {exc}", file=sys.stderr)
        return 1
    size = Path(args.file).stat().st_size
    print(f"exported {name} ({image_id[:19]}) to {args.file} ({size / 1e6:.0f} MB); on the cluster: "
          f"rexmle images import {Path(args.file).name}")
    return 0


def run_import(args: argparse.Namespace) -> int:
    if not args.file:
        print("rexmle images import: give the FILE (docker-archive or OCI tar, OCI layout or Apptainer sandbox "
              "folder)", file=sys.stderr)
        return 2
    tags = (args.tag,) if args.tag else ()
    try:
        image, report = store.import_archive(Path(args.file), tags=tags, max_layer=args.max_layer_size,
                                             max_total=args.max_image_size)
    except ImageRejected as exc:
        print(f"rexmle images import: refused {args.file}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"rexmle images import: {args.file}: {exc}", file=sys.stderr)
        return 1
    if report is None:
        print(f"{image.digest[:19]} is already in the cache ({', '.join(image.tags)})")
        return 0
    print(f"imported {', '.join(image.tags) or image.digest} ({image.digest[:19]}, {report.bytes_written / 1e6:.0f} MB) "
          f"into {image.folder}")
    for note in report.notes():
        print(f"  {note}")
    return 0


def run_list() -> int:
    """Each agent's image and where it is usable; then cached images no agent names."""
    from ..agents.image_build import RECIPES, local_image

    client = _engine()
    cached = store.stored()
    named = set()
    print(f"{'agent':<15} {'image':<32} {'docker engine':<16} cache (local/slurm runtimes)")
    for recipe in RECIPES.values():
        in_engine = "no engine" if client is None else ("yes" if local_image(client, recipe.tag) else "-")
        hit = store.find(recipe.tag)
        named.add(recipe.tag)
        print(f"{recipe.name:<15} {recipe.tag:<32} {in_engine:<16} {hit.digest[:19] if hit else '-'}")
    others = [image for image in cached if not set(image.tags) & named]
    for image in others:
        print(f"{'(imported)':<15} {', '.join(image.tags) or '-':<32} {'':<16} {image.digest[:19]}")
    print(f"cache: {store.images_home()}")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", default=None, metavar="FILE",
                        help="export: the archive to write; import: a docker-archive or OCI tar, an OCI layout "
                             "folder, or an Apptainer sandbox folder (with --tag)")
    parser.add_argument("--max-layer-size", type=int, default=DEFAULT_MAX_LAYER, metavar="BYTES",
                        help="import: refuse a layer that unpacks to more than this (default 64 GiB)")
    parser.add_argument("--max-image-size", type=int, default=DEFAULT_MAX_TOTAL, metavar="BYTES",
                        help="import: refuse an image that unpacks to more than this (default 128 GiB)")
