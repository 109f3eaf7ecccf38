"""Whether, and how, an image agent runs here without Docker: its unpacked image entered by bubblewrap.

``local_image_refusal`` is the one question other parts ask ("can the local runtime run this image agent
here?"): it answers None, or the reason with what to do instead. Bubblewrap is required because only a
mount namespace can make the image's root the agent's ``/``; Landlock alone would run the agent on the
host's own Python, never what the image holds.
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

from . import store
from .unpack import resolve_inside

#: the host driver's user-space libraries a CUDA program loads (the NVIDIA container toolkit's core set)
DRIVER_LIBRARY = re.compile(r"^(libcuda\.so[.0-9]*|libnvidia-[a-z0-9-]+\.so[.0-9]*|libnvcuvid\.so[.0-9]*)$")

IMPORT_HINT = ("on a machine with Docker: `rexmle images export --agent NAME FILE`; here: "
               "`rexmle images import FILE --tag IMAGE` (into $REXMLE_CACHE_DIR/images, shared by every run)")


def agent_of_image(image: str) -> str | None:
    """The bundled agent whose recipe builds ``image`` (``rexmle/aide:latest`` -> ``aide``), else None."""
    from ..agents.image_ready import recipe_for  # start-up: keeps importlib, tomllib out of the node probe

    recipe = recipe_for(image)
    return recipe.name if recipe is not None else None


def import_hint(image: str) -> str:
    """:data:`IMPORT_HINT` for one image, with the real command: a bundled agent's name in place of ``NAME``,
    or ``docker save`` for an image of the user's (``image=``), which no ``--agent`` exports."""
    agent = agent_of_image(image)
    export = f"rexmle images export --agent {agent} FILE" if agent else f"docker save {image} -o FILE"
    return IMPORT_HINT.replace("rexmle images export --agent NAME FILE", export)


def local_image_refusal(image: str, mechanism: str) -> str | None:
    """None when the local runtime can run ``image`` with sandbox ``mechanism`` here, else why not and the
    alternatives (``mechanism``: what the local runtime picked, ``bwrap``, ``landlock`` or ``none``)."""
    if mechanism != "bwrap":
        return (f"image agents run in their image's root filesystem, which only bubblewrap can make the agent's "
                f"`/`; the {mechanism} sandbox here would run it on this machine's own Python instead. Install "
                "bubblewrap where user namespaces are allowed (`apt-get install bubblewrap`, "
                "--rexmle-sandbox=bwrap), or use --rexmle-runtime=docker where a Docker engine runs, or "
                "--rexmle-runtime=slurm on a cluster whose nodes have bubblewrap")
    found = store.find(image)
    if found is None:
        return f"image {image!r} is not in the image cache ({store.images_home()}); {import_hint(image)}"
    if image_python(found) is None:
        return (f"image {image!r} ({found.digest[:19]}) has no python3 on its PATH: the sandbox's launcher "
                "runs on the image's own Python")
    return None


def image_python(image: store.StoredImage) -> str | None:
    """The image's ``python3`` as the sandbox sees it (a folder of its PATH), or None."""
    for folder in image.env().get("PATH", store.DEFAULT_PATH).split(":"):
        if not folder.startswith("/"):
            continue
        candidate = f"{folder.rstrip('/')}/python3"
        if resolve_inside(image.rootfs, candidate).is_file():
            return candidate
    return None


@functools.lru_cache(maxsize=1)
def driver_libraries() -> tuple[tuple[Path, str], ...]:
    """The host's NVIDIA user-space libraries (``ldconfig -p``, 64-bit), each as (host file, its name):
    bound read-only into a GPU run's image so its CUDA talks to the host's kernel driver."""
    try:
        listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    found: dict[str, Path] = {}
    for line in listing.splitlines():
        name, _, rest = line.strip().partition(" ")
        if not DRIVER_LIBRARY.match(name) or "x86-64" not in rest and "64bit" not in rest:
            continue
        path = Path(rest.rpartition("=> ")[2].strip())
        if name not in found and path.is_file():
            found[name] = path.resolve()
    return tuple((path, name) for name, path in sorted(found.items()))
