"""``rexmle images build [--agent NAME]``: build the base image and the agents' images locally.

Each recipe is ``images/<folder>/Dockerfile``; the build context is the whole ``images/`` folder so
every agent image can copy the shared start-script helpers (``images/common/``). Agent images start
``FROM ${BASE}`` (default ``rexmle/base:latest``), so ``--base`` can put an agent on another base —
the tests put AIDE on the offline test image this way.

Behind a TLS-intercepting proxy, ``--ca-bundle FILE`` (default ``$PIP_CERT``, ``$REQUESTS_CA_BUNDLE``
or ``$SSL_CERT_FILE`` when set) is placed in the context as ``extra-ca.pem`` and used by pip during the
build only; it is removed from the image afterwards.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .errors import RexmleError


@dataclass(frozen=True)
class Recipe:
    name: str           # the --agent name
    folder: str         # images/<folder>/Dockerfile
    tag: str            # what the runtime starts
    needs_base: bool = True


RECIPES = {r.name: r for r in (
    Recipe("base", "base", "rexmle/base:latest", needs_base=False),
    Recipe("aide", "aide", "rexmle/aide:latest"),
    Recipe("ml-master", "ml-master", "rexmle/ml-master:latest"),
    Recipe("rd-agent", "rd-agent", "rexmle/rd-agent:latest"),
)}
BASE_TAG = RECIPES["base"].tag


def images_root() -> Path:
    """``$REXMLE_IMAGES_DIR``, the source checkout's ``images/``, or the installed copy (``_images``)."""
    env = os.environ.get("REXMLE_IMAGES_DIR")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "images", here / "_images"):
        if (candidate / "common").is_dir():
            return candidate
    raise RexmleError(f"no images/ folder found next to {here}; set REXMLE_IMAGES_DIR")


def default_ca_bundle() -> str | None:
    for var in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        if os.environ.get(var) and Path(os.environ[var]).is_file():
            return os.environ[var]
    return None


def build_context(root: Path, recipe: Recipe, ca_bundle: str | None, into: Path) -> Path:
    """A minimal context: the recipe's folder, ``common/`` and ``extra-ca.pem`` (possibly empty)."""
    for folder in ("common", recipe.folder):
        shutil.copytree(root / folder, into / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (into / "extra-ca.pem").write_bytes(Path(ca_bundle).read_bytes() if ca_bundle else b"")
    return into


def build_image(name: str, tag: str | None = None, base: str | None = None, ca_bundle: str | None = None,
                client=None, nocache: bool = False, network_mode: str | None = None,
                log: Callable[[str], None] = print) -> str:
    """Build one recipe; returns the image id. Raises RexmleError with the build's last lines on failure."""
    if name not in RECIPES:
        raise RexmleError(f"unknown image {name!r}; known: {', '.join(RECIPES)}")
    recipe = RECIPES[name]
    if client is None:
        import docker

        client = docker.from_env(timeout=600)
    tag = tag or recipe.tag
    buildargs = {"BASE": base or BASE_TAG} if recipe.needs_base else {}
    tail: list[str] = []
    with tempfile.TemporaryDirectory(prefix="rexmle-image-") as tmp:
        context = build_context(images_root(), recipe, ca_bundle, Path(tmp))
        stream = client.api.build(path=str(context), dockerfile=f"{recipe.folder}/Dockerfile", tag=tag,
                                  buildargs=buildargs, rm=True, forcerm=True, decode=True, nocache=nocache,
                                  network_mode=network_mode, pull=False)
        image_id = None
        for chunk in stream:
            if "error" in chunk:
                raise RexmleError(f"building {tag} failed: {chunk['error'].strip()}\n" + "".join(tail[-20:]))
            line = chunk.get("stream", "")
            if line:
                tail.append(line)
                if line.strip():
                    log(line.rstrip())
            if "aux" in chunk and "ID" in chunk["aux"]:
                image_id = chunk["aux"]["ID"]
    return image_id or client.images.get(tag).id


def add_images_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("build", "list"), help="build images, or list the recipes and their tags")
    parser.add_argument("--agent", action="append", choices=sorted(RECIPES), default=None,
                        help="image(s) to build (repeatable; default: base and every agent)")
    parser.add_argument("--base", default=None, help=f"base image of agent images (default {BASE_TAG})")
    parser.add_argument("--tag", default=None, help="tag of the built image (only with a single --agent)")
    parser.add_argument("--ca-bundle", default=None,
                        help="CA bundle for pip during the build (TLS-intercepting proxies; default $PIP_CERT, "
                             "$REQUESTS_CA_BUNDLE or $SSL_CERT_FILE)")
    parser.add_argument("--no-cache", action="store_true", help="do not reuse cached build layers")
    parser.add_argument("--network", default=None, help="network of the build containers (e.g. host)")


def run_images(args: argparse.Namespace) -> int:
    if args.action == "list":
        for recipe in RECIPES.values():
            print(f"{recipe.name:<10} {recipe.tag:<26} images/{recipe.folder}/Dockerfile")
        return 0
    names = args.agent or list(RECIPES)
    if args.tag and len(names) != 1:
        print("rexmle images: --tag needs exactly one --agent", file=sys.stderr)
        return 2
    try:
        import docker

        client = docker.from_env(timeout=600)
        client.ping()
    except Exception as exc:  # ImportError, DockerException, connection errors
        print(f"rexmle images: no Docker engine ({exc}); `pip install docker` and start dockerd", file=sys.stderr)
        return 2
    base = args.base or BASE_TAG
    if "base" not in names and args.base is None and any(RECIPES[n].needs_base for n in names):
        try:
            client.images.get(base)
        except Exception:
            print(f"rexmle images: {base} is missing; building it first", file=sys.stderr)
            names = ["base", *names]
    ordered = sorted(set(names), key=lambda n: (RECIPES[n].needs_base, n))
    try:
        for name in ordered:
            image_id = build_image(name, tag=args.tag, base=base, ca_bundle=args.ca_bundle or default_ca_bundle(),
                                   client=client, nocache=args.no_cache, network_mode=args.network)
            print(f"built {args.tag or RECIPES[name].tag} ({image_id[:19]})")
    except RexmleError as exc:
        print(f"rexmle images: {exc}", file=sys.stderr)
        return 1
    return 0
