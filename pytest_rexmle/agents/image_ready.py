"""Before any run: every image the session's agents start is in the local engine, built now where it can be.

Why here and not in each run: a missing image used to surface in every item as a harness ERROR with a
15-line traceback, after the data was generated and the runs were started. The session knows which
images it needs before it starts anything, so it either builds each missing one on demand — its recipe's
``FROM`` chain ends at an image the engine already has (nothing is ever pulled) — showing the build's own
step lines with the elapsed time, or stops with one message naming the command that builds it
(``rexmle images build --agent NAME``) and what that needs first.

Only the docker runtime starts images from this engine; other runtimes are left alone (a Slurm node's
engine is not this one).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from ..errors import RexmleError
from .image_build import RECIPES, Recipe, build_image, default_ca_bundle, from_image, local_image

Log = Callable[[str], None]


def needed_images(agents, default_image: str) -> dict[str, str]:
    """Each image the agents start, with the first agent that starts it (an agent naming none gets the
    runtime's default image)."""
    images: dict[str, str] = {}
    for agent in agents:
        images.setdefault(agent.image or default_image, agent.name)
    return images


def recipe_for(image: str) -> Recipe | None:
    """The bundled recipe whose tag is ``image`` (``rexmle/ml-master`` and ``rexmle/ml-master:latest`` alike)."""
    full = image if ":" in image.rsplit("/", 1)[-1] else f"{image}:latest"
    return next((r for r in RECIPES.values() if r.tag == full), None)


def build_chain(client, image: str) -> tuple[list[Recipe], str | None]:
    """The recipes to build, base first, so that ``image`` exists; and the image that ends the chain when
    it is neither local nor built by a recipe here (then the list cannot be built: nothing is pulled)."""
    chain: list[Recipe] = []
    current = image
    while local_image(client, current) is None:
        recipe = recipe_for(current)
        if recipe is None or recipe in chain:
            return chain, current
        chain.insert(0, recipe)
        current = from_image(recipe)
    return chain, None


def image_problems(agents, runtime) -> list[str]:
    """The images the session cannot have, found without building anything (the session's preflight lists
    them beside its other problems; :func:`ensure_images` builds the rest once none is left)."""
    if runtime.name != "docker":
        return []
    images = needed_images(agents, runtime.settings.image)
    return [_cannot_build(agent, image, missing) for image, agent in images.items()
            if (missing := build_chain(runtime.client, image)[1]) is not None]


def ensure_images(agents, runtime, log: Log | None = None) -> None:
    """Make sure every image the session starts is local; raises RexmleError with the one fix where not."""
    if runtime.name != "docker":
        return
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    client = runtime.client
    for image, agent in needed_images(agents, runtime.settings.image).items():
        chain, missing = build_chain(client, image)
        if missing is not None:
            raise RexmleError(_cannot_build(agent, image, missing))
        for recipe in chain:
            _build(client, recipe, agent, log)


def _cannot_build(agent: str, image: str, missing: str) -> str:
    """Why ``image`` cannot be had during the session (``missing`` ends its recipes' chain) and the fix."""
    target = recipe_for(image)
    if target is None:  # an image of the user's (--agent-option image=, REXMLE_DOCKER_IMAGE)
        return (f"agent {agent!r} runs in the Docker image {image}, which this engine does not have and no "
                f"recipe here builds; build or load it (`docker images` lists what the engine has), then run again")
    steps = f"  docker pull {missing}\n" if missing != image else ""
    via = f" (its recipes start from {missing}, which this engine does not have)" if missing != image else ""
    return (f"agent {agent!r} runs in the Docker image {image}, which is not built, and it cannot be built during "
            f"the session{via}: nothing is pulled while a session runs. Build it once, then run again:\n"
            f"{steps}  rexmle images build --agent {target.name}")


def _build(client, recipe: Recipe, agent: str, log: Log, **build_options) -> None:
    """One recipe, its step lines shown as they come with the elapsed time; a failure names the command.
    ``build_options``: :func:`.image_build.build_image`'s (``base``, ``tag``), for a build on another base."""
    started = time.monotonic()
    tag = build_options.get("tag") or recipe.tag
    log(f"rexmle: building {tag} for agent {agent!r} (recipe pytest_rexmle/agents/{recipe.dockerfile}); "
        f"once per machine")

    def progress(line: str) -> None:  # the engine's step lines; the steps' own output (pip's) stays out
        if line.startswith("Step "):
            log(f"rexmle: [{time.monotonic() - started:6.1f} s] {line}")

    try:
        build_image(recipe.name, client, log=progress, **{"ca_bundle": default_ca_bundle(), **build_options})
    except RexmleError as exc:
        elapsed = time.monotonic() - started
        raise RexmleError(f"{exc}\nbuilding {tag} on demand failed after {elapsed:.0f} s; fix the cause above and "
                          f"build it with `rexmle images build --agent {recipe.name}`") from None
    log(f"rexmle: built {tag} in {time.monotonic() - started:.0f} s")
