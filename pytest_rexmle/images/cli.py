"""``rexmle images build|list|export|import``: building the agents' images (the recipes of
:mod:`pytest_rexmle.agents.image_build`) and moving them to machines without a Docker engine.

``export --agent NAME FILE`` (where Docker runs) writes the agent's image as one docker-archive (``docker
save``); ``import FILE`` unpacks a docker-archive, an OCI layout (folder or tar) or an Apptainer sandbox
folder into the image cache; ``list`` says, per agent, where its image is usable: the Docker engine, the
cache (the local and Slurm runtimes), or neither.

Every name printed here (a tag, an archive's own tags, a refusal's text) may come from a hostile archive,
so it is shown through :func:`shown`: control characters appear escaped, never reach the terminal.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import BinaryIO

from ..agents.image_build import (
    BASE_TAG,
    RECIPES,
    BaseNotFetched,
    build_image,
    default_ca_bundle,
    fetch_routes,
    local_image,
)
from ..errors import RexmleError
from . import store
from .runnable import agent_of_image
from .unpack import DEFAULT_MAX_ENTRIES, DEFAULT_MAX_LAYER, DEFAULT_MAX_SECONDS, DEFAULT_MAX_TOTAL, ImageRejected


def shown(text: object) -> str:
    """``text`` safe for a terminal: every non-printable character (ESC, CR, BEL, a bidi override) escaped."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text))


def _engine():
    """The local Docker engine's client, or None (nothing here needs one except ``export``)."""
    try:
        import docker  # start-up: docker only where this runs

        client = docker.from_env(timeout=600)
        client.ping()
        return client
    except Exception:  # ImportError, DockerException, connection errors
        return None


def export_image(name: str, dest: Path, client) -> str:
    """``docker save`` of image ``name`` into ``dest`` (written beside, then renamed); returns its id."""
    image = local_image(client, name)
    if image is None:
        agent = agent_of_image(name)
        build = f"`rexmle images build --agent {agent}`" if agent else "`docker build` (or `docker load`)"
        raise RexmleError(f"image {name} is not in the local Docker engine; build it with {build} first")
    partial = dest.with_name(f".{dest.name}.partial")
    with open_partial(partial) as fh:
        try:
            for chunk in image.save(named=True):
                fh.write(chunk)
        except Exception as exc:  # the engine failed midway (docker.errors.APIError): no half archive is left
            partial.unlink(missing_ok=True)
            raise RexmleError(f"the Docker engine could not save {name}: {exc}") from None
    partial.replace(dest)  # rename: a link planted at dest is replaced, never written through
    return image.id


def open_partial(partial: Path) -> BinaryIO:
    """A new file at ``partial``, created here (``O_EXCL|O_NOFOLLOW``): whatever already is there, a link
    someone planted to make the export overwrite another file included, is refused, never written through."""
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        raise RexmleError(f"{partial} already exists (an interrupted export, or a link planted there); "
                          "remove it and export again") from None
    return os.fdopen(fd, "wb")


def run_export(args: argparse.Namespace) -> int:
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
        print(f"rexmle images export: {shown(exc)}", file=sys.stderr)
        return 1
    size = Path(args.file).stat().st_size
    print(f"exported {shown(name)} ({image_id[:19]}) to {shown(args.file)} ({size / 1e6:.0f} MB); on the cluster: "
          f"rexmle images import --tag {shown(name)} {shown(Path(args.file).name)}")
    return 0


def run_import(args: argparse.Namespace) -> int:
    if not args.file:
        print("rexmle images import: give the FILE (docker-archive or OCI tar, OCI layout or Apptainer sandbox "
              "folder)", file=sys.stderr)
        return 2
    tags = (args.tag,) if args.tag else ()
    limits = store.Limits(max_layer=args.max_layer_size, max_total=args.max_image_size,
                          max_entries=args.max_entries, max_seconds=args.max_import_seconds)
    try:
        image, report = store.import_archive(Path(args.file), tags=tags, adopt_tags=args.adopt_tags, limits=limits)
    except ImageRejected as exc:
        print(f"rexmle images import: refused {shown(args.file)}: {shown(exc)}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"rexmle images import: {shown(args.file)}: {shown(exc)}", file=sys.stderr)
        return 1
    names = ", ".join(shown(tag) for tag in image.tags)
    if report is None:
        print(f"{image.digest[:19]} is already in the cache ({names or 'untagged'})")
    else:
        print(f"imported {names or image.digest} ({image.digest[:19]}, {report.bytes_written / 1e6:.0f} MB) "
              f"into {shown(image.folder)}")
        for note in report.notes():
            print(f"  {shown(note)}")
    _untagged_hint(image)
    return 0


def _untagged_hint(image: store.StoredImage) -> None:
    """Say how to name an image imported without a tag (its archive's own tags are not adopted unasked)."""
    if image.tags:
        return
    own = [shown(tag) for tag in image.manifest.get("archive_tags") or []]
    named = f"; the archive calls itself {', '.join(own)}" if own else ""
    print(f"  untagged: run it as {image.digest}, or import again with --tag NAME{named} (--adopt-tags takes "
          "the archive's own names)")


def run_list() -> int:
    """Each agent's image and where it is usable; then cached images no agent names."""
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
        tags = ", ".join(shown(tag) for tag in image.tags) or "-"
        print(f"{'(imported)':<15} {tags:<32} {'':<16} {shown(image.digest)[:19]}")
    print(f"cache: {store.images_home()}")
    return 0


def add_images_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("build", "list", "export", "import"),
                        help="build images; list the agents' images and where each is usable; export one to a "
                             "file (where Docker runs); import a file into the image cache (no Docker needed)")
    parser.add_argument("--agent", action="append", choices=sorted(RECIPES), default=None,
                        help="image(s) to build (repeatable; default: base and every agent)")
    parser.add_argument("--base", default=None,
                        help=f"base image of agent images, one the local engine has (default {BASE_TAG}, the CUDA "
                             "PyTorch base; e.g. rexmle/test-base:latest offline); nothing is pulled")
    parser.add_argument("--build-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="set a Dockerfile ARG (repeatable), e.g. ML_MASTER_REF=<commit> or RDAGENT_LOCK= "
                             "(empty: resolve R&D-Agent's dependencies instead of installing its lock file)")
    parser.add_argument("--source", default=None, metavar="DIR",
                        help="build ml-master from this local checkout instead of cloning its pinned commit")
    parser.add_argument("--tag", default=None, help="tag of the built image (only with a single --agent); export: "
                        "the image to save (default the agent's); import: a tag to store it under")
    parser.add_argument("--ca-bundle", default=None,
                        help="CA bundle for pip during the build (TLS-intercepting proxies; default $PIP_CERT, "
                             "$REQUESTS_CA_BUNDLE or $SSL_CERT_FILE)")
    parser.add_argument("--no-cache", action="store_true", help="do not reuse cached build layers")
    parser.add_argument("--network", default=None, help="network of the build containers (e.g. host)")
    parser.add_argument("file", nargs="?", default=None, metavar="FILE",
                        help="export: the archive to write; import: a docker-archive or OCI tar, an OCI layout "
                             "folder, or an Apptainer sandbox folder (with --tag)")
    parser.add_argument("--max-layer-size", type=int, default=DEFAULT_MAX_LAYER, metavar="BYTES",
                        help="import: refuse a layer that unpacks to more than this (default 64 GiB)")
    parser.add_argument("--max-image-size", type=int, default=DEFAULT_MAX_TOTAL, metavar="BYTES",
                        help="import: refuse an image that unpacks to more than this (default 128 GiB)")
    parser.add_argument("--max-entries", type=int, default=DEFAULT_MAX_ENTRIES, metavar="N",
                        help="import: refuse an image of more than N entries (files, folders, links; default 2 "
                             "million)")
    parser.add_argument("--max-import-seconds", type=float, default=DEFAULT_MAX_SECONDS, metavar="S",
                        help="import: give up after S seconds (default 4 hours)")
    parser.add_argument("--adopt-tags", action="store_true",
                        help="import: also store the image under the tags the archive gives itself (RepoTags, "
                             "OCI ref names); without it only --tag names it, so an archive cannot take over "
                             "another image's tag")


def run_images(args: argparse.Namespace) -> int:
    if args.action in ("list", "export", "import"):
        return {"list": lambda: run_list(), "export": lambda: run_export(args),
                "import": lambda: run_import(args)}[args.action]()
    names = args.agent or list(RECIPES)
    if args.tag and len(names) != 1:
        print("rexmle images: --tag needs exactly one --agent", file=sys.stderr)
        return 2
    if args.source and any(not RECIPES[n].takes_source for n in names if n != "base"):
        print("rexmle images: --source applies to --agent ml-master only", file=sys.stderr)
        return 2
    build_args: dict[str, str] = {}
    for item in args.build_arg or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            print(f"rexmle images: --build-arg wants KEY=VALUE, got {item!r}", file=sys.stderr)
            return 2
        build_args[key.strip()] = value
    try:
        import docker  # start-up: docker only where this runs

        client = docker.from_env(timeout=600)
        client.ping()
    except Exception as exc:  # ImportError, DockerException, connection errors
        print(f"rexmle images: no Docker engine ({exc}); `pip install docker` and start dockerd", file=sys.stderr)
        return 2
    base = args.base or BASE_TAG
    if "base" not in names and args.base is None and any(RECIPES[n].needs_base for n in names):
        if local_image(client, base) is None:
            print(f"rexmle images: {base} is missing; building it first", file=sys.stderr)
            names = ["base", *names]
    ordered = sorted(set(names), key=lambda n: (RECIPES[n].needs_base, n))
    try:
        for name in ordered:
            image_id = build_image(name, tag=args.tag, base=base, ca_bundle=args.ca_bundle or default_ca_bundle(),
                                   client=client, nocache=args.no_cache, network_mode=args.network,
                                   source=args.source if RECIPES[name].takes_source else None,
                                   buildargs=build_args)
            print(f"built {args.tag or RECIPES[name].tag} ({image_id[:19]})")
    except BaseNotFetched as exc:
        print(f"rexmle images: {exc}\n{fetch_routes(exc.image, list(dict.fromkeys(args.agent or [])))}",
              file=sys.stderr)
        return 1
    except RexmleError as exc:
        print(f"rexmle images: {exc}", file=sys.stderr)
        return 1
    return 0
