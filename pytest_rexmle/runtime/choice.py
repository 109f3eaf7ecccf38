"""Which runtime a session uses when ``--rexmle-runtime`` is not given: :func:`choose_runtime`.

Why a choice at all: the README's headline, ``pytest --agent=ml-master -k topcow``, names an agent that
exists only as an image. Stopping with "pass --rexmle-runtime=docker" when a Docker engine answers on the
same machine is a usage error the harness can resolve itself. The default stays the local sandbox for
every agent that can run on the host (``sample``, ``command``); an agent that runs only from its image
gets the first runtime of :data:`IMAGE_RUNTIMES` that can run it here, and the session prints which and why
(the terminal header) and records it (``runtime_reason`` in run.json and in the report's settings).

Where no runtime can, the session stops before any run with one message: each candidate and why not.
Docker comes first (a workstation with an engine builds and runs the images itself); the local runtime
runs an image that ``rexmle images import`` unpacked into the cache, under bubblewrap, where no engine
answers (a cluster's login or compute node). ``cannot_run`` asks the agents' isolation, the runtime's own
check, its ``check_image`` and its network.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import RexmleError
from ..images.runnable import agent_of_image
from . import runtime_for
from .base import RuntimeUnavailable

#: the runtime of an agent that can run on the host, when the user names none
DEFAULT_RUNTIME = "local"
#: runtimes tried, in order, for an agent that runs only from its image, when the user names none
IMAGE_RUNTIMES: tuple[str, ...] = ("docker", "local")


@dataclass(frozen=True)
class RuntimeChoice:
    """The session's runtime and why it is that one (``reason`` is printed and recorded)."""

    name: str
    reason: str
    chosen: bool  # False: the user named it (option or ini file)


def runs_on_host(agent) -> bool:
    """Whether the agent starts on the host's own folders (``sample``, ``command`` without ``image=``), not
    from an image, and may run under the local sandbox."""
    allowed = agent.supported_isolation
    return not agent.image and (allowed is None or DEFAULT_RUNTIME in allowed)


def cannot_run(name: str, agents: Iterable, settings) -> str | None:
    """Why runtime ``name`` cannot run ``agents`` here (None: it can): the checks the session makes anyway
    (the agents' isolation, the runtime's own check, the network it must give) on a runtime built from the
    settings as if ``--rexmle-runtime=name`` had been given."""
    runtime = None
    try:
        runtime = runtime_for(dataclasses.replace(settings, runtime=name))
        for agent in agents:
            agent.check_isolation(runtime.isolation, runtime.name)
        runtime.check()
        check_image = getattr(runtime, "check_image", None)  # a runtime that can tell before a run
        for image in dict.fromkeys(agent.image for agent in agents if agent.image):
            if check_image is not None:
                check_image(image)
        runtime.network_notices(settings.network)
    except (RexmleError, RuntimeUnavailable) as exc:
        return str(exc)
    finally:
        if runtime is not None:
            runtime.close()
    return None


def choose_runtime(agents: list, settings) -> RuntimeChoice:
    """The runtime the session runs ``agents`` with; raises RexmleError naming the fixes where none can."""
    if settings.runtime_given:
        return RuntimeChoice(settings.runtime, "--rexmle-runtime", chosen=False)
    image_only = [agent.name for agent in agents if not runs_on_host(agent)]
    if not image_only:
        return RuntimeChoice(DEFAULT_RUNTIME, "the default (bubblewrap or Landlock sandbox on this host)", chosen=True)
    who = f"agent {image_only[0]!r} runs" if len(image_only) == 1 else f"agents {', '.join(image_only)} run"
    refusals = []
    for name in IMAGE_RUNTIMES:
        why_not = cannot_run(name, agents, settings)
        if why_not is None:
            return RuntimeChoice(name, f"{who} only from an image, and the {name} runtime can run it here "
                                       f"(--rexmle-runtime chooses another)", chosen=True)
        refusals.append(f"  {name}: {why_not}")
    first = next(agent for agent in agents if not runs_on_host(agent))
    raise RexmleError(f"{who} only from an image, and no runtime here can run one:\n" + "\n".join(refusals)
                      + "\nstart a Docker engine this user can reach, or import the image where none runs "
                        f"(`{export_command(first.image)}` on a machine with Docker, then `rexmle images "
                        "import FILE` here; see README \"A real run\")")


def export_command(image: str | None) -> str:
    """How to write ``image`` to a FILE where Docker runs: the bundled agent's own export, else ``docker save``."""
    agent = agent_of_image(image) if image else None
    return f"rexmle images export --agent {agent} FILE" if agent else f"docker save {image} -o FILE"
