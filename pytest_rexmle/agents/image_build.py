"""The recipes of the base image and the agents' images, built locally (``rexmle images build [--agent NAME]``,
whose command line is :mod:`pytest_rexmle.images.cli`).

Each agent folder with a ``Dockerfile`` (``pytest_rexmle/agents/<folder>/``) is a recipe, named after the
folder (``claude_code`` → ``claude-code``, tag ``rexmle/claude-code:latest``); ``common/Dockerfile`` is the
base image (``base``). An agent whose image is built like others' keeps an ``image.toml`` in its folder
instead: ``recipe`` names a shared Dockerfile of ``common/`` (``common/node_cli.Dockerfile`` for the npm
coding CLIs) and ``[build-args]`` pins what is the agent's own; the build adds ``AGENT`` (the name) and
``AGENT_FOLDER``. The build context holds the recipe's folder and ``common/``, so every agent image
can copy the shared start-script helpers. Agent images start
``FROM ${BASE}`` (default ``rexmle/base:latest``, the CUDA PyTorch base), so ``--base`` can put an agent
on any image the local engine already has, such as a lab's own CUDA image. Nothing is pulled for an agent
image: a base that is not in the local engine is a clear error, not a registry request. A base needs
``python3`` with ``pip``. (The base recipe's own ``FROM pytorch/pytorch:…`` is pulled by the engine; CI,
without Docker Hub, answers it with a loopback registry mirror: .ci/registry-mirror.sh.)

``--source DIR``, ``--build-arg`` and ``--ca-bundle`` are described by ``rexmle images build --help``
(:mod:`pytest_rexmle.images.cli`): a source checkout is copied into the context as ``<recipe>/source/``,
the CA bundle as ``extra-ca.pem``, which pip uses during the build only (it is removed from the image).

Every built image carries a ``rexmle.recipe`` label: a hash of the build context (recipe, shared
helpers, source checkout), the build arguments and the base image's id. When the tag already carries
that label the build is skipped (``--no-cache`` forces it), so a repeated CI run costs a hash.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import RexmleError


@dataclass(frozen=True)
class Recipe:
    name: str           # the --agent name
    folder: str         # agents/<folder>/
    tag: str            # what the runtime starts
    needs_base: bool = True
    #: whether ``--source DIR`` applies (the recipe builds from <folder>/source/ when it is not empty)
    takes_source: bool = False
    #: the Dockerfile, relative to agents/: ``<folder>/Dockerfile``, or a shared one named by image.toml
    dockerfile: str = ""
    #: build args of a shared recipe (image.toml's, then AGENT and AGENT_FOLDER), as (key, value) pairs
    buildargs: tuple[tuple[str, str], ...] = ()


#: what an agent folder holds instead of a Dockerfile when its image comes from a shared recipe
IMAGE_TOML = "image.toml"


def recipes_root() -> Path:
    """The agents' folders: this package, in a checkout and installed alike."""
    return Path(__file__).resolve().parent


def _shared_recipe(folder: Path) -> tuple[str, tuple[tuple[str, str], ...]]:
    """image.toml: the shared Dockerfile of ``common/`` it names and the build args that make it this agent's."""
    path = folder / IMAGE_TOML
    try:
        spec = tomllib.loads(path.read_text(encoding="utf-8"))
        dockerfile, args = spec["recipe"], spec.get("build-args", {})
    except (tomllib.TOMLDecodeError, KeyError) as exc:
        raise RexmleError(f"{path}: not an image recipe (wants `recipe` and [build-args]): {exc}") from exc
    if not str(dockerfile).startswith("common/") or not (folder.parent / dockerfile).is_file():
        raise RexmleError(f"{path}: recipe {dockerfile!r} is not a Dockerfile in agents/common/")
    pairs = {str(k): str(v) for k, v in args.items()}
    pairs.update(AGENT=folder.name.replace("_", "-"), AGENT_FOLDER=folder.name)
    return dockerfile, tuple(pairs.items())


def _recipe(folder: Path) -> Recipe:
    if folder.name == "common":
        return Recipe("base", "common", "rexmle/base:latest", needs_base=False, dockerfile="common/Dockerfile")
    name = folder.name.replace("_", "-")
    buildargs: tuple[tuple[str, str], ...] = ()
    if (folder / "Dockerfile").is_file():
        dockerfile = f"{folder.name}/Dockerfile"
    else:
        dockerfile, buildargs = _shared_recipe(folder)
    # a recipe that copies ``<folder>/source/`` builds from a checkout given with --source
    takes_source = f"COPY {folder.name}/source/" in (folder.parent / dockerfile).read_text(encoding="utf-8")
    return Recipe(name, folder.name, f"rexmle/{name}:latest", takes_source=takes_source, dockerfile=dockerfile,
                  buildargs=buildargs)


_FOLDERS = {path.parent for pattern in ("*/Dockerfile", f"*/{IMAGE_TOML}")
            for path in recipes_root().glob(pattern)}
RECIPES = {r.name: r for r in sorted(map(_recipe, _FOLDERS), key=lambda r: (r.needs_base, r.name))}
BASE_TAG = RECIPES["base"].tag
RECIPE_LABEL = "rexmle.recipe"
#: what --source leaves out of the context (VCS data, caches, virtual environments)
SOURCE_IGNORE = shutil.ignore_patterns(".git", "__pycache__", "*.pyc", ".venv", "venv", ".mypy_cache",
                                       ".pytest_cache", "logs", "workspaces")


def from_image(recipe: Recipe, buildargs: dict[str, str] | None = None) -> str:
    """The image the recipe's first ``FROM`` names, its ``${ARG}`` filled from the ARG defaults above it, the
    recipe's own pins and ``buildargs`` (``BASE`` defaults to :data:`BASE_TAG`): what must be local to build."""
    text = (recipes_root() / recipe.dockerfile).read_text(encoding="utf-8")
    args: dict[str, str] = {"BASE": BASE_TAG} if recipe.needs_base else {}
    given = {**dict(recipe.buildargs), **(buildargs or {})}
    for raw in text.splitlines():
        words = raw.split()
        if len(words) >= 2 and words[0].upper() == "ARG":
            key, _, default = words[1].partition("=")
            args[key] = given.get(key, default or args.get(key, ""))
        elif len(words) >= 2 and words[0].upper() == "FROM":
            image = words[1]
            for key, value in args.items():
                image = image.replace("${" + key + "}", value).replace("$" + key, value)
            return image
    raise RexmleError(f"{recipe.dockerfile}: no FROM line")


def default_ca_bundle() -> str | None:
    for var in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        if os.environ.get(var) and Path(os.environ[var]).is_file():
            return os.environ[var]
    return None


def build_context(root: Path, recipe: Recipe, into: Path, source: str | Path | None = None) -> Path:
    """A minimal context: the recipe's folder, ``common/``, an empty ``extra-ca.pem`` (the build
    writes the CA bundle into it once the recipe is hashed) and, for a recipe that takes one,
    ``<folder>/source/`` (the ``--source`` checkout, or empty: clone upstream)."""
    for folder in dict.fromkeys(("common", recipe.folder)):  # once: the base recipe's folder is common/ itself
        shutil.copytree(root / folder, into / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (into / "extra-ca.pem").write_bytes(b"")
    if source is not None and not recipe.takes_source:
        raise RexmleError(f"image {recipe.name!r} is built from a released package; --source applies to "
                          f"{', '.join(r.name for r in RECIPES.values() if r.takes_source)}")
    if recipe.takes_source:
        dest = into / recipe.folder / "source"
        if dest.exists():
            shutil.rmtree(dest)
        if source is None:
            dest.mkdir()
        else:
            src = Path(source).expanduser().resolve()
            if not src.is_dir():
                raise RexmleError(f"--source {source}: not a folder")
            shutil.copytree(src, dest, symlinks=True, ignore=SOURCE_IGNORE)
    return into


def context_digest(context: Path, buildargs: dict[str, str], base_id: str | None) -> str:
    """What decides the image's content: every file of the context, the build args and the base's id."""
    digest = hashlib.sha256()
    for path in sorted(p for p in context.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(context).as_posix()
        digest.update(rel.encode() + b"\0")
        digest.update(os.readlink(path).encode() if path.is_symlink() else path.read_bytes())
        digest.update(b"\0")
    for key, value in sorted(buildargs.items()):
        digest.update(f"{key}={value}\0".encode())
    digest.update((base_id or "").encode())
    return digest.hexdigest()[:16]


class BaseNotFetched(RexmleError):
    """A build failed because the engine could not fetch the image its recipe starts ``FROM`` (no route to
    Docker Hub, a registry that refuses): :func:`fetch_routes` says the ways on."""

    def __init__(self, message: str, image: str) -> None:
        super().__init__(message)
        self.image = image


def fetch_routes(image: str, agents: list[str]) -> str:
    """The ways on when the engine cannot fetch ``image``, naming the agents the user asked for (``agents``)."""
    agent = next((a for a in agents if RECIPES[a].needs_base), None)
    routes = [f"load it from a machine that reaches the registry: there `docker pull {image}` and "
              f"`docker save {image} -o base.tar`, here `docker load -i base.tar`; then run this command again"]
    if agent:
        routes.append(f"build on a base this engine has: `rexmle images build --agent {agent} --base IMAGE` "
                      "(`docker images` lists them; nothing is pulled)")
    else:
        routes.append("build on a PyTorch image this engine has: `rexmle images build --agent base --build-arg "
                      "TORCH_IMAGE=IMAGE` (`docker images` lists them)")
    routes.append(f"use a registry mirror: `\"registry-mirrors\": [\"https://MIRROR\"]` in /etc/docker/daemon.json, "
                  f"then restart dockerd (or `docker pull MIRROR/{image}` and `docker tag` it as {image})")
    if agent:  # an agent's image can skip this engine altogether
        routes.append(f"skip the build here: where the image is built, `rexmle images export --agent {agent} FILE`; "
                      "here `rexmle images import FILE` (the local and Slurm runtimes run it without Docker)")
    return (f"this Docker engine does not have {image} and could not fetch it (above); ways on:\n"
            + "\n".join(f"  - {route}" for route in routes))


def local_image(client, name: str):
    """The local engine's image ``name``; None when it has none (nothing is pulled)."""
    try:
        return client.images.get(name)
    except Exception as exc:  # docker.errors.ImageNotFound, without importing docker here
        if exc.__class__.__name__ in ("ImageNotFound", "NotFound"):
            return None
        raise


def build_image(name: str, client, tag: str | None = None, base: str | None = None,
                ca_bundle: str | None = None, nocache: bool = False, network_mode: str | None = None,
                log: Callable[[str], None] = print, source: str | Path | None = None,
                buildargs: dict[str, str] | None = None) -> str:
    """Build one recipe; returns the image id. Raises RexmleError with the build's last lines on failure.

    Skipped (the existing id returned) when ``tag`` already carries this context's ``rexmle.recipe``
    label; ``nocache`` forces a build. ``buildargs`` adds/overrides the Dockerfile's ARGs (e.g. a pin).
    """
    if name not in RECIPES:
        raise RexmleError(f"unknown image {name!r}; known: {', '.join(RECIPES)}")
    recipe = RECIPES[name]
    tag = tag or recipe.tag
    args = {"BASE": base or BASE_TAG} if recipe.needs_base else {}
    args.update(recipe.buildargs)
    args.update(buildargs or {})
    base_id = None
    if recipe.needs_base:
        base_image = local_image(client, args["BASE"])
        if base_image is None:
            raise RexmleError(f"base image {args['BASE']} is not in the local Docker engine (nothing is "
                              "pulled); build it first (`rexmle images build --agent base` for the CUDA "
                              "base, .ci/build-test-image.sh for the offline test base) or pass --base "
                              "with an image `docker images` lists")
        base_id = base_image.id
    tail: list[str] = []
    with tempfile.TemporaryDirectory(prefix="rexmle-image-") as tmp:
        context = build_context(recipes_root(), recipe, Path(tmp), source=source)
        recipe_hash = context_digest(context, args, base_id)
        if ca_bundle:  # a build-time secret of the machine, not part of the recipe nor its hash
            (context / "extra-ca.pem").write_bytes(Path(ca_bundle).read_bytes())
        current = None if nocache else local_image(client, tag)
        if current is not None and (current.labels or {}).get(RECIPE_LABEL) == recipe_hash:
            log(f"{tag} is up to date (recipe {recipe_hash})")
            return current.id
        stream = client.api.build(path=str(context), dockerfile=recipe.dockerfile, tag=tag,
                                  buildargs=args, rm=True, forcerm=True, decode=True, nocache=nocache,
                                  network_mode=network_mode, pull=False, labels={RECIPE_LABEL: recipe_hash})
        image_id = None
        for chunk in stream:
            if "error" in chunk:
                message = f"building {tag} failed: {chunk['error'].strip()}\n" + "".join(tail[-20:])
                start = from_image(recipe, args)
                if local_image(client, start) is None:  # the engine could not fetch what the recipe starts from
                    raise BaseNotFetched(message, start)
                raise RexmleError(message)
            line = chunk.get("stream", "")
            if line:
                tail.append(line)
                if line.strip():
                    log(line.rstrip())
            if "aux" in chunk and "ID" in chunk["aux"]:
                image_id = chunk["aux"]["ID"]
    return image_id or client.images.get(tag).id
